//! BatchNorm2d with PyTorch's semantics (and the SiLU after it), written so that a CUDA graph
//! can replay it.
//!
//! Training normalises with the batch mean and biased variance over (N, H, W) (over every
//! device's batch under SyncBatchNorm, see [`Ctx::synced_over`]) and records the batch
//! statistics; the running statistics are folded in afterwards, in place
//! (`ParamStore::apply_batch_stats`). Burn's own BatchNorm replaces its running tensors every
//! step, which a captured graph cannot follow. On one device the training BatchNorm and its
//! SiLU are one fused operation with one backward (`libreyolo_kernels::batch_norm`); under
//! SyncBatchNorm, or with `LIBREYOLO_BN=composed`, they are composed of tensor operations.

use burn::tensor::activation::silu;
use burn::tensor::distributed::{ReduceOperation, all_reduce};
use burn::tensor::{FloatDType, Tensor};
use libreyolo_kernels::batch_norm::batch_norm_act;

use crate::ctx::{BatchStats, Ctx};
use crate::params::{Builder, ParamId, Role};

/// LibreYOLO's BatchNorm in its YOLO families: eps 1e-3, momentum 0.03.
pub const EPS: f64 = 1e-3;
pub const MOMENTUM: f64 = 0.03;
/// PyTorch's defaults (`nn.BatchNorm2d()`), which its classification families keep: eps 1e-5,
/// momentum 0.1.
pub const TORCH_EPS: f64 = 1e-5;
pub const TORCH_MOMENTUM: f64 = 0.1;

#[derive(Debug, Clone)]
pub struct BatchNorm {
    weight: ParamId,
    bias: ParamId,
    running_mean: ParamId,
    running_var: ParamId,
    count: ParamId,
    channels: usize,
    eps: f64,
    momentum: f64,
}

impl BatchNorm {
    /// LibreYOLO's YOLO BatchNorm ([`EPS`], [`MOMENTUM`]).
    pub fn new(b: &mut Builder, channels: usize) -> Self {
        Self::with(b, channels, EPS, MOMENTUM)
    }

    /// PyTorch's default BatchNorm ([`TORCH_EPS`], [`TORCH_MOMENTUM`]).
    pub fn torch(b: &mut Builder, channels: usize) -> Self {
        Self::with(b, channels, TORCH_EPS, TORCH_MOMENTUM)
    }

    fn with(b: &mut Builder, channels: usize, eps: f64, momentum: f64) -> Self {
        Self {
            weight: b.constant("weight", Role::BnWeight, channels, 1.0),
            bias: b.constant("bias", Role::BnBias, channels, 0.0),
            running_mean: b.constant("running_mean", Role::RunningMean, channels, 0.0),
            running_var: b.constant("running_var", Role::RunningVar, channels, 1.0),
            count: b.count("num_batches_tracked"),
            channels,
            eps,
            momentum,
        }
    }

