//! AdamW as `torch.optim.AdamW`: decoupled weight decay `p -= lr * wd * p`, then
//! `m = b1 m + (1 - b1) g`, `v = b2 v + (1 - b2) g^2`, `p -= lr * m_hat / (sqrt(v_hat) + eps)`.

use std::collections::HashMap;

use burn::tensor::Tensor;
use libreyolo_families::{ParamId, ParamStore};

use super::{Optimizer, decay_for, update_param};

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
    /// `momentum` is beta1.
    fn step(&mut self, store: &mut ParamStore, grads: Vec<(ParamId, Tensor<1>)>, lr: f64, beta1: f64) {
        self.steps += 1;
        let (bc1, bc2) = (1.0 - beta1.powi(self.steps as i32), 1.0 - self.beta2.powi(self.steps as i32));
        for (id, g) in grads {
            let wd = decay_for(store.entry(id).role, self.weight_decay);
            let (m, v) = self.moments.entry(id).or_insert_with(|| (g.zeros_like(), g.zeros_like()));
            m.inplace(|m| m.mul_scalar(beta1).add(g.clone().mul_scalar(1.0 - beta1)));
            v.inplace(|v| v.mul_scalar(self.beta2).add(g.clone().square().mul_scalar(1.0 - self.beta2)));
            let step = m.clone().div_scalar(bc1).div(v.clone().div_scalar(bc2).sqrt().add_scalar(self.eps)).mul_scalar(lr);
            update_param(store, id, |p| p.mul_scalar(1.0 - lr * wd).sub(step));
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
}
