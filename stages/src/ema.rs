//! Exponential moving average of every float tensor of the model, BatchNorm statistics
//! included (LibreYOLO's `ModelEMA`): `v = d * v + (1 - d) * model_v` with
//! `d = decay * (1 - exp(-updates / tau))`, updated in place after each optimizer step.

use libreyolo_families::{ParamStore, Value};

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

    pub fn update(&mut self, model: &ParamStore) {
        let d = self.next_decay();
        self.updates += 1;
        for i in 0..model.len() {
            let id = libreyolo_families::ParamId(i);
            let src = &model.entry(id).value;
            match (&mut self.store.entry_mut(id).value, src) {
                (Value::Rank4(e), Value::Rank4(m)) => e.inplace(|e| e.mul_scalar(d).add(m.clone().mul_scalar(1.0 - d))),
                (Value::Rank1(e), Value::Rank1(m)) => e.inplace(|e| e.mul_scalar(d).add(m.clone().mul_scalar(1.0 - d))),
                (Value::Count(e), Value::Count(m)) => *e = *m,
                _ => unreachable!("the EMA mirrors the model"),
            }
        }
    }
}

/// A copy with its own device buffers (a plain clone would share them).
pub fn deep_copy(store: &ParamStore) -> ParamStore {
    let mut out = store.clone();
    for i in 0..out.len() {
        let e = out.entry_mut(libreyolo_families::ParamId(i));
        e.value = match &e.value {
            Value::Rank4(t) => Value::Rank4(t.clone().mul_scalar(1.0)),
            Value::Rank1(t) => Value::Rank1(t.clone().mul_scalar(1.0)),
            Value::Count(n) => Value::Count(*n),
        };
    }
    out
}
