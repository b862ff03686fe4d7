//! Optimizers that update the parameter store in place, so the parameters keep their device
//! buffers (a captured graph reads them there). Each parameter's learning-rate scale and weight
//! decay come from its group ([`groups`]): by default, as LibreYOLO's YOLO trainers, BatchNorm
//! weights and all biases get no weight decay and other weights get `weight_decay`.

pub mod adamw;
pub mod groups;
pub mod sgd;

use burn::backend::Dispatch;
use burn::backend::tensor::FloatTensor;
use burn::tensor::{Device, Tensor, TensorData};
use libreyolo_families::tensor::AnyTensor;
use libreyolo_families::{ParamId, ParamStore, Value};

pub use adamw::AdamW;
pub use groups::{Group, Groups, Hyper, Resolved};
pub use sgd::Sgd;

/// This step's learning rate at each scale the groups set: the device scalar, scaled on the
/// device (so a replayed graph reads the new step's rate), once a scale rather than once a
/// parameter.
pub(crate) struct Rates<'a> {
    scalars: &'a Scalars,
    scaled: Vec<(f64, Tensor<1>)>,
}

impl<'a> Rates<'a> {
    pub(crate) fn new(scalars: &'a Scalars) -> Self {
        Self { scalars, scaled: vec![] }
    }

    /// The rate of a parameter whose group scales it by `scale`.
    pub(crate) fn at(&mut self, scale: f64) -> Tensor<1> {
        if scale == 1.0 {
            return self.scalars.lr.clone();
        }
        if let Some((_, t)) = self.scaled.iter().find(|(s, _)| *s == scale) {
            return t.clone();
        }
        let t = self.scalars.lr.clone().mul_scalar(scale);
        self.scaled.push((scale, t.clone()));
        t
    }
}

/// The gradients grouped by their parameters' (rate scale, decay), groups in the order they
/// first appear: one list operation a group.
pub(crate) fn by_hyper(groups: &mut Resolved, store: &ParamStore, grads: Vec<(ParamId, Tensor<1>)>) -> Vec<(Hyper, Vec<(ParamId, Tensor<1>)>)> {
    let mut out: Vec<(Hyper, Vec<(ParamId, Tensor<1>)>)> = Vec::new();
    for (id, grad) in grads {
        let hyper = groups.of(store, id);
        match out.iter_mut().find(|(h, _)| *h == hyper) {
            Some((_, members)) => members.push((id, grad)),
            None => out.push((hyper, vec![(id, grad)])),
        }
    }
    out
}

/// Takes parameter `id` out of the store (its rank and primitive), leaving a placeholder: the
/// list operation then gets it as its last use and may write its buffer in place.
pub(crate) fn take_param(store: &mut ParamStore, id: ParamId) -> (usize, FloatTensor<Dispatch>) {
    match std::mem::replace(&mut store.entry_mut(id).value, Value::Count(0)) {
        Value::Float(p) => p.into_primitive(),
        Value::Count(_) => unreachable!("counts have no gradient"),
    }
}

/// Puts parameter `id` back after [`take_param`].
pub(crate) fn put_param(store: &mut ParamStore, id: ParamId, rank: usize, p: FloatTensor<Dispatch>) {
    store.entry_mut(id).value = Value::Float(AnyTensor::from_primitive(rank, p));
}

/// A parameter as a flat vector (a view, no copy).
pub(crate) fn flat(store: &ParamStore, id: ParamId) -> Tensor<1> {
    store.entry(id).value.flat().expect("counts have no gradient")
}

/// This step's hyper-parameters as device scalars (shape `[1]`): a captured step reads them
/// from these stable buffers, refreshed in place before each replay, instead of constants baked
/// into its kernels. The schedule's values: the learning rate and the momentum (SGD's momentum
/// or AdamW's beta1).
#[derive(Debug, Clone)]
pub struct Scalars {
    pub lr: Tensor<1>,
    pub momentum: Tensor<1>,
    pub one_minus_momentum: Tensor<1>,
}

impl Scalars {
    pub fn new(lr: f64, momentum: f64, device: &Device) -> Self {
        let t = |v: f64| device_scalar(v, device);
        Self { lr: t(lr), momentum: t(momentum), one_minus_momentum: t(1.0 - momentum) }
    }

    /// Writes this step's values into the same buffers.
    pub fn write(&mut self, lr: f64, momentum: f64) {
        for (t, v) in [&mut self.lr, &mut self.momentum, &mut self.one_minus_momentum].into_iter().zip([lr, momentum, 1.0 - momentum]) {
            write_scalar(t, v);
        }
    }
}

