//! AdamW as `torch.optim.AdamW`: decoupled weight decay `p -= lr * wd * p`, then
//! `m = b1 m + (1 - b1) g`, `v = b2 v + (1 - b2) g^2`, `p -= lr * m_hat / (sqrt(v_hat) + eps)`.
//! The step count behind the bias corrections `m_hat = m / (1 - b1^t)`, `v_hat = v / (1 - b2^t)`
//! is a device scalar advanced by the step itself: a captured step that fp16's loss scale skips
//! puts it back with the moments, as `GradScaler` skipping `optimizer.step()` leaves torch's.

use std::collections::{BTreeMap, HashMap};

use burn::tensor::Tensor;
use libreyolo_families::tensor::update_in_place;
use libreyolo_families::{ParamId, ParamStore};
use libreyolo_kernels::in_place::{AdamWConstants, AdamWScalars, adamw_many};

use super::{Groups, Optimizer, Rates, Resolved, Scalars, by_hyper, device_scalar, put_param, take_param, trainable, write_scalar, zeros_for};

pub struct AdamW {
    pub groups: Resolved,
    pub beta2: f64,
    pub eps: f64,
    /// Steps taken (`[1]`, f32, exact to 2^24), on the device; created by `init_state`.
    steps: Option<Tensor<1>>,
    /// Where the count starts (a resumed run's step count; resume comes before `init_state`).
    resumed_at: u64,
    /// Ordered by parameter, as SGD's buffers: `tensors_mut` must list them in the same order
    /// every step (a capture compares and restores the state by position), and a step takes a
    /// whole group out before it puts it back, which would reshuffle a hash map's order.
    moments: BTreeMap<ParamId, (Tensor<1>, Tensor<1>)>,
}

impl AdamW {
    pub fn new(groups: Groups) -> Self {
        Self { groups: Resolved::new(groups), beta2: 0.999, eps: 1e-8, steps: None, resumed_at: 0, moments: BTreeMap::new() }
    }

    /// Advances the step count; this step's bias corrections `(1 - b1^t, 1 - b2^t)`, with this
    /// step's beta1 (the warm-up moves it), as torch computes them.
    fn next_bias_corrections(&mut self, store: &ParamStore, beta1: &Tensor<1>) -> (Tensor<1>, Tensor<1>) {
        let steps = self.steps.get_or_insert_with(|| new_count(store, self.resumed_at));
        update_in_place(steps, store.stable_buffers(), |t| t.add_scalar(1.0));
        let t = steps.clone();
        let bias1 = beta1.clone().powf(t.clone()).neg().add_scalar(1.0);
        let bias2 = t.mul_scalar(self.beta2.ln()).exp().neg().add_scalar(1.0);
        (bias1, bias2)
    }
}

/// A step count of `steps` on the device of `store`'s parameters.
fn new_count(store: &ParamStore, steps: u64) -> Tensor<1> {
    let (first, _) = trainable(store).next().expect("a network has trainable parameters");
    device_scalar(steps as f64, &zeros_for(store, first).device())
}

impl Optimizer for AdamW {
    fn init_state(&mut self, store: &ParamStore) {
        for (id, _) in trainable(store) {
            self.moments.entry(id).or_insert_with(|| (zeros_for(store, id), zeros_for(store, id)));
        }
        self.steps.get_or_insert_with(|| new_count(store, self.resumed_at));
    }

    /// The parameters of one rate and decay update together, both moments included, as one
    /// operation (`in_place::adamw_many`: on the GPU 16 parameters a kernel, each tensor written
    /// into its own buffer).
    fn step(&mut self, store: &mut ParamStore, grads: Vec<(ParamId, Tensor<1>)>, s: &Scalars) {
        let (bias1, bias2) = self.next_bias_corrections(store, &s.momentum);
        let mut rates = Rates::new(s);
        for (hyper, members) in by_hyper(&mut self.groups, store, grads) {
            let lr = rates.at(hyper.lr_scale);
            let scalars = AdamWScalars { lr: &lr, beta1: &s.momentum, one_minus_beta1: &s.one_minus_momentum, bias1: &bias1, bias2: &bias2 };
            let constants = AdamWConstants { beta2: self.beta2, eps: self.eps, weight_decay: hyper.weight_decay };
            let (mut placed, mut params, mut exp_avgs, mut exp_avg_sqs, mut flat_grads) = (vec![], vec![], vec![], vec![], vec![]);
            for (id, grad) in members {
                // Taken out of the store and the map, so the kernel gets each as its last use.
                let (rank, p) = take_param(store, id);
                let (m, v) = self.moments.remove(&id).unwrap_or_else(|| (grad.zeros_like(), grad.zeros_like()));
                placed.push((id, rank));
                params.push(p);
                exp_avgs.push(m.into_dispatch());
                exp_avg_sqs.push(v.into_dispatch());
                flat_grads.push(grad.into_dispatch());
            }
            let (params, exp_avgs, exp_avg_sqs) = adamw_many(params, exp_avgs, exp_avg_sqs, flat_grads, &scalars, constants);
            for (((id, rank), p), (m, v)) in placed.into_iter().zip(params).zip(exp_avgs.into_iter().zip(exp_avg_sqs)) {
                put_param(store, id, rank, p);
                self.moments.insert(id, (Tensor::from_dispatch(m), Tensor::from_dispatch(v)));
            }
        }
    }

