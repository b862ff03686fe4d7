//! fp16's dynamic loss scale (PyTorch's `GradScaler`: start 2^16, halve on a step whose
//! gradients are not finite, double after 2000 good steps), held on the device and decided there,
//! so a captured whole step holds it too; only an eager step reads its verdict back.

use burn::tensor::{Bool, Device, Tensor};
use libreyolo_families::ParamId;
use libreyolo_families::tensor::write_into;

use crate::optim::{device_scalar, scale_gradients};

/// `GradScaler`'s state as device scalars (`[1]`, f32), updated in place: a captured step reads
/// and writes the same buffers at every replay.
#[derive(Debug)]
pub struct LossScale {
    /// The factor the loss is multiplied by before the backward.
    pub scale: Tensor<1>,
    /// `1 / scale`, what the gradients are multiplied by before the optimizer.
    inv: Tensor<1>,
    /// Finite steps since the scale last changed.
    good: Tensor<1>,
}

impl LossScale {
    pub const INITIAL: f64 = 65536.0;
    const GROWTH_INTERVAL: f64 = 2000.0;

    pub fn new(scale: f64, device: &Device) -> Self {
        Self { scale: device_scalar(scale, device), inv: device_scalar(1.0 / scale, device), good: device_scalar(0.0, device) }
    }

    /// `1 / scale`, on the device.
    pub fn inv(&self) -> Tensor<1> {
        self.inv.clone()
    }

    /// `total` times the scale.
    pub fn scale_loss(&self, total: Tensor<1>) -> Tensor<1> {
        total.mul(self.scale.clone())
    }

    /// Unscales `grads` and returns whether all of them are finite (`[1]`, on the device); the
    /// scale halves after a step that is not, doubles after 2000 that are. Reads nothing back.
    pub fn unscale(&mut self, grads: &mut Vec<(ParamId, Tensor<1>)>) -> Tensor<1, Bool> {
        scale_gradients(grads, &self.inv);
        let bad = grads
            .iter()
            .map(|(_, g)| g.clone().is_nan().bool_or(g.clone().is_inf()).int().sum())
            .reduce(|a, b| a.add(b))
            .unwrap_or_else(|| self.good.zeros_like().int());
        let finite = bad.equal_elem(0);
        self.advance(finite.clone());
        finite
    }

    /// `GradScaler.update` on the device.
    fn advance(&mut self, finite: Tensor<1, Bool>) {
        let good = self.good.clone().add_scalar(1.0);
        let grow = good.clone().greater_equal_elem(Self::GROWTH_INTERVAL);
        let scale = self.scale.clone();
        let grown = scale.clone().mask_where(grow.clone(), scale.clone().mul_scalar(2.0));
        let next = scale.mul_scalar(0.5).mask_where(finite.clone(), grown);
        let good = good.mask_fill(grow, 0.0).mask_fill(finite.bool_not(), 0.0);
        let inv = next.clone().recip();
        write_into(&mut self.scale, next);
        write_into(&mut self.inv, inv);
        write_into(&mut self.good, good);
    }

    /// Whether this scale owns its buffers, so that its in-place update reaches the buffers a
    /// captured graph reads (a handle kept elsewhere would send it to a new one).
    pub fn owns_its_buffers(&self) -> bool {
        self.scale.can_mut() && self.inv.can_mut() && self.good.can_mut()
    }

    /// The current scale, read back (checkpoints).
    pub fn read(&self) -> f64 {
        self.scale.clone().into_scalar::<f32>() as f64
    }

    /// Every state tensor, to snapshot and restore around a graph capture.
    pub fn tensors_mut(&mut self) -> [&mut Tensor<1>; 3] {
        [&mut self.scale, &mut self.inv, &mut self.good]
    }
}

/// Whether a `[1]` verdict of [`LossScale::unscale`] says finite (one read).
pub fn read_finite(finite: Tensor<1, Bool>) -> bool {
    finite.float().into_scalar::<f32>() > 0.5
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The device state machine follows `GradScaler`: halve on a non-finite step (and reset the
    /// count), double after 2000 finite ones; non-finite gradients are reported as such.
    #[test]
    fn the_scale_halves_on_overflow_and_doubles_after_2000_finite_steps() {
        let device = Device::flex();
        let mut s = LossScale::new(LossScale::INITIAL, &device);
        let grads = |v: f32| vec![(ParamId(0), Tensor::<1>::from_floats([1.0, v], &device))];
        let mut g = grads(f32::INFINITY);
        assert!(!read_finite(s.unscale(&mut g)));
        assert_eq!(s.read(), 32768.0);
        let mut g = grads(f32::NAN);
        assert!(!read_finite(s.unscale(&mut g)));
        assert_eq!(s.read(), 16384.0);
        for step in 1..=2000 {
            let mut g = grads(2.0);
            assert!(read_finite(s.unscale(&mut g)));
            if step == 1 {
                assert_eq!(g[0].1.clone().into_data().try_to_vec::<f32>().unwrap(), vec![1.0 / 16384.0, 2.0 / 16384.0], "unscaled");
            }
            assert_eq!(s.read(), if step < 2000 { 16384.0 } else { 32768.0 }, "step {step}");
        }
        let mut g = grads(f32::NEG_INFINITY);
        assert!(!read_finite(s.unscale(&mut g)));
        assert_eq!(s.read(), 16384.0);
    }
}
