//! `grad.clip`: scales all gradients so that their global L2 norm is at most
//! `optim.clip_max_norm` (0: off), on the device, nothing read back. Under fp16's loss scale the
//! gradients are still scaled here (the optimizer unscales them): the norm compared is the
//! unscaled one, as LibreYOLO clips after `scaler.unscale_`.

use std::cell::RefCell;
use std::rc::Rc;

use burn::tensor::Tensor;

use crate::loss_scale::LossScale;
use crate::optim::scale_gradients;
use crate::stage::{Autodiff, Grads, Io, Kind, Stage, Ty, Value, no_collective, port};

pub static KIND: Kind = Kind {
    name: "grad.clip",
    summary: "scales gradients to a global norm of at most optim.clip_max_norm",
    inputs: &[port("grads", Ty::Grads)],
    outputs: &[port("grads", Ty::Grads)],
    not_capturable: None,
    autodiff: Autodiff::None,
    collective: no_collective,
    recapture_on: &[],
    settings: None,
    build: |b| Ok(Rc::new(GradClip { max_norm: b.update.clip_max_norm, scaler: b.scaler.clone() })),
};

struct GradClip {
    max_norm: f64,
    scaler: Option<Rc<RefCell<LossScale>>>,
}

impl Stage for GradClip {
    fn run(&self, io: &mut Io<'_>) -> anyhow::Result<()> {
        let mut grads = io.take_grads(0)?;
        // An accumulated step is clipped once, on its summed gradients.
        if io.step.last_micro {
            clip_global_norm(&mut grads, self.max_norm, self.scaler.as_ref().map(|s| s.borrow().inv()));
        }
        io.output(0, Value::Grads(grads));
        Ok(())
    }
}

/// Scales all gradients so that their global L2 norm, times `inv_scale` when they are scaled,
/// is at most `max_norm` (0: off).
pub fn clip_global_norm(grads: &mut Grads, max_norm: f64, inv_scale: Option<Tensor<1>>) {
    if max_norm <= 0.0 || grads.is_empty() {
        return;
    }
    let norm = grads.iter().map(|(_, g)| g.clone().square().sum()).reduce(|a, b| a.add(b)).unwrap().sqrt();
    let norm = match inv_scale {
        Some(inv) => norm.mul(inv),
        None => norm,
    };
    let factor = norm.add_scalar(1e-6).recip().mul_scalar(max_norm).clamp_max(1.0);
    scale_gradients(grads, &factor);
}
