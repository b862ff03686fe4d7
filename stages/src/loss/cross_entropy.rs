//! Classification loss: LibreYOLO's `classification_loss` without class weights, PyTorch's
//! `F.cross_entropy(logits, targets)` — the batch mean of `logsumexp(logits) - logits[target]`
//! (no label smoothing: LibreYOLO 1.6 sets none), in f32. Sync-free: the target's logit is a
//! gather on the device.

use burn::tensor::activation::log_softmax;
use burn::tensor::{FloatDType, Int, Tensor};

/// The mean cross-entropy `[1]` of `logits` `(B, nc)` against class indices `targets` `(B)`.
pub fn cross_entropy(logits: Tensor<2>, targets: Tensor<1, Int>) -> Tensor<1> {
    let [b, _] = logits.dims();
    let log_probs = log_softmax(logits.cast(FloatDType::F32), 1);
    log_probs.gather(1, targets.reshape([b, 1])).neg().mean().reshape([1])
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, TensorData};

    use super::*;

    /// Against the closed form on a hand-checkable batch: uniform logits give ln(nc), and a
    /// confident right answer almost nothing.
    #[test]
    fn matches_the_closed_form() {
        let device = Device::flex();
        let logits = Tensor::<2>::from_data(TensorData::new(vec![0.0f32, 0.0, 0.0, 0.0, 20.0, 0.0], [2, 3]), &device);
        let targets = Tensor::<1, Int>::from_data(TensorData::new(vec![2i64, 1], [2]), &device);
        let loss = cross_entropy(logits, targets).into_data().try_to_vec::<f32>().unwrap()[0] as f64;
        let want = ((3f64).ln() + (1.0 + 2.0 * (-20f64).exp()).ln()) / 2.0;
        assert!((loss - want).abs() < 1e-6, "{loss} vs {want}");
    }
}
