//! SGD with (Nesterov) momentum and coupled L2 weight decay, exactly as `torch.optim.SGD` with
//! `dampening = 0`: `g += wd * p; buf = momentum * buf + g` (`buf = g` at the first step);
//! `g = g + momentum * buf` with Nesterov, else `g = buf`; `p -= lr * g`.

use std::collections::HashMap;

use burn::tensor::Tensor;
use libreyolo_families::{ParamId, ParamStore, Value};
use libreyolo_kernels::in_place::sgd_step;

use super::{Groups, Optimizer, Rates, Resolved, Scalars, trainable, zeros_for};

pub struct Sgd {
    pub groups: Resolved,
    pub nesterov: bool,
    buffers: HashMap<ParamId, Tensor<1>>,
}

impl Sgd {
    pub fn new(groups: Groups, nesterov: bool) -> Self {
        Self { groups: Resolved::new(groups), nesterov, buffers: HashMap::new() }
    }
}

impl Optimizer for Sgd {
    fn init_state(&mut self, store: &ParamStore) {
        for (id, _) in trainable(store) {
            self.buffers.entry(id).or_insert_with(|| zeros_for(store, id));
        }
    }

    /// With zero-initialised buffers, `buf = momentum * buf + g` is `g` at the first step,
    /// exactly torch's `buf = g`. A parameter's whole update, momentum buffer included, is one
    /// kernel on the GPU, written into both tensors' own buffers (`in_place::sgd_step`).
    fn step(&mut self, store: &mut ParamStore, grads: Vec<(ParamId, Tensor<1>)>, s: &Scalars) {
        let mut rates = Rates::new(s);
        for (id, grad) in grads {
            let hyper = self.groups.of(store, id);
            let lr = rates.at(hyper.lr_scale);
            // Taken out of the map, so the kernel gets the buffer as its last use (in place).
            let buf = self.buffers.remove(&id).unwrap_or_else(|| grad.zeros_like());
            let mut new_buf = None;
            store.map_value(id, |value| match value {
                Value::Float(p) => Value::Float(libreyolo_families::each_rank!(p, p => {
                    let (p, b) = sgd_step(p, buf, grad, &lr, &s.momentum, hyper.weight_decay, self.nesterov);
                    new_buf = Some(b);
                    p
                })),
                Value::Count(_) => unreachable!("counts have no gradient"),
            });
            self.buffers.insert(id, new_buf.expect("a trainable tensor was updated"));
        }
    }

    fn state(&self, store: &ParamStore) -> Vec<(String, Tensor<1>)> {
        let mut out: Vec<(String, Tensor<1>)> = self.buffers.iter().map(|(id, b)| (format!("{}.momentum_buffer", store.entry(*id).name), b.clone())).collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    fn load_state(&mut self, store: &ParamStore, state: Vec<(String, Tensor<1>)>) {
        for (name, t) in state {
            if let Some(id) = name.strip_suffix(".momentum_buffer").and_then(|n| store.find(n)) {
                self.buffers.insert(id, t);
            }
        }
    }

    fn tensor_names(&self, store: &ParamStore) -> Vec<String> {
        self.buffers.keys().map(|id| format!("{}.momentum_buffer", store.entry(*id).name)).collect()
    }

    fn tensors_mut(&mut self) -> Vec<&mut Tensor<1>> {
        self.buffers.values_mut().collect()
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Distribution, Tensor};
    use libreyolo_families::params::BuildState;

    use super::*;
    use crate::ema::{DecayScalars, Ema};

    /// Keeping every buffer (what a captured whole step needs) changes no value: three SGD and
    /// EMA steps with stable buffers equal the same steps without.
    #[test]
    fn stable_buffers_change_no_value() {
        let device = Device::flex();
        let mut state = BuildState::new(7);
        let mut b = state.builder(&device);
        let w = b.conv_weight(4, 3, 3);
        let bias = b.conv_bias(4, 27);
        let base = state.store;
        let grads: Vec<Vec<(ParamId, Tensor<1>)>> = (0..3)
            .map(|_| {
                vec![(w, Tensor::random([108], Distribution::Normal(0.0, 1.0), &device)), (bias, Tensor::random([4], Distribution::Normal(0.0, 1.0), &device))]
            })
            .collect();
        let run = |stable: bool| {
            let mut store = base.clone();
            store.set_stable_buffers(stable);
            let mut sgd = Sgd::new(super::Groups::by_role(5e-4), true);
            sgd.init_state(&store);
            let mut ema = Ema::new(&store, 0.9999, 2000.0);
            let scalars = Scalars::new(0.01, 0.937, &device);
            for g in &grads {
                sgd.step(&mut store, g.clone(), &scalars);
                ema.update_device(&store, &DecayScalars::new(ema.next_decay(), &device));
            }
            [store.rank4(w).clone().flatten::<1>(0, 3), store.rank1(bias).clone(), ema.store.rank4(w).clone().flatten::<1>(0, 3)]
        };
        let (plain, stable) = (run(false), run(true));
        let moved: f32 = plain[0].clone().sub(base.rank4(w).clone().flatten::<1>(0, 3)).abs().max().into_scalar();
        assert!(moved > 0.0, "the steps changed nothing");
        for (a, b) in plain.into_iter().zip(stable) {
            let diff: f32 = a.sub(b).abs().max().into_scalar();
            assert_eq!(diff, 0.0, "stable buffers changed a value");
        }
    }
}
