//! BatchNorm2d with PyTorch's semantics, written so that a CUDA graph can replay it.
//!
//! Training normalises with the batch mean and biased variance over (N, H, W) (over every
//! device's batch under SyncBatchNorm, see [`Ctx::synced_over`]) and records the batch
//! statistics; the running statistics are folded in afterwards, in place
//! (`ParamStore::apply_batch_stats`). Burn's own BatchNorm replaces its running tensors every
//! step, which a captured graph cannot follow.

use burn::tensor::distributed::{ReduceOperation, all_reduce};
use burn::tensor::{FloatDType, Tensor};

use crate::ctx::{BatchStats, Ctx};
use crate::params::{Builder, ParamId, Role};

/// LibreYOLO's BatchNorm: eps 1e-3, momentum 0.03.
pub const EPS: f64 = 1e-3;
pub const MOMENTUM: f64 = 0.03;

#[derive(Debug, Clone)]
pub struct BatchNorm {
    weight: ParamId,
    bias: ParamId,
    running_mean: ParamId,
    running_var: ParamId,
    count: ParamId,
    channels: usize,
}

impl BatchNorm {
    pub fn new(b: &mut Builder, channels: usize) -> Self {
        Self {
            weight: b.constant("weight", Role::BnWeight, channels, 1.0),
            bias: b.constant("bias", Role::BnBias, channels, 0.0),
            running_mean: b.constant("running_mean", Role::RunningMean, channels, 0.0),
            running_var: b.constant("running_var", Role::RunningVar, channels, 1.0),
            count: b.count("num_batches_tracked"),
            channels,
        }
    }

    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        let c = self.channels;
        let per_channel = |t: Tensor<1>| t.reshape([1, c, 1, 1]);
        let weight = per_channel(cx.rank1(self.weight));
        let bias = per_channel(cx.rank1(self.bias));
        if !cx.training() {
            let mean = per_channel(cx.rank1(self.running_mean));
            let std = per_channel(cx.rank1(self.running_var).add_scalar(EPS).sqrt());
            return x.sub(mean).div(std).mul(weight).add(bias);
        }
        let [n, _, h, w] = x.dims();
        // Both statistics from x in one pass each (no centred copy), in f32 whatever the compute
        // dtype, then y = x * scale + shift per channel: forward and backward each read the
        // activation a few times instead of a dozen (BatchNorm was most of the H200's step).
        let dtype = x.dtype();
        let xf = x.clone().cast(FloatDType::F32); // no-op in f32
        let (mean, var, count) = match cx.sync_group() {
            None => {
                let mean = xf.clone().mean_dims(&[0, 2, 3]);
                let var = xf.square().mean_dims(&[0, 2, 3]).sub(mean.clone().square()).clamp_min(0.0);
                (mean, var, (n * h * w) as f64)
            }
            Some(devices) => {
                // SyncBatchNorm: the per-channel sums of x and x^2 summed over every device
                // (one all-reduce, differentiable: its backward all-reduces the gradients).
                let sums = Tensor::cat(vec![xf.clone().sum_dims(&[0, 2, 3]).reshape([c]), xf.square().sum_dims(&[0, 2, 3]).reshape([c])], 0);
                let sums = all_reduce(sums, ReduceOperation::Sum, devices.to_vec()).resolve();
                let count = (n * h * w * devices.len()) as f64;
                let mean = sums.clone().narrow(0, 0, c).div_scalar(count).reshape([1, c, 1, 1]);
                let var = sums.narrow(0, c, c).div_scalar(count).reshape([1, c, 1, 1]).sub(mean.clone().square()).clamp_min(0.0);
                (mean, var, count)
            }
        };
        let scale = weight.cast(FloatDType::F32).div(var.clone().add_scalar(EPS).sqrt());
        let shift = bias.cast(FloatDType::F32).sub(mean.clone().mul(scale.clone()));
        let y = x.mul(scale.cast(dtype)).add(shift.cast(dtype));
        cx.record(BatchStats {
            running_mean: self.running_mean,
            running_var: self.running_var,
            count: self.count,
            mean: mean.detach().inner().reshape([c]),
            var_unbiased: var.detach().inner().reshape([c]).mul_scalar(count / (count - 1.0).max(1.0)),
        });
        y
    }

    /// Eval-mode BatchNorm as `x * scale + shift` per channel, from the stored (f32) tensors:
    /// what inference fusion folds into the preceding convolution.
    pub fn fold(&self, cx: &Ctx) -> (Tensor<1>, Tensor<1>) {
        let scale = cx.stored_rank1(self.weight).div(cx.stored_rank1(self.running_var).add_scalar(EPS).sqrt());
        let shift = cx.stored_rank1(self.bias).sub(cx.stored_rank1(self.running_mean).mul(scale.clone()));
        (scale, shift)
    }

    /// The stored tensors of this layer that hold parameters or statistics.
    pub fn ids(&self) -> [ParamId; 4] {
        [self.weight, self.bias, self.running_mean, self.running_var]
    }
}
