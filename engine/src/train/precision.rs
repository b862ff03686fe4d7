//! Mixed precision: compute in bf16 or fp16 with f32 master weights (CUDA only; off on the CPU,
//! as in LibreYOLO), and for fp16 a dynamic loss scale that skips steps whose gradients are
//! not finite (PyTorch's `GradScaler`: start 2^16, halve on overflow, double after 2000 good
//! steps).

use burn::tensor::{Device, FloatDType, Tensor};

use crate::device::Backend;
use crate::manifest::{AmpDtype, Manifest};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Precision {
    /// Compute dtype of the network; `None`: f32.
    pub compute: Option<FloatDType>,
    pub scaler: Option<LossScale>,
}

impl Precision {
    /// The policy for `manifest` on `backend`; bf16 on a device without it is an error.
    pub fn new(m: &Manifest, backend: Backend, device: &Device) -> anyhow::Result<Self> {
        if !m.precision.amp || backend == Backend::Cpu {
            return Ok(Self { compute: None, scaler: None });
        }
        Ok(match m.precision.dtype {
            AmpDtype::Bf16 => {
                if !device.supports_dtype(FloatDType::BF16) {
                    anyhow::bail!("precision.dtype=\"bf16\" requires a CUDA device with BF16 support");
                }
                Self { compute: Some(FloatDType::BF16), scaler: None }
            }
            AmpDtype::Fp16 => Self { compute: Some(FloatDType::F16), scaler: Some(LossScale::new()) },
        })
    }

    pub fn describe(&self) -> String {
        match (self.compute, self.scaler) {
            (None, _) => "f32".into(),
            (Some(d), Some(_)) => format!("{d:?} compute, f32 master weights, dynamic loss scaling"),
            (Some(d), None) => format!("{d:?} compute, f32 master weights"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossScale {
    pub scale: f64,
    good_steps: u32,
}

impl LossScale {
    const GROWTH_INTERVAL: u32 = 2000;

    pub fn new() -> Self {
        Self { scale: 65536.0, good_steps: 0 }
    }

    pub fn with_scale(scale: f64) -> Self {
        Self { scale, good_steps: 0 }
    }

    /// Unscales `grads`; returns false (and lowers the scale) when any is not finite.
    pub fn unscale(&mut self, grads: &mut [(libreyolo_families::ParamId, Tensor<1>)]) -> bool {
        let inv = 1.0 / self.scale;
        for (_, g) in grads.iter_mut() {
            let t = std::mem::replace(g, g.zeros_like());
            *g = t.mul_scalar(inv);
        }
        // One device reduction and one read per step.
        let bad = grads
            .iter()
            .map(|(_, g)| g.clone().is_nan().bool_or(g.clone().is_inf()).int().sum())
            .reduce(|a, b| a.add(b));
        let finite = bad.map(|b| b.float().into_scalar::<f32>() == 0.0).unwrap_or(true);
        if finite {
            self.good_steps += 1;
            if self.good_steps >= Self::GROWTH_INTERVAL {
                self.scale *= 2.0;
                self.good_steps = 0;
            }
        } else {
            self.scale /= 2.0;
            self.good_steps = 0;
        }
        finite
    }
}

impl Default for LossScale {
    fn default() -> Self {
        Self::new()
    }
}
