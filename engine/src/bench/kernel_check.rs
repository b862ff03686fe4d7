//! `bench ops --check`: the custom GPU kernels at every shape of the network's training step, on
//! the bench's device, against the CPU backend in f32 on the same (dtype-rounded) random inputs:
//! the convolution input gradients (on CUDA whichever of vendor/burn-cubecl's candidates its
//! selection picks, among them the im2col matmul and its col2im gather for strided shapes), the
//! convolution weight gradients (on CUDA the split-K kernel of vendor/burn-cubecl) and the
//! fused BatchNorm (+ SiLU) forward and backward with its running-statistics update
//! (libreyolo-kernels), and the gathers of the deformable attention's sampling with their
//! scatter-add backward (burn's, which picks atomic adds by dtype). The device runs whatever
//! its selection picks, so a custom kernel is checked at every shape it will see.

use burn::tensor::module::conv2d_weight_backward;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Device, Distribution, FloatDType, Tensor};
use libreyolo_kernels::batch_norm::batch_norm_act;
use libreyolo_kernels::in_place::running_stats;
use serde::Serialize;

use super::ops::{OpCount, OpSpec, conv_input_grad, gather_rows_fwd_bwd, gather_rows_operands, rand, rand_channels_last, weight_grad_operands};

/// One tensor's error at one shape.
#[derive(Debug, Clone, Serialize)]
pub struct KernelCheck {
    pub spec: OpSpec,
    /// Which result: a convolution's `input_grad` or `weight_grad`, one of the BatchNorm's
    /// `output`, `mean`, `var`, `input_grad`, `weight_grad`, `bias_grad`, `running_mean`,
    /// `running_var`, or the gather's `rows` and `input_grad`.
    pub tensor: &'static str,
    pub dtype: String,
    /// Largest absolute difference from the reference.
    pub max_abs_err: f32,
    /// Largest magnitude of the reference.
    pub max_ref: f32,
    pub tolerance: f32,
    pub pass: bool,
}

/// Error allowed, relative to the reference's largest magnitude: f32 differs only by the order
/// of the additions (10^5-10^6 terms); bf16 and f16 also round the result to 8 or 11 bits.
pub fn tolerance(dtype: FloatDType) -> f32 {
    match dtype {
        FloatDType::F32 => 1e-4,
        FloatDType::F16 => 2e-3,
        _ => 1e-2,
    }
}

/// Error allowed for a convolution's input gradient: in f32 cubek's tensor-core candidates
/// multiply in TF32 (10-bit mantissas; measured at most 3.8e-4 of the magnitude at YOLOv9-t's
/// shapes on an H100), as PyTorch's convolutions do by default (`allow_tf32`).
fn input_grad_tolerance(dtype: FloatDType) -> f32 {
    if dtype == FloatDType::F32 { 2e-3 } else { tolerance(dtype) }
}

/// Error allowed for a result kept in f32 whatever the compute dtype (BatchNorm statistics and
/// affine gradients: f32 sums of the same rounded inputs on both sides).
fn f32_result_tolerance(dtype: FloatDType) -> f32 {
    if dtype == FloatDType::F32 { 1e-4 } else { 1e-3 }
}

