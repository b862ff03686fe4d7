//! The updates composed of burn's primitive operations, in the order the optimizer and EMA
//! always wrote them: what the CPU runs, and the reference the GPU kernels are checked against.

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Scalar, TensorMetadata};
use burn::tensor::{Shape, Slice};

use crate::tensor_list::TensorList;

/// `t` reshaped to `shape`.
fn shaped<B: Backend>(t: FloatTensor<B>, shape: Shape) -> FloatTensor<B> {
    B::float_reshape(t, shape)
}

/// A `[1]` scalar broadcastable against a tensor of `rank`.
fn scalar_of_rank<B: Backend>(s: FloatTensor<B>, rank: usize) -> FloatTensor<B> {
    B::float_reshape(s, Shape::from(vec![1; rank]))
}

pub fn sgd_step<B: Backend>(
    param: FloatTensor<B>,
    buffer: FloatTensor<B>,
    grad: FloatTensor<B>,
    lr: FloatTensor<B>,
    momentum: FloatTensor<B>,
    weight_decay: f64,
    nesterov: bool,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let shape = param.shape();
    let p = shaped::<B>(param, buffer.shape());
    let g = if weight_decay > 0.0 { B::float_add(grad, B::float_mul_scalar(p.clone(), Scalar::Float(weight_decay))) } else { grad };
    let new_buffer = B::float_add(B::float_mul(buffer, momentum.clone()), g.clone());
    let step = if nesterov { B::float_add(g, B::float_mul(new_buffer.clone(), momentum)) } else { new_buffer.clone() };
    let p = B::float_sub(p, B::float_mul(step, lr));
    (shaped::<B>(p, shape), new_buffer)
}

/// The items of a list operation: the k-th tensor of each list side by side, once every list is
/// checked to hold one tensor an item (`op: what` is the message otherwise).
pub fn items<B: Backend, const N: usize>(lists: [TensorList<B>; N], op: &str, what: &str) -> impl Iterator<Item = [FloatTensor<B>; N]> {
    let n = lists[0].tensors.len();
    assert!(lists.iter().all(|l| l.tensors.len() == n), "{op}: {what}");
    let mut lists = lists.map(|l| l.tensors.into_iter());
    (0..n).map(move |_| std::array::from_fn(|k| lists[k].next().expect("every list holds n tensors")))
}

pub fn sgd_many<B: Backend>(
    params: TensorList<B>,
    buffers: TensorList<B>,
    grads: TensorList<B>,
    lr: FloatTensor<B>,
    momentum: FloatTensor<B>,
    weight_decay: f64,
    nesterov: bool,
) -> (TensorList<B>, TensorList<B>) {
    let triples = items([params, buffers, grads], "sgd_many", SGD_ITEMS);
    let (p, b) = triples.map(|[p, b, g]| sgd_step::<B>(p, b, g, lr.clone(), momentum.clone(), weight_decay, nesterov)).unzip();
    (TensorList::new(p), TensorList::new(b))
}

/// AdamW in the order the optimizer composed it before the list operation: the moments, then
/// `step = m / bias1 / (sqrt(v / bias2) + eps) * lr`, then `param * (1 - lr * weight_decay) -
/// step`.
pub fn adamw_step<B: Backend>(
    [param, exp_avg, exp_avg_sq, grad]: [FloatTensor<B>; 4],
    [lr, beta1, one_minus_beta1, bias1, bias2]: [FloatTensor<B>; 5],
    c: super::AdamWConstants,
) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
    let shape = param.shape();
    let p = shaped::<B>(param, exp_avg.shape());
    let m = B::float_add(B::float_mul(exp_avg, beta1), B::float_mul(grad.clone(), one_minus_beta1));
    let squared = B::float_mul(grad.clone(), grad);
    let v = B::float_add(B::float_mul_scalar(exp_avg_sq, Scalar::Float(c.beta2)), B::float_mul_scalar(squared, Scalar::Float(1.0 - c.beta2)));
    let denominator = B::float_add_scalar(B::float_sqrt(B::float_div(v.clone(), bias2)), Scalar::Float(c.eps));
    let step = B::float_mul(B::float_div(B::float_div(m.clone(), bias1), denominator), lr.clone());
    let keep = B::float_add_scalar(B::float_mul_scalar(lr, Scalar::Float(-c.weight_decay)), Scalar::Float(1.0));
    let p = B::float_sub(B::float_mul(p, keep), step);
    (shaped::<B>(p, shape), m, v)
}

