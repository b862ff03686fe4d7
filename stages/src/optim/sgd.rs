//! SGD with (Nesterov) momentum and coupled L2 weight decay, exactly as `torch.optim.SGD` with
//! `dampening = 0`: `g += wd * p; buf = momentum * buf + g` (`buf = g` at the first step);
//! `g = g + momentum * buf` with Nesterov, else `g = buf`; `p -= lr * g`.

use std::collections::BTreeMap;

use burn::tensor::Tensor;
use libreyolo_families::{ParamId, ParamStore};
use libreyolo_kernels::in_place::sgd_many;

use super::{Groups, Optimizer, Rates, Resolved, Scalars, by_hyper, put_param, take_param, trainable, zeros_for};

pub struct Sgd {
    pub groups: Resolved,
    pub nesterov: bool,
    /// Ordered by parameter: `tensors_mut` must list them in the same order every step (a
    /// capture compares and restores the state by position), and a step takes a whole group out
    /// before it puts it back, which would reshuffle a hash map's order.
    buffers: BTreeMap<ParamId, Tensor<1>>,
}

impl Sgd {
    pub fn new(groups: Groups, nesterov: bool) -> Self {
        Self { groups: Resolved::new(groups), nesterov, buffers: BTreeMap::new() }
    }
}

impl Optimizer for Sgd {
    fn init_state(&mut self, store: &ParamStore) {
        for (id, _) in trainable(store) {
            self.buffers.entry(id).or_insert_with(|| zeros_for(store, id));
        }
    }

    /// With zero-initialised buffers, `buf = momentum * buf + g` is `g` at the first step,
    /// exactly torch's `buf = g`. The parameters of one rate and decay update together, momentum
    /// buffers included, as one operation (`in_place::sgd_many`: on the GPU 16 parameters a
    /// kernel, each written into its own buffers).
    fn step(&mut self, store: &mut ParamStore, grads: Vec<(ParamId, Tensor<1>)>, s: &Scalars) {
        let mut rates = Rates::new(s);
        for (hyper, members) in by_hyper(&mut self.groups, store, grads) {
            let lr = rates.at(hyper.lr_scale);
            let (mut placed, mut params, mut buffers, mut flat_grads) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for (id, grad) in members {
                // Taken out of the store and the map, so the kernel gets each as its last use.
                let (rank, p) = take_param(store, id);
                placed.push((id, rank));
                params.push(p);
                buffers.push(self.buffers.remove(&id).unwrap_or_else(|| grad.zeros_like()).into_dispatch());
                flat_grads.push(grad.into_dispatch());
            }
            let (params, buffers) = sgd_many(params, buffers, flat_grads, &lr, &s.momentum, hyper.weight_decay, self.nesterov);
            for ((id, rank), (p, b)) in placed.into_iter().zip(params.into_iter().zip(buffers)) {
                put_param(store, id, rank, p);
                self.buffers.insert(id, Tensor::from_dispatch(b));
            }
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