    /// BatchNorm of `x`, then SiLU when `act`.
    pub fn forward(&self, x: Tensor<4>, cx: &Ctx, act: bool) -> Tensor<4> {
        let activate = |y: Tensor<4>| if act { silu(y) } else { y };
        let c = self.channels;
        let per_channel = |t: Tensor<1>| t.reshape([1, c, 1, 1]);
        if !cx.training() {
            // `x * scale + shift` with both folded from the stored f32 statistics and computed in
            // f32, rounded once to x's dtype: what cuDNN does under PyTorch's autocast (a bf16
            // eval rounded the statistics, the affine parameters and three intermediates).
            let (scale, shift) = self.fold(cx);
            let dtype = x.dtype();
            let y = x.cast(FloatDType::F32).mul(per_channel(scale)).add(per_channel(shift));
            return activate(y.cast(FloatDType::from(dtype)));
        }
        let [n, _, h, w] = x.dims();
        let Some(devices) = cx.sync_group() else {
            // The affine parameters in f32 (the master tensors), as autocast leaves them.
            let (y, stats) = train(x, cx.master_rank1(self.weight), cx.master_rank1(self.bias), self.eps, act);
            self.record(cx, stats, (n * h * w) as f64);
            return y;
        };
        // SyncBatchNorm: the per-channel sums of x and x^2 summed over every device (one
        // all-reduce, differentiable: its backward all-reduces the gradients).
        let xf = x.clone().cast(FloatDType::F32); // no-op in f32
        let sums = Tensor::cat(vec![xf.clone().sum_dims(&[0, 2, 3]).reshape([c]), xf.square().sum_dims(&[0, 2, 3]).reshape([c])], 0);
        let sums = all_reduce(sums, ReduceOperation::Sum, devices.to_vec()).resolve();
        let count = (n * h * w * devices.len()) as f64;
        let mean = sums.clone().narrow(0, 0, c).div_scalar(count).reshape([1, c, 1, 1]);
        let var = sums.narrow(0, c, c).div_scalar(count).reshape([1, c, 1, 1]).sub(mean.clone().square()).clamp_min(0.0);
        let y = normalize(x, mean.clone(), var.clone(), per_channel(cx.rank1(self.weight)), per_channel(cx.rank1(self.bias)), self.eps);
        self.record(cx, Tensor::cat(vec![mean.reshape([1, c]), var.reshape([1, c])], 0), count);
        activate(y)
    }

    /// Records the batch statistics (`[rows, C]`: the mean, then the biased variance over `count`
    /// values) for the running statistics.
    fn record(&self, cx: &Ctx, stats: Tensor<2>, count: f64) {
        cx.record(BatchStats {
            running_mean: self.running_mean,
            running_var: self.running_var,
            count: self.count,
            momentum: self.momentum,
            stats: stats.detach().inner(),
            correction: count / (count - 1.0).max(1.0),
        });
    }

    /// Eval-mode BatchNorm as `x * scale + shift` per channel, from the stored (f32) tensors:
    /// what inference fusion folds into the preceding convolution.
    pub fn fold(&self, cx: &Ctx) -> (Tensor<1>, Tensor<1>) {
        let scale = cx.stored_rank1(self.weight).div(cx.stored_rank1(self.running_var).add_scalar(self.eps).sqrt());
        let shift = cx.stored_rank1(self.bias).sub(cx.stored_rank1(self.running_mean).mul(scale.clone()));
        (scale, shift)
    }

    /// The stored tensors of this layer that hold parameters or statistics.
    pub fn ids(&self) -> [ParamId; 4] {
        [self.weight, self.bias, self.running_mean, self.running_var]
    }
}

/// Environment variable choosing the single-device training BatchNorm: the fused kernels (the
/// default) or `composed`, the tensor-operation form SyncBatchNorm uses, for A/B timing on the
/// GPU (`bench ops --only batchnorm`, the capture table).
pub const IMPL_ENV: &str = "LIBREYOLO_BN";

fn composed() -> bool {
    static COMPOSED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *COMPOSED.get_or_init(|| std::env::var(IMPL_ENV).is_ok_and(|v| v == "composed"))
}

/// The single-device training BatchNorm (+ SiLU when `act`) of `x` with the affine `weight` and
/// `bias` (`[C]`): the output and the batch statistics, `[rows, C]` f32 detached with the mean in
/// row 0 and the biased variance in row 1.
pub fn train(x: Tensor<4>, weight: Tensor<1>, bias: Tensor<1>, eps: f64, act: bool) -> (Tensor<4>, Tensor<2>) {
    if !composed() {
        let fused = batch_norm_act(x, weight, bias, eps, act);
        return (fused.output, fused.stats);
    }
    let c = weight.dims()[0];
    let (mean, var) = batch_stats(&x);
    let y = normalize(x, mean.clone(), var.clone(), weight.reshape([1, c, 1, 1]), bias.reshape([1, c, 1, 1]), eps);
    let stats = Tensor::cat(vec![mean.detach().reshape([1, c]), var.detach().reshape([1, c])], 0);
    (if act { silu(y) } else { y }, stats)
}

