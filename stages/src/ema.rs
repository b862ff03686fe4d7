//! Exponential moving average of every float tensor of the model, BatchNorm statistics
//! included (LibreYOLO's `ModelEMA`): `v = d * v + (1 - d) * model_v` with
//! `d = decay * (1 - exp(-updates / tau))`, updated in place after each optimizer step in two
//! halves: on the device (`update_device`, `d` read from device scalars so that a captured step
//! can replay it) and on the host (`finish_update`).

use burn::tensor::{Device, Tensor};
use libreyolo_families::params::TensorMut;
use libreyolo_families::{ParamStore, Value};
use libreyolo_kernels::in_place::blend;

use crate::optim::{device_scalar, write_scalar};

pub struct Ema {
    pub decay: f64,
    pub tau: f64,
    pub updates: u64,
    /// The averaged copy; validation and `best` use it.
    pub store: ParamStore,
}

impl Ema {
    pub fn new(model: &ParamStore, decay: f64, tau: f64) -> Self {
        Self { decay, tau, updates: 0, store: deep_copy(model) }
    }

    /// The decay used by the next update.
    pub fn next_decay(&self) -> f64 {
        self.decay * (1.0 - (-((self.updates + 1) as f64) / self.tau).exp())
    }

    /// The device half: `v = d * v + (1 - d) * model_v` in place for every float tensor
    /// (`in_place::blend`, one kernel a tensor on the GPU).
    pub fn update_device(&mut self, model: &ParamStore, d: &DecayScalars) {
        for i in 0..model.len() {
            let id = libreyolo_families::ParamId(i);
            let source = model.entry(id).value.clone();
            self.store.map_value(id, |average| match (average, source) {
                (Value::Float(e), Value::Float(m)) => Value::Float(libreyolo_families::each_rank2!(e, m, e, m => blend(e, m, &d.decay, &d.one_minus))),
                (count @ Value::Count(_), Value::Count(_)) => count,
                _ => unreachable!("the EMA mirrors the model"),
            });
        }
    }

    /// The host half: counts copied, one more update.
    pub fn finish_update(&mut self, model: &ParamStore) {
        self.updates += 1;
        for i in 0..model.len() {
            let id = libreyolo_families::ParamId(i);
            if let (Value::Count(e), Value::Count(m)) = (&mut self.store.entry_mut(id).value, &model.entry(id).value) {
                *e = *m;
            }
        }
    }

    /// Every float tensor of the average, to snapshot and restore around a graph capture.
    pub fn tensors_mut(&mut self) -> Vec<TensorMut<'_>> {
        self.store.tensors_mut()
    }
}

/// The decay of one update as device scalars (`[1]`), refreshed in place per step.
#[derive(Debug, Clone)]
pub struct DecayScalars {
    pub decay: Tensor<1>,
    pub one_minus: Tensor<1>,
}

impl DecayScalars {
    pub fn new(decay: f64, device: &Device) -> Self {
        Self { decay: device_scalar(decay, device), one_minus: device_scalar(1.0 - decay, device) }
    }

    pub fn write(&mut self, decay: f64) {
        write_scalar(&mut self.decay, decay);
        write_scalar(&mut self.one_minus, 1.0 - decay);
    }
}

/// A copy with its own device buffers (a plain clone would share them).
pub fn deep_copy(store: &ParamStore) -> ParamStore {
    let mut out = store.clone();
    for i in 0..out.len() {
        let e = out.entry_mut(libreyolo_families::ParamId(i));
        e.value = match &e.value {
            Value::Float(t) => Value::Float(t.deep_copy()),
            Value::Count(n) => Value::Count(*n),
        };
    }
    out
}