    /// The bias corrections continue from the checkpoint's step count.
    fn resume_steps(&mut self, steps: u64) {
        self.resumed_at = steps;
        if let Some(t) = self.steps.as_mut() {
            write_scalar(t, steps as f64);
        }
    }

    fn state(&self, store: &ParamStore) -> Vec<(String, Tensor<1>)> {
        let mut out = vec![];
        for (id, (m, v)) in &self.moments {
            let name = &store.entry(*id).name;
            out.push((format!("{name}.exp_avg"), m.clone()));
            out.push((format!("{name}.exp_avg_sq"), v.clone()));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    fn load_state(&mut self, store: &ParamStore, state: Vec<(String, Tensor<1>)>) {
        let mut avg: HashMap<ParamId, Tensor<1>> = HashMap::new();
        let mut sq: HashMap<ParamId, Tensor<1>> = HashMap::new();
        for (name, t) in state {
            if let Some(id) = name.strip_suffix(".exp_avg").and_then(|n| store.find(n)) {
                avg.insert(id, t);
            } else if let Some(id) = name.strip_suffix(".exp_avg_sq").and_then(|n| store.find(n)) {
                sq.insert(id, t);
            }
        }
        for (id, m) in avg {
            if let Some(v) = sq.remove(&id) {
                self.moments.insert(id, (m, v));
            }
        }
    }

    fn tensor_names(&self, store: &ParamStore) -> Vec<String> {
        let moments = self.moments.keys().flat_map(|id| {
            let name = &store.entry(*id).name;
            [format!("{name}.exp_avg"), format!("{name}.exp_avg_sq")]
        });
        self.steps.iter().map(|_| "step".to_string()).chain(moments).collect()
    }

    fn tensors_mut(&mut self) -> Vec<&mut Tensor<1>> {
        self.steps.iter_mut().chain(self.moments.values_mut().flat_map(|(m, v)| [m, v])).collect()
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Distribution, Tensor};
    use libreyolo_families::params::BuildState;

    use super::*;

    /// Three steps against torch.optim.AdamW's formulas computed here in f64 (a decayed weight
    /// and an undecayed bias, beta1 moved between steps as the warm-up does), to 2e-4 of the
    /// learning rate (f32 rounding; a step count off by one moves an update by 10% and more); then a step whose count is put back (what fp16's skip does) repeats the previous
    /// step's bias corrections.
    #[test]
    fn matches_torch_adamw_and_counts_steps_on_the_device() {
        let device = Device::flex();
        let mut state = BuildState::new(3);
        let mut b = state.builder(&device);
        let (w, bias) = (b.conv_weight(2, 2, 1), b.conv_bias(2, 2));
        let mut store = state.store;
        let values = |t: Tensor<1>| t.into_data().convert::<f64>().try_to_vec::<f64>().unwrap();
        let mut p: Vec<Vec<f64>> = vec![values(store.rank4(w).clone().flatten(0, 3)), values(store.rank1(bias).clone())];
        let mut m = vec![vec![0.0; 4], vec![0.0; 2]];
        let mut v = m.clone();
        let (lr, wd, b2, eps) = (0.01, 0.05, 0.999, 1e-8);
        let mut adamw = AdamW::new(super::Groups::by_role(wd));
        adamw.init_state(&store);
        for (t, beta1) in [(1, 0.8), (2, 0.85), (3, 0.9)] {
            let grads: Vec<Tensor<1>> = [4, 2].iter().map(|&n| Tensor::random([n], Distribution::Normal(0.0, 1.0), &device)).collect();
            for (k, g) in grads.iter().enumerate() {
                let decay = if k == 0 { wd } else { 0.0 };
                for (i, g) in values(g.clone()).into_iter().enumerate() {
                    m[k][i] = beta1 * m[k][i] + (1.0 - beta1) * g;
                    v[k][i] = b2 * v[k][i] + (1.0 - b2) * g * g;
                    let (m_hat, v_hat) = (m[k][i] / (1.0 - f64::powi(beta1, t)), v[k][i] / (1.0 - f64::powi(b2, t)));
                    p[k][i] = p[k][i] * (1.0 - lr * decay) - lr * m_hat / (v_hat.sqrt() + eps);
                }
            }
            adamw.step(&mut store, vec![(w, grads[0].clone()), (bias, grads[1].clone())], &Scalars::new(lr, beta1, &device));
            let got = [values(store.rank4(w).clone().flatten(0, 3)), values(store.rank1(bias).clone())];
            for (want, got) in p.iter().flatten().zip(got.iter().flatten()) {
                assert!((want - got).abs() < 2e-4 * lr, "step {t}: {got} where torch's formula gives {want}");
            }
        }
        let count = |a: &mut AdamW| values(a.tensors_mut()[0].clone())[0];
        assert_eq!(count(&mut adamw), 3.0);
        // A skipped 4th step: the count goes back with the rest of the state; the next step is
        // the 4th again.
        let before = count(&mut adamw);
        let (bias1, _) = adamw.next_bias_corrections(&store, &device_scalar(0.9, &device));
        write_scalar(adamw.tensors_mut()[0], before);
        let (again, _) = adamw.next_bias_corrections(&store, &device_scalar(0.9, &device));
        assert_eq!(values(bias1.clone()), values(again));
        assert!((values(bias1)[0] - (1.0 - 0.9f64.powi(4))).abs() < 1e-6);
        // Resume sets the count before the state exists (the trainer resumes, then inits).
        let mut resumed = AdamW::new(super::Groups::by_role(wd));
        resumed.resume_steps(41);
        resumed.init_state(&store);
        assert_eq!(count(&mut resumed), 41.0);
    }

    /// Declared groups reach the update: the weight in a group at half the rate and no decay,
    /// the bias in none (the base rate and the base decay, although a bias), one first step each
    /// (`m_hat = g`, `v_hat = g^2`) against torch's formula in f64.
    #[test]
    fn a_group_scales_the_rate_and_sets_the_decay() {
        let device = Device::flex();
        let mut state = BuildState::new(5);
        let mut b = state.builder(&device);
        let (w, bias) = (b.pp("backbone").conv_weight(2, 2, 1), b.pp("head").conv_bias(2, 2));
        let mut store = state.store;
        let values = |t: Tensor<1>| t.into_data().convert::<f64>().try_to_vec::<f64>().unwrap();
        let before = [values(store.rank4(w).clone().flatten(0, 3)), values(store.rank1(bias).clone())];
        let (lr, wd, eps) = (0.01, 0.05, 1e-8);
        let group = crate::optim::Group { names: vec![regex::Regex::new("^backbone").unwrap()], lr_scale: 0.5, weight_decay: Some(0.0) };
        let mut adamw = AdamW::new(crate::optim::Groups { weight_decay: wd, groups: vec![group] });
        adamw.init_state(&store);
        let grads: Vec<Tensor<1>> = [4, 2].iter().map(|&n| Tensor::random([n], Distribution::Normal(0.0, 1.0), &device)).collect();
        adamw.step(&mut store, vec![(w, grads[0].clone()), (bias, grads[1].clone())], &Scalars::new(lr, 0.9, &device));
        let after = [values(store.rank4(w).clone().flatten(0, 3)), values(store.rank1(bias).clone())];
        for (k, (scale, decay)) in [(0.5, 0.0), (1.0, wd)].into_iter().enumerate() {
            for ((p, got), g) in before[k].iter().zip(&after[k]).zip(values(grads[k].clone())) {
                let want = p * (1.0 - lr * scale * decay) - lr * scale * g / (g.abs() + eps);
                assert!((want - got).abs() < 1e-6, "parameter {k}: {got} where the group's rate and decay give {want}");
            }
        }
    }
}
