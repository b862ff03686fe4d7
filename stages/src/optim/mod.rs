//! Optimizers that update the parameter store in place, so the parameters keep their device
//! buffers (a captured graph reads them there). Parameter groups follow LibreYOLO:
//! BatchNorm weights and all biases get no weight decay, other weights get `weight_decay`.

pub mod adamw;
pub mod sgd;

use burn::tensor::Tensor;
use libreyolo_families::{ParamId, ParamStore, Role, Value};

pub use adamw::AdamW;
pub use sgd::Sgd;

/// Weight decay of a parameter by its role.
pub fn decay_for(role: Role, weight_decay: f64) -> f64 {
    if role == Role::Weight { weight_decay } else { 0.0 }
}

/// Writes `update(p)` into the parameter `id` in place (same shape).
pub(crate) fn update_param(store: &mut ParamStore, id: ParamId, update: impl FnOnce(Tensor<1>) -> Tensor<1>) {
    match &mut store.entry_mut(id).value {
        Value::Rank4(t) => {
            let dims = t.dims();
            t.inplace(|p| update(p.reshape([dims.iter().product::<usize>()])).reshape(dims));
        }
        Value::Rank1(t) => t.inplace(update),
        Value::Count(_) => {}
    }
}

/// A parameter as a flat vector (a view, no copy).
pub(crate) fn flat(store: &ParamStore, id: ParamId) -> Tensor<1> {
    match &store.entry(id).value {
        Value::Rank4(t) => t.clone().reshape([t.shape().num_elements()]),
        Value::Rank1(t) => t.clone(),
        Value::Count(_) => unreachable!("counts have no gradient"),
    }
}

/// A step over the gradients of one backward pass.
pub trait Optimizer {
    /// Applies one update with learning rate `lr` and momentum (SGD) or beta1 (AdamW).
    fn step(&mut self, store: &mut ParamStore, grads: Vec<(ParamId, Tensor<1>)>, lr: f64, momentum: f64);
    /// The optimizer state, by parameter name, for checkpoints.
    fn state(&self, store: &ParamStore) -> Vec<(String, Tensor<1>)>;
    /// Restores state saved by `state`.
    fn load_state(&mut self, store: &ParamStore, state: Vec<(String, Tensor<1>)>);
}
