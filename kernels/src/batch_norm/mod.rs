//! Training BatchNorm with an optional SiLU after it, as one operation with one backward.
//!
//! Forward: the per-channel batch mean and biased variance over (N, H, W), then
//! `y = act(x * scale + shift)` with `scale = weight / sqrt(var + eps)` and
//! `shift = bias - mean * scale`, computed in f32 and rounded once to x's dtype. Backward, with
//! `gy` the gradient before the activation and `M = N * H * W` (the standard BatchNorm backward,
//! written so that it needs x and the per-channel statistics only — no saved output):
//!
//! ```text
//! dbias   = sum(gy)                     dweight = rstd * sum(gy * (x - mean))
//! dx      = scale * gy + A * (x - mean) + B,
//!           A = -scale * rstd^2 * sum(gy * (x - mean)) / M,   B = -scale * sum(gy) / M
//! ```
//!
//! The statistics travel as one `[5, C]` f32 tensor: mean, biased variance, `1 / sqrt(var +
//! eps)`, scale, shift.

mod autodiff;
mod cube;
mod kernels;
mod reference;

use burn::backend::fusion::custom::TensorSpec;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Capture, Flex, backend_extension};
use burn::tensor::{DType, Shape, Tensor};

/// Rows of the statistics tensor.
pub const MEAN: usize = 0;
pub const VAR: usize = 1;
pub const RSTD: usize = 2;
pub const SCALE: usize = 3;
pub const SHIFT: usize = 4;
/// How many rows the statistics tensor has.
pub const STATS_ROWS: usize = 5;

/// The fused training BatchNorm (+ SiLU) as backend primitives. The default bodies are the
/// composed reference ([`reference`]); the GPU overrides both with CubeCL kernels.
#[backend_extension(Cube, Flex, Capture, Autodiff, Fusion)]
pub trait BatchNormActBackend: Backend {
    /// `(y, stats)`: `x` is `[N, C, H, W]` in the compute dtype, `weight` and `bias` are `[C]`
    /// f32; `y` has x's shape and dtype, `stats` is `[5, C]` f32.
    #[fusion(meta = forward_meta)]
    fn batch_norm_act_forward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        epsilon: f64,
        act: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        reference::forward::<Self>(x, weight, bias, epsilon, act)
    }

    /// `(dx, dweight, dbias)` from the gradient of `y`: dx in x's dtype, the other two `[C]` f32,
    /// each in a buffer of its own (the optimizer reads them as they are: no slice copies).
    #[fusion(meta = backward_meta)]
    fn batch_norm_act_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        stats: FloatTensor<Self>,
        act: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        reference::backward::<Self>(x, grad, stats, act)
    }
}

fn forward_meta(x: &TensorSpec, _weight: &TensorSpec, _bias: &TensorSpec, _epsilon: &f64, _act: &bool) -> (TensorSpec, TensorSpec) {
    let stats = TensorSpec::new(Shape::new([STATS_ROWS, x.shape[1]]), DType::F32);
    (x.clone(), stats)
}

fn backward_meta(x: &TensorSpec, _grad: &TensorSpec, _stats: &TensorSpec, _act: &bool) -> (TensorSpec, TensorSpec, TensorSpec) {
    let per_channel = TensorSpec::new(Shape::new([x.shape[1]]), DType::F32);
    (x.clone(), per_channel.clone(), per_channel)
}

impl BatchNormActBackend for Flex {}
impl BatchNormActBackend for Capture {}

/// A training BatchNorm's output and the batch statistics it normalised with.
pub struct BatchNormAct {
    /// `act(batchnorm(x))`, x's shape and dtype.
    pub output: Tensor<4>,
    /// The statistics `[5, C]` f32, detached: rows [`MEAN`], [`VAR`] (biased), [`RSTD`],
    /// [`SCALE`], [`SHIFT`]. The running statistics are folded from it as it is
    /// ([`crate::in_place::running_stats`]).
    pub stats: Tensor<2>,
}

impl BatchNormAct {
    /// Per-channel batch mean, `[C]` f32 (a slice: a copy kernel on the GPU).
    pub fn mean(&self) -> Tensor<1> {
        self.row(MEAN)
    }

    /// Per-channel biased batch variance, `[C]` f32 (a slice: a copy kernel on the GPU).
    pub fn var(&self) -> Tensor<1> {
        self.row(VAR)
    }

    fn row(&self, r: usize) -> Tensor<1> {
        self.stats.clone().narrow(0, r, 1).reshape([-1])
    }
}

/// Training BatchNorm of `x` (`[N, C, H, W]`) with the affine `weight` and `bias` (`[C]`, cast to
/// f32 here), followed by SiLU when `act`. Differentiable in x, weight and bias as one operation.
pub fn batch_norm_act(x: Tensor<4>, weight: Tensor<1>, bias: Tensor<1>, epsilon: f64, act: bool) -> BatchNormAct {
    use burn::tensor::FloatDType;
    let (weight, bias) = (weight.cast(FloatDType::F32), bias.cast(FloatDType::F32));
    let (y, stats) =
        <burn::backend::Dispatch as BatchNormActBackend>::batch_norm_act_forward(x.into_dispatch(), weight.into_dispatch(), bias.into_dispatch(), epsilon, act);
    BatchNormAct { output: Tensor::from_dispatch(y), stats: Tensor::<2>::from_dispatch(stats).detach() }
}

#[cfg(test)]
mod tests;
