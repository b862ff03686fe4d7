//! The fused operation against the same BatchNorm written with tensor operations and
//! differentiated by burn's autodiff, on the CPU: output, statistics and the three gradients.

use burn::tensor::activation::silu;
use burn::tensor::{Device, Distribution, Tensor};

use super::batch_norm_act;

const EPS: f64 = 1e-3;

/// BatchNorm in training mode from tensor operations (two-pass variance), then SiLU.
fn composed(x: Tensor<4>, weight: Tensor<1>, bias: Tensor<1>, act: bool) -> Tensor<4> {
    let c = x.dims()[1];
    let mean = x.clone().mean_dims(&[0, 2, 3]);
    let centred = x.sub(mean);
    let var = centred.clone().square().mean_dims(&[0, 2, 3]);
    let y = centred.div(var.add_scalar(EPS).sqrt()).mul(weight.reshape([1, c, 1, 1])).add(bias.reshape([1, c, 1, 1]));
    if act { silu(y) } else { y }
}

fn max_rel_diff(a: &Tensor<4>, b: &Tensor<4>) -> f32 {
    let scale = b.clone().abs().max().into_scalar::<f32>().max(1e-6);
    a.clone().sub(b.clone()).abs().max().into_scalar::<f32>() / scale
}

fn max_rel_diff1(a: &Tensor<1>, b: &Tensor<1>) -> f32 {
    max_rel_diff(&a.clone().reshape([1, 1, 1, -1]), &b.clone().reshape([1, 1, 1, -1]))
}

fn check(act: bool) {
    let device = Device::flex();
    let (n, c, h, w) = (3, 8, 5, 7);
    // A channel offset larger than its spread, as after a convolution: the variance must not
    // lose it to cancellation.
    let x0 = Tensor::<4>::random([n, c, h, w], Distribution::Normal(3.0, 1.5), &device);
    let w0 = Tensor::<1>::random([c], Distribution::Normal(1.0, 0.5), &device);
    let b0 = Tensor::<1>::random([c], Distribution::Normal(0.0, 0.5), &device);
    let upstream = Tensor::<4>::random([n, c, h, w], Distribution::Normal(0.0, 1.0), &device).autodiff();

    let leaves = || (x0.clone().autodiff().require_grad(), w0.clone().autodiff().require_grad(), b0.clone().autodiff().require_grad());
    let (x, wt, b) = leaves();
    let fused = batch_norm_act(x.clone(), wt.clone(), b.clone(), EPS, act);
    let grads = fused.output.clone().mul(upstream.clone()).sum().backward();
    let (xr, wr, br) = leaves();
    let want = composed(xr.clone(), wr.clone(), br.clone(), act);
    let want_grads = want.clone().mul(upstream).sum().backward();

    assert!(max_rel_diff(&fused.output.clone().inner(), &want.inner()) < 1e-5, "output");
    let mean_want = x0.clone().mean_dims(&[0, 2, 3]).reshape([c]);
    let var_want = x0.clone().sub(x0.clone().mean_dims(&[0, 2, 3])).square().mean_dims(&[0, 2, 3]).reshape([c]);
    assert!(max_rel_diff1(&fused.mean().inner(), &mean_want) < 1e-5, "mean");
    assert!(max_rel_diff1(&fused.var().inner(), &var_want) < 1e-5, "var");
    assert!(max_rel_diff(&x.grad(&grads).unwrap(), &xr.grad(&want_grads).unwrap()) < 1e-4, "dx");
    assert!(max_rel_diff1(&wt.grad(&grads).unwrap(), &wr.grad(&want_grads).unwrap()) < 1e-4, "dweight");
    assert!(max_rel_diff1(&b.grad(&grads).unwrap(), &br.grad(&want_grads).unwrap()) < 1e-4, "dbias");
}

#[test]
fn batch_norm_matches_autodiff_of_tensor_operations() {
    check(false);
}

#[test]
fn batch_norm_silu_matches_autodiff_of_tensor_operations() {
    check(true);
}

/// Only the affine parameters require gradients (a frozen input): the node registers theirs and
/// none for x; without any gradient required the output is the same and nothing is tracked.
#[test]
fn gradients_flow_only_where_required() {
    let device = Device::flex();
    let (n, c, h, w) = (2, 4, 3, 5);
    let x0 = Tensor::<4>::random([n, c, h, w], Distribution::Normal(1.0, 2.0), &device);
    let w0 = Tensor::<1>::random([c], Distribution::Normal(1.0, 0.5), &device);
    let b0 = Tensor::<1>::random([c], Distribution::Normal(0.0, 0.5), &device);

    let x = x0.clone().autodiff();
    let (wt, b) = (w0.clone().autodiff().require_grad(), b0.clone().autodiff().require_grad());
    let fused = batch_norm_act(x.clone(), wt.clone(), b.clone(), EPS, true);
    let grads = fused.output.clone().sum().backward();
    let (wr, br) = (w0.clone().autodiff().require_grad(), b0.clone().autodiff().require_grad());
    let want_grads = composed(x0.clone().autodiff(), wr.clone(), br.clone(), true).sum().backward();
    assert!(x.grad(&grads).is_none(), "x does not require a gradient");
    assert!(max_rel_diff1(&wt.grad(&grads).unwrap(), &wr.grad(&want_grads).unwrap()) < 1e-4, "dweight");
    assert!(max_rel_diff1(&b.grad(&grads).unwrap(), &br.grad(&want_grads).unwrap()) < 1e-4, "dbias");

    let untracked = batch_norm_act(x0.clone().autodiff(), w0.clone().autodiff(), b0.clone().autodiff(), EPS, true);
    assert!(max_rel_diff(&untracked.output.inner(), &fused.output.clone().inner()) == 0.0, "same output untracked");
    let plain = batch_norm_act(x0, w0, b0, EPS, true);
    assert!(max_rel_diff(&plain.output, &fused.output.inner()) == 0.0, "same output without autodiff");
}