/// Checks every `ConvInputGrad`, `ConvWeightGrad`, `BatchNormFwdBwd` and `GatherRowsFwdBwd` of
/// `ops` in `dtype` on `device`.
pub fn run(ops: &[OpCount], dtype: FloatDType, device: &Device) -> Vec<KernelCheck> {
    let checked = |s: &&OpSpec| {
        matches!(s, OpSpec::ConvInputGrad { .. } | OpSpec::ConvWeightGrad { .. } | OpSpec::BatchNormFwdBwd { .. } | OpSpec::GatherRowsFwdBwd { .. })
    };
    let specs: Vec<&OpSpec> = ops.iter().map(|o| &o.spec).filter(checked).collect();
    let mut out = vec![];
    for (i, spec) in specs.iter().enumerate() {
        let results = match **spec {
            OpSpec::ConvInputGrad { input, c_out, k, stride, padding, groups } => input_grad(input, c_out, k, stride, padding, groups, dtype, device),
            OpSpec::ConvWeightGrad { input, c_out, k, stride, padding, groups } => weight_grad(input, c_out, k, stride, padding, groups, dtype, device),
            OpSpec::BatchNormFwdBwd { input, act } => batch_norm(input, act, dtype, device),
            OpSpec::GatherRowsFwdBwd { input, rows } => gather_rows(input, rows, dtype, device),
            _ => unreachable!("filtered above"),
        };
        for (tensor, got, want, tolerance) in results {
            let max_abs_err: f32 = got.sub(want.clone()).abs().max().into_scalar();
            let max_ref: f32 = want.abs().max().into_scalar();
            let pass = max_abs_err <= tolerance * max_ref;
            eprintln!(
                "  [{}/{}] {dtype:?} {spec:?} {tensor}: max error {max_abs_err:.3e} of {max_ref:.3e} ({})",
                i + 1,
                specs.len(),
                if pass { "ok" } else { "FAIL" }
            );
            out.push(KernelCheck { spec: (*spec).clone(), tensor, dtype: format!("{dtype:?}"), max_abs_err, max_ref, tolerance, pass });
        }
    }
    out
}

