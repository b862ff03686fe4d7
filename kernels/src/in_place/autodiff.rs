//! The updates are not differentiable (they write the training state after the backward pass):
//! with autodiff they run on the inner backend.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::tensor::FloatTensor;
use burn::backend::{AutodiffBackend, Backend};

use super::InPlaceBackend;
use crate::tensor_list::TensorList;

impl<B: Backend + InPlaceBackend, C: CheckpointStrategy> InPlaceBackend for Autodiff<B, C> {
    fn sgd_many(
        params: TensorList<Self>,
        buffers: TensorList<Self>,
        grads: TensorList<Self>,
        lr: FloatTensor<Self>,
        momentum: FloatTensor<Self>,
        weight_decay: f64,
        nesterov: bool,
    ) -> (TensorList<Self>, TensorList<Self>) {
        let inner = |l: TensorList<Self>| TensorList::new(l.tensors.into_iter().map(Self::inner).collect());
        let outer = |l: TensorList<B>| TensorList::new(l.tensors.into_iter().map(Self::from_inner).collect());
        let (p, b) = B::sgd_many(inner(params), inner(buffers), inner(grads), Self::inner(lr), Self::inner(momentum), weight_decay, nesterov);
        (outer(p), outer(b))
    }

    fn adamw_many(
        params: TensorList<Self>,
        exp_avgs: TensorList<Self>,
        exp_avg_sqs: TensorList<Self>,
        grads: TensorList<Self>,
        scalars: TensorList<Self>,
        beta2: f64,
        eps: f64,
        weight_decay: f64,
    ) -> (TensorList<Self>, TensorList<Self>, TensorList<Self>) {
        let inner = |l: TensorList<Self>| TensorList::new(l.tensors.into_iter().map(Self::inner).collect());
        let outer = |l: TensorList<B>| TensorList::new(l.tensors.into_iter().map(Self::from_inner).collect());
        let (p, m, v) = B::adamw_many(inner(params), inner(exp_avgs), inner(exp_avg_sqs), inner(grads), inner(scalars), beta2, eps, weight_decay);
        (outer(p), outer(m), outer(v))
    }

    fn blend_many(targets: TensorList<Self>, sources: TensorList<Self>, keep: FloatTensor<Self>, take: FloatTensor<Self>) -> TensorList<Self> {
        let inner = |l: TensorList<Self>| TensorList::new(l.tensors.into_iter().map(Self::inner).collect());
        let out = B::blend_many(inner(targets), inner(sources), Self::inner(keep), Self::inner(take));
        TensorList::new(out.tensors.into_iter().map(Self::from_inner).collect())
    }

    fn blend_const(target: FloatTensor<Self>, source: FloatTensor<Self>, keep: f64, take: f64) -> FloatTensor<Self> {
        Self::from_inner(B::blend_const(Self::inner(target), Self::inner(source), keep, take))
    }

    fn running_stats(
        mean: FloatTensor<Self>,
        var: FloatTensor<Self>,
        stats: FloatTensor<Self>,
        momentum: f64,
        correction: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let (m, v) = B::running_stats(Self::inner(mean), Self::inner(var), Self::inner(stats), momentum, correction);
        (Self::from_inner(m), Self::from_inner(v))
    }
}
