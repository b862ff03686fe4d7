//! Exponential moving average of every float tensor of the model, BatchNorm statistics
//! included (LibreYOLO's `ModelEMA`): `v = d * v + (1 - d) * model_v` with
//! `d = decay * (1 - exp(-updates / tau))`, updated in place after each optimizer step in two
//! halves: on the device (`update_device`, `d` read from device scalars so that a captured step
//! can replay it) and on the host (`finish_update`).

use burn::tensor::{Device, Tensor};
use libreyolo_families::params::TensorMut;
use libreyolo_families::tensor::AnyTensor;
use libreyolo_families::{ParamId, ParamStore, Value};
use libreyolo_kernels::in_place::blend_many;

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

    /// The device half: `v = d * v + (1 - d) * model_v` in place for every float tensor, as one
    /// operation (`in_place::blend_many`: on the GPU one kernel per 16 tensors).
    pub fn update_device(&mut self, model: &ParamStore, d: &DecayScalars) {
        let floats: Vec<ParamId> = (0..model.len()).map(ParamId).filter(|&id| matches!(model.entry(id).value, Value::Float(_))).collect();
        let (mut ranks, mut averages, mut sources) = (Vec::new(), Vec::new(), Vec::new());
        for &id in &floats {
            // Moved out of the store, each average is its buffer's last use: blended in place.
            let average = std::mem::replace(&mut self.store.entry_mut(id).value, Value::Count(0));
            let (Value::Float(average), Value::Float(source)) = (average, &model.entry(id).value) else { unreachable!("the EMA mirrors the model") };
            let (rank, average) = average.into_primitive();
            ranks.push(rank);
            averages.push(average);
            sources.push(source.clone().into_primitive().1);
        }
        let blended = blend_many(averages, sources, &d.decay, &d.one_minus);
        for ((id, rank), p) in floats.into_iter().zip(ranks).zip(blended) {
            self.store.entry_mut(id).value = Value::Float(AnyTensor::from_primitive(rank, p));
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
