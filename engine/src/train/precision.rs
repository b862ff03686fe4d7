//! Mixed precision: compute in bf16 or fp16 with f32 master weights (CUDA only; off on the CPU,
//! as in LibreYOLO), and for fp16 a dynamic loss scale that skips steps whose gradients are
//! not finite (PyTorch's `GradScaler`: start 2^16, halve on overflow, double after 2000 good
//! steps). The scale lives on the device and is decided there, so a captured whole step holds
//! it too; only the eager step reads its verdict back.

use std::cell::RefCell;
use std::rc::Rc;

use burn::tensor::{Device, FloatDType};
pub use libreyolo_stages::loss_scale::{LossScale, read_finite};

use crate::device::Backend;
use crate::manifest::{AmpDtype, Manifest};

/// Environment variable: `dynamic` turns fp16's dynamic loss scaling on in any precision, on
/// any backend, `dynamic:S` with the initial scale S (the CPU tests check with it that scaling
/// changes no value in f32, that a captured step holds it, and that overflowing steps are
/// skipped alike).
pub const LOSS_SCALE_ENV: &str = "LIBREYOLO_LOSS_SCALE";

#[derive(Debug, Clone)]
pub struct Precision {
    /// Compute dtype of the network; `None`: f32.
    pub compute: Option<FloatDType>,
    /// The dynamic loss scale, shared by the eager step and a captured one.
    pub scaler: Option<Rc<RefCell<LossScale>>>,
}

impl Precision {
    /// The policy for `manifest` on `backend`; bf16 on a device without it is an error.
    pub fn new(m: &Manifest, backend: Backend, device: &Device) -> anyhow::Result<Self> {
        let scaler = dynamic_scaling(m, backend).map(|initial| Rc::new(RefCell::new(LossScale::new(initial, device))));
        if !m.precision.amp || backend == Backend::Cpu {
            return Ok(Self { compute: None, scaler });
        }
        Ok(match m.precision.dtype {
            AmpDtype::Bf16 => {
                if !device.supports_dtype(FloatDType::BF16) {
                    anyhow::bail!("precision.dtype=\"bf16\" requires a CUDA device with BF16 support");
                }
                Self { compute: Some(FloatDType::BF16), scaler }
            }
            AmpDtype::Fp16 => Self { compute: Some(FloatDType::F16), scaler },
        })
    }

    pub fn describe(&self) -> String {
        match (self.compute, &self.scaler) {
            (None, None) => "f32".into(),
            (None, Some(_)) => "f32, dynamic loss scaling".into(),
            (Some(d), Some(_)) => format!("{d:?} compute, f32 master weights, dynamic loss scaling"),
            (Some(d), None) => format!("{d:?} compute, f32 master weights"),
        }
    }
}

/// The initial loss scale when `m` trains with a dynamic one on `backend`: fp16 on CUDA, as
/// LibreYOLO (`GradScaler` enabled for float16 only), or anything with
/// `LIBREYOLO_LOSS_SCALE=dynamic[:S]`.
pub fn dynamic_scaling(m: &Manifest, backend: Backend) -> Option<f64> {
    let forced = std::env::var(LOSS_SCALE_ENV).ok().and_then(|v| match v.split_once(':') {
        Some(("dynamic", s)) => s.parse().ok(),
        None if v == "dynamic" => Some(LossScale::INITIAL),
        _ => None,
    });
    forced.or((m.precision.amp && m.precision.dtype == AmpDtype::Fp16 && backend == Backend::Cuda).then_some(LossScale::INITIAL))
}
