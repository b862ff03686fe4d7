//! The training state's updates, each written into its tensor's own buffer: the SGD and AdamW
//! steps (parameter and optimizer state together, over a list of parameters: 16 a kernel), a
//! weighted sum `target * keep + source * take` (the EMA, over a whole list of tensors: 16 a
//! kernel) and BatchNorm's running mean and variance (both from the layer's statistics tensor,
//! one kernel a layer).
//!
//! Why: a captured step must find every state tensor in the buffer it recorded. Composed of
//! tensor operations, an update lands in a new buffer and is copied back (`tensor::write_into`):
//! on the H200 the whole step's optimizer, EMA and running statistics cost ~9,700 launches a
//! step this way (two fused kernels and two copies per parameter), against ~2,960 with one kernel
//! a tensor and ~440 with SGD and the EMA in lists of 16 (YOLOv9-t: 57 + 93 + 291). Each run of
//! the step outside a graph (the eager steps before the capture, its warm-up run, the recording
//! window) pays the host time of every launch.
//!
//! The operations are functional: the result is returned, and on the GPU it is the input's
//! own buffer when the input is uniquely owned (its last use), a fresh one otherwise. The
//! default bodies ([`reference`]) compose burn's primitives exactly as the optimizer and EMA did
//! before, which is what the CPU runs and what the kernels are checked against.

mod autodiff;
mod cube;
mod kernels;
mod reference;

use burn::backend::fusion::custom::TensorSpec;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Capture, Dispatch, Flex, backend_extension};
use burn::tensor::Tensor;

use crate::tensor_list::TensorList;

/// In-place state updates as backend primitives (see the module's doc).
#[backend_extension(Cube, Flex, Capture, Autodiff, Fusion)]
pub trait InPlaceBackend: Backend {
    /// `(params, buffers)` after one SGD step with momentum (torch's `SGD`, dampening 0) of each
    /// parameter with the buffer and gradient at its index: `g = grad + weight_decay * param;
    /// buffer = momentum * buffer + g; param -= lr * (nesterov ? g + momentum * buffer :
    /// buffer)`. Buffers and gradients are flat, a parameter any shape of as many elements; `lr`
    /// and `momentum` are `[1]` device scalars, one rate and decay for the list. One operation:
    /// on the GPU 16 parameters a kernel.
    #[fusion(meta = sgd_many_meta)]
    fn sgd_many(
        #[extension_type] params: TensorList<Self>,
        #[extension_type] buffers: TensorList<Self>,
        #[extension_type] grads: TensorList<Self>,
        lr: FloatTensor<Self>,
        momentum: FloatTensor<Self>,
        weight_decay: f64,
        nesterov: bool,
    ) -> (TensorList<Self>, TensorList<Self>) {
        reference::sgd_many::<Self>(params, buffers, grads, lr, momentum, weight_decay, nesterov)
    }

    /// `(params, exp_avgs, exp_avg_sqs)` after one AdamW step (torch's `AdamW`) of each
    /// parameter with the moments and gradient at its index: `m = beta1 * m + (1 - beta1) * g;
    /// v = beta2 * v + (1 - beta2) * g^2; param = param * (1 - lr * weight_decay) - m / bias1 /
    /// (sqrt(v / bias2) + eps) * lr`. `scalars` are the `[1]` device scalars `[lr, beta1, 1 -
    /// beta1, bias1, bias2]` (`bias1 = 1 - beta1^t`, `bias2 = 1 - beta2^t`: the schedule moves
    /// beta1 and the step count moves both, without a new kernel). Moments and gradients are
    /// flat, a parameter any shape of as many elements. One operation: on the GPU 16 parameters a
    /// kernel.
    #[fusion(meta = adamw_many_meta)]
    #[allow(clippy::too_many_arguments)]
    fn adamw_many(
        #[extension_type] params: TensorList<Self>,
        #[extension_type] exp_avgs: TensorList<Self>,
        #[extension_type] exp_avg_sqs: TensorList<Self>,
        #[extension_type] grads: TensorList<Self>,
        #[extension_type] scalars: TensorList<Self>,
        beta2: f64,
        eps: f64,
        weight_decay: f64,
    ) -> (TensorList<Self>, TensorList<Self>, TensorList<Self>) {
        reference::adamw_many::<Self>(params, exp_avgs, exp_avg_sqs, grads, scalars, AdamWConstants { beta2, eps, weight_decay })
    }