/// The per-channel mean and biased variance of `x` over (N, H, W), each `[1, C, 1, 1]` in f32
/// whatever the compute dtype: both from x in one pass each (no centred copy), so forward and
/// backward read the activation a few times instead of a dozen (BatchNorm was most of the H200's
/// step). Each statistic is one `sum_dims` over the three axes — one reduction op (on the H200,
/// 2 reduction launches a BatchNorm forward, measured) — not `mean_dims`, which burn expands into
/// one `mean_dim` op per axis (three launches and three autodiff nodes a statistic: 6 reduction
/// launches a BatchNorm forward before).
pub fn batch_stats(x: &Tensor<4>) -> (Tensor<4>, Tensor<4>) {
    let [n, _, h, w] = x.dims();
    let count = (n * h * w) as f64;
    let xf = x.clone().cast(FloatDType::F32); // no-op in f32
    let over_nhw = |t: Tensor<4>| t.sum_dims(&[0, 2, 3]).div_scalar(count);
    let (mean, mean_sq) = (over_nhw(xf.clone()), over_nhw(xf.square()));
    let var = mean_sq.sub(mean.clone().square()).clamp_min(0.0);
    (mean, var)
}

/// Training BatchNorm's output from the batch statistics (`[1, C, 1, 1]`, f32) and the affine
/// `weight` and `bias` (`[1, C, 1, 1]`): `x * scale + shift` per channel, in x's dtype.
pub fn normalize(x: Tensor<4>, mean: Tensor<4>, var: Tensor<4>, weight: Tensor<4>, bias: Tensor<4>, eps: f64) -> Tensor<4> {
    let dtype = x.dtype();
    let scale = weight.cast(FloatDType::F32).div(var.add_scalar(eps).sqrt());
    let shift = bias.cast(FloatDType::F32).sub(mean.mul(scale.clone()));
    x.mul(scale.cast(dtype)).add(shift.cast(dtype))
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Distribution, Tensor, TensorData};

    use super::batch_stats;

    /// The statistics and their gradient through the autodiff backend (one `sum_dims` node a
    /// statistic, its gradient broadcast back as a view: vendor/README.md) against the
    /// closed form: for `L = sum_c a_c mean_c + b_c var_c` over M = N*H*W values a channel,
    /// `dL/dx = a_c / M + 2 b_c (x - mean_c) / M`.
    #[test]
    fn statistics_and_their_gradient_match_the_closed_form() {
        let device = Device::flex();
        let (n, c, h, w) = (3, 4, 5, 6);
        let m = (n * h * w) as f32;
        let x0 = Tensor::<4>::random([n, c, h, w], Distribution::Normal(0.5, 2.0), &device);
        let x = x0.clone().autodiff().require_grad();
        let a = Tensor::<4>::from_data(TensorData::new(vec![1.0f32, -2.0, 0.5, 3.0], [1, c, 1, 1]), &device);
        let b = Tensor::<4>::from_data(TensorData::new(vec![0.25f32, 1.0, -1.5, 2.0], [1, c, 1, 1]), &device);
        let (mean, var) = batch_stats(&x);
        let loss = mean.clone().mul(a.clone().autodiff()).add(var.clone().mul(b.clone().autodiff())).sum();
        let grad = x.grad(&loss.backward()).expect("x reaches the loss");

        let xs = x0.to_data().try_to_vec::<f32>().unwrap();
        let (mut want_mean, mut want_var) = (vec![0f32; c], vec![0f32; c]);
        let at = |i: usize, ch: usize, k: usize| xs[(i * c + ch) * h * w + k];
        for ch in 0..c {
            let vals: Vec<f32> = (0..n).flat_map(|i| (0..h * w).map(move |k| (i, k))).map(|(i, k)| at(i, ch, k)).collect();
            want_mean[ch] = vals.iter().sum::<f32>() / m;
            want_var[ch] = vals.iter().map(|v| (v - want_mean[ch]).powi(2)).sum::<f32>() / m;
        }
        let close = |got: &[f32], want: &[f32], what: &str| {
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{what}[{i}]: {g} vs {w}");
            }
        };
        close(&mean.inner().to_data().try_to_vec::<f32>().unwrap(), &want_mean, "mean");
        close(&var.inner().to_data().try_to_vec::<f32>().unwrap(), &want_var, "var");

        let (av, bv) = (a.to_data().try_to_vec::<f32>().unwrap(), b.to_data().try_to_vec::<f32>().unwrap());
        let mut want_grad = vec![0f32; xs.len()];
        for i in 0..n {
            for ch in 0..c {
                for k in 0..h * w {
                    want_grad[(i * c + ch) * h * w + k] = av[ch] / m + 2.0 * bv[ch] * (at(i, ch, k) - want_mean[ch]) / m;
                }
            }
        }
        assert_eq!(grad.dims(), [n, c, h, w]);
        close(&grad.to_data().try_to_vec::<f32>().unwrap(), &want_grad, "dL/dx");
    }

    /// Mixed precision keeps BatchNorm in f32, as PyTorch's autocast does: in eval the running
    /// statistics and the affine parameters are folded in f32 and the output rounded once to
    /// bf16; in training the affine parameters are read in f32, so their gradients are f32 (a
    /// bf16 read rounded both: one cause of issue #41's gap named in its text).
    #[test]
    fn bf16_batch_norm_keeps_its_statistics_and_affine_parameters_in_f32() {
        use burn::tensor::FloatDType;

        use crate::ctx::Ctx;
        use crate::params::{BuildState, ParamId, Value};
        use crate::tensor::AnyTensor;

        let device = Device::flex();
        let c = 3;
        let mut state = BuildState::new(0);
        let bn = super::BatchNorm::new(&mut state.builder(&device), c);
        let mut store = state.store;
        // Values bf16 cannot hold (8 significant bits): 1 + 2^-10 rounds to 1.
        let set = |store: &mut crate::params::ParamStore, id: ParamId, v: [f32; 3]| {
            store.entry_mut(id).value = Value::Float(AnyTensor::R1(Tensor::from_data(TensorData::new(v.to_vec(), [3]), &device)));
        };
        set(&mut store, bn.weight, [1.0 + 2f32.powi(-10), 0.7001, 1.3333]);
        set(&mut store, bn.bias, [0.0123, -0.2001, 0.3337]);
        set(&mut store, bn.running_mean, [0.1234567, -0.7654321, 0.5]);
        set(&mut store, bn.running_var, [1.7654321, 0.3333333, 2.0]);
        let x = Tensor::<4>::random([2, c, 4, 4], Distribution::Normal(0.3, 1.5), &device).cast(FloatDType::BF16);

        let y = bn.forward(x.clone(), &Ctx::eval_in(&store, FloatDType::BF16), false);
        let (scale, shift) = bn.fold(&Ctx::eval(&store));
        let want = x.clone().cast(FloatDType::F32).mul(scale.reshape([1, c, 1, 1])).add(shift.reshape([1, c, 1, 1])).cast(FloatDType::BF16);
        let bits = |t: Tensor<4>| t.cast(FloatDType::F32).into_data().convert::<f32>().try_into_vec::<f32>().unwrap();
        assert_eq!(bits(y), bits(want), "eval: f32 fold, one rounding");

        let cx = Ctx::train_in(&store, FloatDType::BF16);
        let y = bn.forward(x, &cx, true);
        let grads = cx.gradients(&y.cast(FloatDType::F32).sum().backward());
        let dweight = grads.iter().find(|(id, _)| *id == bn.weight).expect("the scale has a gradient").1.clone();
        let dweight = dweight.into_data().convert::<f32>().try_into_vec::<f32>().unwrap();
        let bf16 = |v: f32| half::bf16::from_f32(v).to_f32();
        assert!(dweight.iter().any(|&g| g != bf16(g)), "the scale's gradient was rounded to bf16: {dweight:?}");
    }
}