/// The five `[1]` scalars of [`super::InPlaceBackend::adamw_many`], in their order.
pub fn adamw_scalars<B: Backend>(scalars: TensorList<B>) -> [FloatTensor<B>; 5] {
    scalars.tensors.try_into().unwrap_or_else(|t: Vec<_>| panic!("adamw_many: 5 scalars (lr, beta1, 1 - beta1, bias1, bias2), got {}", t.len()))
}

/// Scalars side by side in one tensor (a kernel reads them through one parameter).
pub fn packed<B: Backend>(scalars: &[FloatTensor<B>]) -> FloatTensor<B> {
    B::float_cat(scalars.to_vec(), 0)
}

pub fn adamw_many<B: Backend>(
    params: TensorList<B>,
    exp_avgs: TensorList<B>,
    exp_avg_sqs: TensorList<B>,
    grads: TensorList<B>,
    scalars: TensorList<B>,
    c: super::AdamWConstants,
) -> (TensorList<B>, TensorList<B>, TensorList<B>) {
    let s = adamw_scalars(scalars);
    let quads = items([params, exp_avgs, exp_avg_sqs, grads], "adamw_many", ADAMW_ITEMS);
    three_lists(quads.map(|quad| adamw_step::<B>(quad, s.clone(), c)))
}

/// What each item of the list operations comes with (their length check's message).
pub const SGD_ITEMS: &str = "a buffer and a gradient for each parameter";
pub const ADAMW_ITEMS: &str = "two moments and a gradient for each parameter";
pub const BLEND_ITEMS: &str = "as many sources as targets";

/// Three lists from an operation's results, item by item.
pub fn three_lists<B: Backend>(
    results: impl Iterator<Item = (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>)>,
) -> (TensorList<B>, TensorList<B>, TensorList<B>) {
    let (a, (b, c)): (Vec<_>, (Vec<_>, Vec<_>)) = results.map(|(a, b, c)| (a, (b, c))).unzip();
    (TensorList::new(a), TensorList::new(b), TensorList::new(c))
}

pub fn blend<B: Backend>(target: FloatTensor<B>, source: FloatTensor<B>, keep: FloatTensor<B>, take: FloatTensor<B>) -> FloatTensor<B> {
    let rank = target.shape().num_dims();
    B::float_add(B::float_mul(target, scalar_of_rank::<B>(keep, rank)), B::float_mul(source, scalar_of_rank::<B>(take, rank)))
}

pub fn blend_many<B: Backend>(targets: TensorList<B>, sources: TensorList<B>, keep: FloatTensor<B>, take: FloatTensor<B>) -> TensorList<B> {
    let pairs = items([targets, sources], "blend_many", BLEND_ITEMS);
    TensorList::new(pairs.map(|[t, s]| blend::<B>(t, s, keep.clone(), take.clone())).collect())
}

pub fn blend_const<B: Backend>(target: FloatTensor<B>, source: FloatTensor<B>, keep: f64, take: f64) -> FloatTensor<B> {
    B::float_add(B::float_mul_scalar(target, Scalar::Float(keep)), B::float_mul_scalar(source, Scalar::Float(take)))
}

pub fn running_stats<B: Backend>(
    mean: FloatTensor<B>,
    var: FloatTensor<B>,
    stats: FloatTensor<B>,
    momentum: f64,
    correction: f64,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let c = mean.shape()[0];
    let row = |r: isize, like: &FloatTensor<B>| {
        let slices = [Slice::new(r, Some(r + 1), 1), Slice::new(0, None, 1)];
        B::float_cast(B::float_reshape(B::float_slice(stats.clone(), &slices), Shape::new([c])), like.dtype().into())
    };
    let (batch_mean, batch_var) = (row(0, &mean), row(1, &var));
    let batch_var = B::float_mul_scalar(batch_var, Scalar::Float(correction));
    (blend_const::<B>(mean, batch_mean, 1.0 - momentum, momentum), blend_const::<B>(var, batch_var, 1.0 - momentum, momentum))
}