    /// `targets[k] * keep + sources[k] * take` for every k, `keep` and `take` `[1]` device scalars
    /// (the EMA, whose decay changes every step without a new kernel), as one operation: on the
    /// GPU 16 pairs a kernel (YOLOv9-t's 1,479 EMA tensors in 93 launches).
    #[fusion(meta = blend_many_meta)]
    fn blend_many(
        #[extension_type] targets: TensorList<Self>,
        #[extension_type] sources: TensorList<Self>,
        keep: FloatTensor<Self>,
        take: FloatTensor<Self>,
    ) -> TensorList<Self> {
        reference::blend_many::<Self>(targets, sources, keep, take)
    }

    /// `target * keep + source * take` with constant weights.
    #[fusion(meta = blend_const_meta)]
    fn blend_const(target: FloatTensor<Self>, source: FloatTensor<Self>, keep: f64, take: f64) -> FloatTensor<Self> {
        reference::blend_const::<Self>(target, source, keep, take)
    }

    /// `(mean, var)`, BatchNorm's running statistics (`[C]`) after a batch, with PyTorch's rule:
    /// `mean * (1 - momentum) + batch_mean * momentum`, and the same for the variance with the
    /// batch's biased variance times `correction` (`n / (n - 1)`: unbiased). `stats` is `[rows,
    /// C]` with the batch mean in row 0 and the biased variance in row 1, as the fused
    /// BatchNorm leaves them: read there, not sliced out (a slice is a copy kernel).
    #[fusion(meta = running_stats_meta)]
    fn running_stats(
        mean: FloatTensor<Self>,
        var: FloatTensor<Self>,
        stats: FloatTensor<Self>,
        momentum: f64,
        correction: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        reference::running_stats::<Self>(mean, var, stats, momentum, correction)
    }
}

#[allow(clippy::ptr_arg, clippy::too_many_arguments)] // the metadata of a `TensorList` is a `Vec`
fn sgd_many_meta(
    params: &Vec<TensorSpec>,
    buffers: &Vec<TensorSpec>,
    _grads: &Vec<TensorSpec>,
    _lr: &TensorSpec,
    _momentum: &TensorSpec,
    _wd: &f64,
    _nesterov: &bool,
) -> (Vec<TensorSpec>, Vec<TensorSpec>) {
    (params.clone(), buffers.clone())
}

#[allow(clippy::ptr_arg, clippy::too_many_arguments)] // the metadata of a `TensorList` is a `Vec`
fn adamw_many_meta(
    params: &Vec<TensorSpec>,
    exp_avgs: &Vec<TensorSpec>,
    exp_avg_sqs: &Vec<TensorSpec>,
    _grads: &Vec<TensorSpec>,
    _scalars: &Vec<TensorSpec>,
    _beta2: &f64,
    _eps: &f64,
    _weight_decay: &f64,
) -> (Vec<TensorSpec>, Vec<TensorSpec>, Vec<TensorSpec>) {
    (params.clone(), exp_avgs.clone(), exp_avg_sqs.clone())
}

#[allow(clippy::ptr_arg)] // the metadata of a `TensorList` is a `Vec`
fn blend_many_meta(targets: &Vec<TensorSpec>, _sources: &Vec<TensorSpec>, _keep: &TensorSpec, _take: &TensorSpec) -> Vec<TensorSpec> {
    targets.clone()
}

fn blend_const_meta(target: &TensorSpec, _source: &TensorSpec, _keep: &f64, _take: &f64) -> TensorSpec {
    target.clone()
}

fn running_stats_meta(mean: &TensorSpec, var: &TensorSpec, _stats: &TensorSpec, _momentum: &f64, _correction: &f64) -> (TensorSpec, TensorSpec) {
    (mean.clone(), var.clone())
}

impl InPlaceBackend for Flex {}
impl InPlaceBackend for Capture {}

