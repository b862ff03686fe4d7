//! SGD with (Nesterov) momentum and coupled L2 weight decay, exactly as `torch.optim.SGD` with
//! `dampening = 0`: `g += wd * p; buf = momentum * buf + g` (`buf = g` at the first step);
//! `g = g + momentum * buf` with Nesterov, else `g = buf`; `p -= lr * g`.

use std::collections::HashMap;

use burn::tensor::Tensor;
use libreyolo_families::{ParamId, ParamStore};

use super::{Optimizer, decay_for, flat, update_param};

pub struct Sgd {
    pub weight_decay: f64,
    pub nesterov: bool,
    buffers: HashMap<ParamId, Tensor<1>>,
}

impl Sgd {
    pub fn new(weight_decay: f64, nesterov: bool) -> Self {
        Self { weight_decay, nesterov, buffers: HashMap::new() }
    }
}

impl Optimizer for Sgd {
    fn step(&mut self, store: &mut ParamStore, grads: Vec<(ParamId, Tensor<1>)>, lr: f64, momentum: f64) {
        for (id, grad) in grads {
            let wd = decay_for(store.entry(id).role, self.weight_decay);
            let g = if wd > 0.0 { grad.add(flat(store, id).mul_scalar(wd)) } else { grad };
            let g = if momentum > 0.0 {
                let buf = match self.buffers.get_mut(&id) {
                    Some(buf) => {
                        buf.inplace(|b| b.mul_scalar(momentum).add(g.clone()));
                        buf.clone()
                    }
                    None => {
                        self.buffers.insert(id, g.clone());
                        g.clone()
                    }
                };
                if self.nesterov { g.add(buf.mul_scalar(momentum)) } else { buf }
            } else {
                g
            };
            update_param(store, id, |p| p.sub(g.mul_scalar(lr)));
        }
    }

    fn state(&self, store: &ParamStore) -> Vec<(String, Tensor<1>)> {
        let mut out: Vec<(String, Tensor<1>)> =
            self.buffers.iter().map(|(id, b)| (format!("{}.momentum_buffer", store.entry(*id).name), b.clone())).collect();
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
}