/// Multiplies every gradient by the `[1]` tensor `by`. Each gradient is moved into its product,
/// so one held by no other handle is scaled in place (no new buffer per gradient).
pub fn scale_gradients(grads: &mut Vec<(ParamId, Tensor<1>)>, by: &Tensor<1>) {
    *grads = std::mem::take(grads).into_iter().map(|(id, g)| (id, g.mul(by.clone()))).collect();
}

/// `value` as an f32 tensor of shape `[1]` on `device`.
pub fn device_scalar(value: f64, device: &Device) -> Tensor<1> {
    Tensor::<1>::from_data(TensorData::new(vec![value as f32], [1]), device)
}

/// Writes `value` into the `[1]` tensor `t`, in place (its buffer stays the one a graph reads).
pub fn write_scalar(t: &mut Tensor<1>, value: f64) {
    let new = device_scalar(value, &t.device());
    libreyolo_families::tensor::write_into(t, new);
}

/// A step over the gradients of one backward pass, device work only: its whole state lives in
/// [`tensors_mut`](Optimizer::tensors_mut), so a captured step replays it, and a step skipped
/// for a non-finite fp16 gradient puts all of it back (step counts included) with nothing read.
pub trait Optimizer {
    /// Allocates the state of every trainable parameter (zeros), so that every step, the first
    /// included, runs the same operations on the same buffers.
    fn init_state(&mut self, store: &ParamStore);
    /// Applies one update with this step's scalars (momentum is SGD's momentum or AdamW's beta1).
    fn step(&mut self, store: &mut ParamStore, grads: Vec<(ParamId, Tensor<1>)>, scalars: &Scalars);
    /// Continues after `steps` optimizer steps (resume).
    fn resume_steps(&mut self, _steps: u64) {}
    /// The optimizer state, by parameter name, for checkpoints.
    fn state(&self, store: &ParamStore) -> Vec<(String, Tensor<1>)>;
    /// Restores state saved by `state`.
    fn load_state(&mut self, store: &ParamStore, state: Vec<(String, Tensor<1>)>);
    /// The names of [`tensors_mut`](Optimizer::tensors_mut)'s tensors, in its order (a refused
    /// capture's report).
    fn tensor_names(&self, store: &ParamStore) -> Vec<String>;
    /// Every state tensor, to snapshot and restore around a graph capture.
    fn tensors_mut(&mut self) -> Vec<&mut Tensor<1>>;
}

/// The trainable parameters of `store` with their flat sizes.
pub(crate) fn trainable(store: &ParamStore) -> impl Iterator<Item = (ParamId, usize)> + '_ {
    store.entries().iter().enumerate().filter(|(_, e)| e.trains()).map(|(i, e)| (ParamId(i), e.value.shape().iter().product::<usize>()))
}

/// A zero vector on the parameter's device and dtype.
pub(crate) fn zeros_for(store: &ParamStore, id: ParamId) -> Tensor<1> {
    flat(store, id).zeros_like()
}

#[cfg(test)]
mod tests {
    use burn::tensor::Distribution;
    use libreyolo_families::params::BuildState;

    use super::*;

    /// `tensor_names` follows `tensors_mut`: each named tensor is the one `state` saves (for a
    /// checkpoint) under that name, for both optimizers.
    #[test]
    fn tensor_names_follow_tensors_mut() {
        let device = Device::flex();
        let mut state = BuildState::new(3);
        let mut b = state.builder(&device);
        let (w, bias) = (b.conv_weight(2, 2, 1), b.conv_bias(2, 2));
        let mut store = state.store;
        let optimizers: [Box<dyn Optimizer>; 2] = [Box::new(sgd::Sgd::new(Groups::by_role(5e-4), true)), Box::new(adamw::AdamW::new(Groups::by_role(0.05)))];
        for mut o in optimizers {
            o.init_state(&store);
            let grads =
                vec![(w, Tensor::random([4], Distribution::Normal(0.0, 1.0), &device)), (bias, Tensor::random([2], Distribution::Normal(0.0, 1.0), &device))];
            o.step(&mut store, grads, &Scalars::new(0.01, 0.9, &device));
            let names = o.tensor_names(&store);
            let saved = o.state(&store);
            let tensors: Vec<Tensor<1>> = o.tensors_mut().into_iter().map(|t| t.clone()).collect();
            assert_eq!(names.len(), tensors.len());
            let mut compared = 0;
            for (name, t) in names.iter().zip(tensors) {
                if let Some((_, s)) = saved.iter().find(|(n, _)| n == name) {
                    let diff: f32 = t.sub(s.clone()).abs().max().into_scalar();
                    assert_eq!(diff, 0.0, "{name}");
                    compared += 1;
                }
            }
            assert!(compared >= 2, "{names:?}");
        }
    }
}