/// One SGD step of every parameter (any ranks) with its flat momentum buffer and gradient, one
/// rate and decay for all, as one operation (see [`InPlaceBackend::sgd_many`]); returns the
/// parameters and buffers, in their own buffers on the GPU when passed as their last use.
pub fn sgd_many(
    params: Vec<FloatTensor<Dispatch>>,
    buffers: Vec<FloatTensor<Dispatch>>,
    grads: Vec<FloatTensor<Dispatch>>,
    lr: &Tensor<1>,
    momentum: &Tensor<1>,
    weight_decay: f64,
    nesterov: bool,
) -> (Vec<FloatTensor<Dispatch>>, Vec<FloatTensor<Dispatch>>) {
    let (p, b) = <Dispatch as InPlaceBackend>::sgd_many(
        TensorList::new(params),
        TensorList::new(buffers),
        TensorList::new(grads),
        lr.clone().into_dispatch(),
        momentum.clone().into_dispatch(),
        weight_decay,
        nesterov,
    );
    (p.tensors, b.tensors)
}

/// Tensors of any ranks, as the list operations take and return them.
pub type Tensors = Vec<FloatTensor<Dispatch>>;

/// AdamW's constants: `beta2`, `eps` and the weight decay of one group of parameters.
#[derive(Debug, Clone, Copy)]
pub struct AdamWConstants {
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

/// AdamW's `[1]` device scalars of one step (see [`InPlaceBackend::adamw_many`]).
pub struct AdamWScalars<'a> {
    pub lr: &'a Tensor<1>,
    pub beta1: &'a Tensor<1>,
    pub one_minus_beta1: &'a Tensor<1>,
    pub bias1: &'a Tensor<1>,
    pub bias2: &'a Tensor<1>,
}

/// One AdamW step of every parameter (any ranks) with its flat moments and gradient, one rate
/// and decay for all, as one operation (see [`InPlaceBackend::adamw_many`]); returns the
/// parameters and both moments, in their own buffers on the GPU when passed as their last use.
pub fn adamw_many(
    params: Tensors,
    exp_avgs: Tensors,
    exp_avg_sqs: Tensors,
    grads: Tensors,
    s: &AdamWScalars,
    c: AdamWConstants,
) -> (Tensors, Tensors, Tensors) {
    let scalars = [s.lr, s.beta1, s.one_minus_beta1, s.bias1, s.bias2].map(|t| t.clone().into_dispatch());
    let (p, m, v) = <Dispatch as InPlaceBackend>::adamw_many(
        TensorList::new(params),
        TensorList::new(exp_avgs),
        TensorList::new(exp_avg_sqs),
        TensorList::new(grads),
        TensorList::new(scalars.into()),
        c.beta2,
        c.eps,
        c.weight_decay,
    );
    (p.tensors, m.tensors, v.tensors)
}

/// `targets[k] * keep + sources[k] * take` for every k (any ranks, each pair of one shape), as
/// one operation; each result in its target's buffer on the GPU when the target is passed as its
/// last use.
pub fn blend_many(targets: Vec<FloatTensor<Dispatch>>, sources: Vec<FloatTensor<Dispatch>>, keep: &Tensor<1>, take: &Tensor<1>) -> Vec<FloatTensor<Dispatch>> {
    <Dispatch as InPlaceBackend>::blend_many(TensorList::new(targets), TensorList::new(sources), keep.clone().into_dispatch(), take.clone().into_dispatch())
        .tensors
}

/// `target * keep + source * take` with constant weights; in target's buffer on the GPU when
/// target is passed as its last use.
pub fn blend_const<const D: usize>(target: Tensor<D>, source: Tensor<D>, keep: f64, take: f64) -> Tensor<D> {
    Tensor::from_dispatch(<burn::backend::Dispatch as InPlaceBackend>::blend_const(target.into_dispatch(), source.into_dispatch(), keep, take))
}

/// BatchNorm's running `mean` and `var` after a batch (see [`InPlaceBackend::running_stats`]);
/// in their own buffers on the GPU when both are passed as their last use.
pub fn running_stats(mean: Tensor<1>, var: Tensor<1>, stats: &Tensor<2>, momentum: f64, correction: f64) -> (Tensor<1>, Tensor<1>) {
    let (m, v) = <burn::backend::Dispatch as InPlaceBackend>::running_stats(
        mean.into_dispatch(),
        var.into_dispatch(),
        stats.clone().into_dispatch(),
        momentum,
        correction,
    );
    (Tensor::from_dispatch(m), Tensor::from_dispatch(v))
}

#[cfg(test)]
mod tests;