/// `(tensor, device result on the CPU in f32, CPU reference, tolerance)`, flattened.
type Compared = Vec<(&'static str, Tensor<1>, Tensor<1>, f32)>;

fn on_cpu<const D: usize>(t: &Tensor<D>) -> Tensor<D> {
    t.clone().cast(FloatDType::F32).to_device(&Device::flex())
}

fn flat<const D: usize>(t: Tensor<D>) -> Tensor<1> {
    t.reshape([-1])
}

/// The input gradient on a channels-last output gradient (as the network's backward hands it):
/// strided shapes go through the im2col matmul and its col2im gather on CUDA.
#[allow(clippy::too_many_arguments)]
fn input_grad(input: [usize; 4], c_out: usize, k: usize, stride: usize, padding: usize, groups: usize, dtype: FloatDType, device: &Device) -> Compared {
    let (x, g) = weight_grad_operands(input, c_out, k, stride, padding, dtype, device);
    let w = rand([c_out, input[1] / groups, k, k], dtype, device);
    let o = ConvOptions::new([stride; 2], [padding; 2], [1, 1], groups);
    let got = on_cpu(&conv_input_grad(x.clone(), w.clone(), g.clone(), o.clone()));
    let want = conv_input_grad(on_cpu(&x), on_cpu(&w), on_cpu(&g), o);
    vec![("input_grad", flat(got), flat(want), input_grad_tolerance(dtype))]
}

#[allow(clippy::too_many_arguments)]
fn weight_grad(input: [usize; 4], c_out: usize, k: usize, stride: usize, padding: usize, groups: usize, dtype: FloatDType, device: &Device) -> Compared {
    let (x, g) = weight_grad_operands(input, c_out, k, stride, padding, dtype, device);
    let w = Tensor::<4>::zeros([c_out, input[1] / groups, k, k], device).cast(dtype);
    let o = ConvOptions::new([stride; 2], [padding; 2], [1, 1], groups);
    let got = on_cpu(&conv2d_weight_backward(x.clone(), w.clone(), g.clone(), o.clone()));
    let want = conv2d_weight_backward(on_cpu(&x), on_cpu(&w), on_cpu(&g), o);
    vec![("weight_grad", flat(got), flat(want), tolerance(dtype))]
}

/// The deformable sampling's gather and its backward, whose scatter-add burn runs on CUDA with
/// atomic adds where the dtype has them (f32) and with a serial kernel that accumulates in the
/// dtype otherwise (vendor/burn-cubecl `kernel/index/scatter.rs`): the maps' gradient against the
/// CPU's f32 sums of the same rounded inputs.
fn gather_rows(input: [usize; 3], rows: usize, dtype: FloatDType, device: &Device) -> Compared {
    let (x, at, g) = gather_rows_operands(input, rows, dtype, device);
    let (rows_got, grad_got) = gather_rows_fwd_bwd(x.clone(), at.clone(), g.clone());
    let (rows_want, grad_want) = gather_rows_fwd_bwd(on_cpu(&x), on_cpu(&at), on_cpu(&g));
    vec![("rows", flat(on_cpu(&rows_got)), flat(rows_want), tolerance(dtype)), ("input_grad", flat(on_cpu(&grad_got)), flat(grad_want), tolerance(dtype))]
}

/// The fused BatchNorm (+ SiLU when `act`) forward and backward on a channels-last input (a
/// convolution's output) with an offset mean, as after a convolution.
fn batch_norm(input: [usize; 4], act: bool, dtype: FloatDType, device: &Device) -> Compared {
    let c = input[1];
    let x = rand_channels_last(input, Distribution::Normal(0.5, 2.0), dtype, device);
    let g = rand_channels_last(input, Distribution::Normal(0.0, 1.0), dtype, device);
    let weight = Tensor::<1>::random([c], Distribution::Normal(1.0, 0.5), device);
    let bias = Tensor::<1>::random([c], Distribution::Normal(0.0, 0.5), device);
    let running = Tensor::<2>::random([2, c], Distribution::Uniform(0.5, 1.5), device);
    let values = (input[0] * input[2] * input[3]) as f64;
    let run = |x: Tensor<4>, g: Tensor<4>, weight: Tensor<1>, bias: Tensor<1>, running: Tensor<2>| {
        let (x, weight, bias) = (x.autodiff().require_grad(), weight.autodiff().require_grad(), bias.autodiff().require_grad());
        let out = batch_norm_act(x.clone(), weight.clone(), bias.clone(), libreyolo_families::blocks::batch_norm::EPS, act);
        let grads = out.output.clone().mul(g.autodiff()).sum().backward();
        let grad = |t: &Tensor<1>| t.grad(&grads).expect("reaches the loss");
        let row = |r: usize| running.clone().narrow(0, r, 1).reshape([c]);
        let momentum = libreyolo_families::blocks::batch_norm::MOMENTUM;
        let (running_mean, running_var) = running_stats(row(0), row(1), &out.stats, momentum, values / (values - 1.0));
        [
            flat(on_cpu(&out.output.clone().inner())),
            on_cpu(&out.mean().inner()),
            on_cpu(&out.var().inner()),
            flat(on_cpu(&x.grad(&grads).expect("reaches the loss"))),
            on_cpu(&grad(&weight)),
            on_cpu(&grad(&bias)),
            on_cpu(&running_mean),
            on_cpu(&running_var),
        ]
    };
    let got = run(x.clone(), g.clone(), weight.clone(), bias.clone(), running.clone());
    let want = run(on_cpu(&x), on_cpu(&g), on_cpu(&weight), on_cpu(&bias), on_cpu(&running));
    let names = ["output", "mean", "var", "input_grad", "weight_grad", "bias_grad", "running_mean", "running_var"];
    let in_dtype = [true, false, false, true, false, false, false, false];
    names
        .into_iter()
        .zip(got.into_iter().zip(want))
        .zip(in_dtype)
        .map(|((name, (got, want)), rounded)| (name, got, want, if rounded { tolerance(dtype) } else { f32_result_tolerance(dtype) }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On the CPU the device and the reference are the same backend: the check runs end to end
    /// and finds non-trivial results within f32's tolerance, for every kind it checks.
    #[test]
    fn the_cpu_passes_its_own_check() {
        let ops = [
            OpCount { spec: OpSpec::ConvWeightGrad { input: [2, 3, 8, 8], c_out: 4, k: 3, stride: 1, padding: 1, groups: 1 }, count: 1 },
            OpCount { spec: OpSpec::ConvInputGrad { input: [2, 4, 9, 9], c_out: 6, k: 3, stride: 2, padding: 1, groups: 1 }, count: 1 },
            OpCount { spec: OpSpec::BatchNormFwdBwd { input: [2, 8, 5, 6], act: true }, count: 1 },
            OpCount { spec: OpSpec::GatherRowsFwdBwd { input: [3, 20, 4], rows: 50 }, count: 1 },
        ];
        let rows = run(&ops, FloatDType::F32, &Device::flex());
        assert_eq!(rows.len(), 12);
        for row in &rows {
            assert!(row.pass && row.max_ref > 0.0, "{row:?}");
            assert!(row.max_abs_err <= 1e-4 * row.max_ref);
        }
    }
}
