//! AdamW as `torch.optim.AdamW`: decoupled weight decay `p -= lr * wd * p`, then
//! `m = b1 m + (1 - b1) g`, `v = b2 v + (1 - b2) g^2`, `p -= lr * m_hat / (sqrt(v_hat) + eps)`.

use std::collections::HashMap;

use burn::tensor::Tensor;
use libreyolo_families::params::update_in_place;
use libreyolo_families::{ParamId, ParamStore};

use super::{Optimizer, Scalars, decay_for, trainable, update_param, zeros_for};

pub struct AdamW {
    pub weight_decay: f64,
    pub beta2: f64,
    pub eps: f64,
    steps: u64,
    moments: HashMap<ParamId, (Tensor<1>, Tensor<1>)>,
}

impl AdamW {
    pub fn new(weight_decay: f64) -> Self {
        Self { weight_decay, beta2: 0.999, eps: 1e-8, steps: 0, moments: HashMap::new() }
    }
}

impl Optimizer for AdamW {
    fn init_state(&mut self, store: &ParamStore) {
        for (id, _) in trainable(store) {
            self.moments.entry(id).or_insert_with(|| (zeros_for(store, id), zeros_for(store, id)));
        }
    }

    /// Bias corrections with this step's beta1, as torch computes them.
    fn scalars(&self, lr: f64, beta1: f64) -> [f64; 5] {
        let t = (self.steps + 1) as i32;
        [lr, beta1, 1.0 - beta1, 1.0 - beta1.powi(t), 1.0 - self.beta2.powi(t)]
    }

    fn step(&mut self, store: &mut ParamStore, grads: Vec<(ParamId, Tensor<1>)>, s: &Scalars) {
        let (b2, eps) = (self.beta2, self.eps);
        let stable = store.stable_buffers();
        for (id, g) in grads {
            let wd = decay_for(store.entry(id).role, self.weight_decay);
            let (m, v) = self.moments.entry(id).or_insert_with(|| (g.zeros_like(), g.zeros_like()));
            update_in_place(m, stable, |m| m.mul(s.momentum.clone()).add(g.clone().mul(s.one_minus_momentum.clone())));
            update_in_place(v, stable, |v| v.mul_scalar(b2).add(g.clone().square().mul_scalar(1.0 - b2)));
            let step = m.clone().div(s.bias1.clone()).div(v.clone().div(s.bias2.clone()).sqrt().add_scalar(eps)).mul(s.lr.clone());
            let keep = s.lr.clone().mul_scalar(-wd).add_scalar(1.0);
            update_param(store, id, |p| p.mul(keep).sub(step));
        }
    }

    fn finish_step(&mut self) {
        self.steps += 1;
    }

    /// The bias corrections continue from the checkpoint's step count.
    fn resume_steps(&mut self, steps: u64) {
        self.steps = steps;
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

    fn tensors_mut(&mut self) -> Vec<&mut Tensor<1>> {
        self.moments.values_mut().flat_map(|(m, v)| [m, v]).collect()
    }
}
