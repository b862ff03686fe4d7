//! Op-level timings for the exact layer shapes of a network: each convolution's forward,
//! input-gradient and weight-gradient, BatchNorm and SiLU forward+backward, pools, upsample and
//! concat, per unique shape, with how often the shape occurs in one forward. The shapes come
//! from a traced forward (`Ctx::tracing`) at the bench's image size. `bench/torch_ops.py` times
//! the same list (written with `--spec`) through PyTorch for the ratio table.

use burn::backend::Dispatch;
use burn::backend::ops::ModuleOps;
use burn::tensor::activation::silu;
use burn::tensor::module::{avg_pool2d, conv2d, conv2d_weight_backward, interpolate, max_pool2d};
use burn::tensor::ops::{AvgPoolOptions, ConvOptions, InterpolateMode, InterpolateOptions, MaxPoolOptions};
use burn::tensor::{Device, Distribution, FloatDType, Tensor};
use libreyolo_families::blocks::conv::Grouping;
use libreyolo_families::blocks::{ConvShape, batch_norm};
use libreyolo_families::{Ctx, Network, ParamStore, TracedOp};
use serde::{Deserialize, Serialize};

use super::Timer;

/// One op to time, in the shape it has in the network at the bench's batch.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum OpSpec {
    ConvForward {
        input: [usize; 4],
        c_out: usize,
        k: usize,
        stride: usize,
        padding: usize,
        groups: usize,
        bias: bool,
    },
    ConvInputGrad {
        input: [usize; 4],
        c_out: usize,
        k: usize,
        stride: usize,
        padding: usize,
        groups: usize,
    },
    ConvWeightGrad {
        input: [usize; 4],
        c_out: usize,
        k: usize,
        stride: usize,
        padding: usize,
        groups: usize,
    },
    /// Training BatchNorm (batch statistics) forward and backward, on a conv's output, with the
    /// SiLU after it when `act` (one fused operation in the network).
    BatchNormFwdBwd {
        input: [usize; 4],
        #[serde(default)]
        act: bool,
    },
    SiluFwdBwd {
        input: [usize; 4],
    },
    MaxPool {
        input: [usize; 4],
        k: usize,
        stride: usize,
        padding: usize,
    },
    AvgPool {
        input: [usize; 4],
        k: usize,
        stride: usize,
        padding: usize,
    },
    Upsample {
        input: [usize; 4],
        scale: usize,
    },
    Concat {
        inputs: Vec<[usize; 4]>,
    },
    /// A gather of `rows` rows from each of `input[0]` `(tokens, channels)` maps, forward and
    /// backward (the backward a scatter-add: the deformable attention's sampling).
    GatherRowsFwdBwd {
        input: [usize; 3],
        rows: usize,
    },
}

/// The op kinds `bench ops --only` accepts, as [`OpSpec::kind`] names them.
pub const KINDS: [&str; 10] =
    ["conv-forward", "conv-input-grad", "conv-weight-grad", "batchnorm", "silu", "max-pool", "avg-pool", "upsample", "concat", "gather-rows"];

impl OpSpec {
    /// The kind's command-line name (one of [`KINDS`]).
    pub fn kind(&self) -> &'static str {
        match self {
            OpSpec::ConvForward { .. } => "conv-forward",
            OpSpec::ConvInputGrad { .. } => "conv-input-grad",
            OpSpec::ConvWeightGrad { .. } => "conv-weight-grad",
            OpSpec::BatchNormFwdBwd { .. } => "batchnorm",
            OpSpec::SiluFwdBwd { .. } => "silu",
            OpSpec::MaxPool { .. } => "max-pool",
            OpSpec::AvgPool { .. } => "avg-pool",
            OpSpec::Upsample { .. } => "upsample",
            OpSpec::Concat { .. } => "concat",
            OpSpec::GatherRowsFwdBwd { .. } => "gather-rows",
        }
    }

    pub fn category(&self) -> &'static str {
        match self {
            OpSpec::ConvForward { .. } => "conv forward",
            OpSpec::ConvInputGrad { .. } => "conv input-grad",
            OpSpec::ConvWeightGrad { .. } => "conv weight-grad",
            OpSpec::BatchNormFwdBwd { .. } => "batchnorm (+silu) fwd+bwd",
            OpSpec::SiluFwdBwd { .. } => "silu fwd+bwd",
            OpSpec::MaxPool { .. } => "max-pool",
            OpSpec::AvgPool { .. } => "avg-pool",
            OpSpec::Upsample { .. } => "upsample",
            OpSpec::Concat { .. } => "concat",
            OpSpec::GatherRowsFwdBwd { .. } => "gather rows fwd+bwd",
        }
    }
}

/// An op and how many times one training step runs it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpCount {
    pub spec: OpSpec,
    pub count: usize,
}

pub(crate) fn conv_output(input: [usize; 4], c_out: usize, k: usize, stride: usize, padding: usize) -> [usize; 4] {
    let out = |d: usize| (d + 2 * padding - k) / stride + 1;
    [input[0], c_out, out(input[2]), out(input[3])]
}

/// The unique ops of one training step of `network` at `batch` x `height` x `width` (with the
/// PGI auxiliary branch when `with_aux`), with counts: traced from an eval forward at batch 1 on
/// the CPU (shapes do not depend on the mode).
pub fn network_ops(network: &Network, params: &ParamStore, with_aux: bool, batch: usize, height: usize, width: usize) -> Vec<OpCount> {
    let cx = Ctx::eval(params).tracing();
    let x = Tensor::<4>::zeros([1, 3, height, width], &Device::flex());
    let _ = network.forward(x, &cx, with_aux);
    let with_batch = |mut d: [usize; 4]| {
        d[0] = batch;
        d
    };
    let mut ops: Vec<OpCount> = vec![];
    let mut add = |spec: OpSpec| match ops.iter_mut().find(|o| o.spec == spec) {
        Some(o) => o.count += 1,
        None => ops.push(OpCount { spec, count: 1 }),
    };
    for op in cx.take_trace() {
        match op {
            TracedOp::Conv { input, c_out, k, stride, padding, groups, bias, bn, act } => {
                let input = with_batch(input);
                let out = conv_output(input, c_out, k, stride, padding);
                // A grouped convolution runs as dense ones (ConvShape::apply).
                let (conv_in, conv_out, conv_groups, n) = match (ConvShape { c_in: input[1], c_out, k, stride, padding, groups }).grouping() {
                    Grouping::Single => (input, c_out, groups, 1),
                    Grouping::BlockDiagonal => (input, c_out, 1, 1),
                    Grouping::PerGroup => ([input[0], input[1] / groups, input[2], input[3]], c_out / groups, 1, groups),
                };
                for _ in 0..n {
                    let (input, c_out, groups) = (conv_in, conv_out, conv_groups);
                    add(OpSpec::ConvForward { input, c_out, k, stride, padding, groups, bias });
                    add(OpSpec::ConvInputGrad { input, c_out, k, stride, padding, groups });
                    add(OpSpec::ConvWeightGrad { input, c_out, k, stride, padding, groups });
                }
                if bn {
                    add(OpSpec::BatchNormFwdBwd { input: out, act });
                } else if act {
                    add(OpSpec::SiluFwdBwd { input: out });
                }
            }
            TracedOp::MaxPool { input, k, stride, padding } => add(OpSpec::MaxPool { input: with_batch(input), k, stride, padding }),
            TracedOp::AvgPool { input, k, stride, padding } => add(OpSpec::AvgPool { input: with_batch(input), k, stride, padding }),
            TracedOp::Silu { input } => add(OpSpec::SiluFwdBwd { input: with_batch(input) }),
            TracedOp::Upsample { input, scale } => add(OpSpec::Upsample { input: with_batch(input), scale }),
            TracedOp::Concat { inputs } => add(OpSpec::Concat { inputs: inputs.into_iter().map(with_batch).collect() }),
            // Traced at batch 1: the maps are the heads of one image. Four gathers, one a corner.
            TracedOp::GatherRows { input: [maps, tokens, channels], rows } => {
                for _ in 0..4 {
                    add(OpSpec::GatherRowsFwdBwd { input: [maps * batch, tokens, channels], rows });
                }
            }
        }
    }
    ops
}

/// The timing of one op.
#[derive(Debug, Clone, Serialize)]
pub struct OpTiming {
    pub spec: OpSpec,
    pub count: usize,
    pub dtype: String,
    /// Milliseconds per launch (mean over timed runs of `REPS` launches each).
    pub ms: f64,
    /// First run (compilation, autotune), seconds.
    pub first_s: f64,
}

/// Launches per timed run: small ops are timed in bursts, so a device sync is not each one's cost.
pub const REPS: usize = 10;

/// A random input uniform in [-1, 1], rounded to `dtype`.
/// A convolution's input gradient (burn's `conv2d_x_backward`: whichever candidate the
/// backend's selection picks).
pub(super) fn conv_input_grad(x: Tensor<4>, w: Tensor<4>, g: Tensor<4>, o: ConvOptions<2>) -> Tensor<4> {
    Tensor::<4>::from_dispatch(Dispatch::conv2d_x_backward(x.into_dispatch(), w.into_dispatch(), g.into_dispatch(), o))
}

pub(super) fn rand(dims: [usize; 4], dtype: FloatDType, device: &Device) -> Tensor<4> {
    Tensor::<4>::random(dims, Distribution::Uniform(-1.0, 1.0), device).cast(dtype)
}

/// A random `[N, C, H, W]` activation from `distribution`, rounded to `dtype`, laid out
/// channels-last in memory as a convolution returns it (what the network's BatchNorm reads).
pub(super) fn rand_channels_last(dims: [usize; 4], distribution: Distribution, dtype: FloatDType, device: &Device) -> Tensor<4> {
    let [n, c, h, w] = dims;
    Tensor::<4>::random([n, h, w, c], distribution, device).cast(dtype).permute([0, 3, 1, 2])
}

/// A weight gradient's operands as the training step mostly holds them: the gradient
/// channels-last (a convolution's layout), the input too unless it is the 3-channel image, which
/// the loader gives in NCHW. The layout picks the kernel on CUDA (vendor/README.md: the vector
/// kernel needs both channels-last), so NCHW operands would time and check another kernel than
/// the step runs. Not exact: an op spec has no layout, and a few inputs of the step are NCHW
/// besides the image (YOLOX's Focus output, 12 channels), which this gives channels-last.
pub(super) fn weight_grad_operands(
    input: [usize; 4],
    c_out: usize,
    k: usize,
    stride: usize,
    padding: usize,
    dtype: FloatDType,
    device: &Device,
) -> (Tensor<4>, Tensor<4>) {
    let uniform = Distribution::Uniform(-1.0, 1.0);
    let x = if input[1] == 3 { rand(input, dtype, device) } else { rand_channels_last(input, uniform, dtype, device) };
    (x, rand_channels_last(conv_output(input, c_out, k, stride, padding), uniform, dtype, device))
}

/// A gather's operands: the maps `input` and the rows' gradient in `dtype`, and the rows'
/// positions in f32 (whole numbers in `[0, tokens)`, drawn with repeats as the corners of
/// nearby samples share rows), each `[maps, rows, 1]`.
pub(super) fn gather_rows_operands(input: [usize; 3], rows: usize, dtype: FloatDType, device: &Device) -> (Tensor<3>, Tensor<3>, Tensor<3>) {
    let [maps, tokens, channels] = input;
    let uniform = Distribution::Uniform(-1.0, 1.0);
    let x = Tensor::<3>::random(input, uniform, device).cast(dtype);
    let at = Tensor::<3>::random([maps, rows, 1], Distribution::Uniform(0.0, tokens as f64), device).floor().clamp(0.0, (tokens - 1) as f32);
    (x, at, Tensor::<3>::random([maps, rows, channels], uniform, device).cast(dtype))
}

/// The gathered rows of `x` at `at` and `x`'s gradient for the rows' gradient `g` (the
/// deformable sampling's `value.gather(1, index)` and its backward).
pub(super) fn gather_rows_fwd_bwd(x: Tensor<3>, at: Tensor<3>, g: Tensor<3>) -> (Tensor<3>, Tensor<3>) {
    let channels = x.dims()[2];
    let leaf = x.autodiff().require_grad();
    let index = at.autodiff().int().repeat_dim(2, channels);
    let rows = leaf.clone().gather(1, index);
    let grads = rows.clone().mul(g.autodiff()).sum().backward();
    (rows.inner(), leaf.grad(&grads).expect("the rows reach the sum"))
}

/// Times every op of `ops` in `dtype` on the timer's device.
pub fn run(ops: &[OpCount], dtype: FloatDType, timer: &Timer) -> Vec<OpTiming> {
    let device = timer.device;
    let mut out = vec![];
    for (i, OpCount { spec, count }) in ops.iter().enumerate() {
        let name = format!("[{}/{}] {dtype:?} x{count} {spec:?}", i + 1, ops.len());
        let timing = match spec {
            OpSpec::ConvForward { input, c_out, k, stride, padding, groups, bias } => {
                let x = rand(*input, dtype, device);
                let w = rand([*c_out, input[1] / groups, *k, *k], dtype, device);
                let b = bias.then(|| Tensor::<1>::zeros([*c_out], device).cast(dtype));
                let o = ConvOptions::new([*stride; 2], [*padding; 2], [1, 1], *groups);
                timer.time(&name, || repeat(REPS, || conv2d(x.clone(), w.clone(), b.clone(), o.clone())))
            }
            OpSpec::ConvInputGrad { input, c_out, k, stride, padding, groups } => {
                let x = rand(*input, dtype, device);
                let w = rand([*c_out, input[1] / groups, *k, *k], dtype, device);
                let g = rand(conv_output(*input, *c_out, *k, *stride, *padding), dtype, device);
                let o = ConvOptions::new([*stride; 2], [*padding; 2], [1, 1], *groups);
                timer.time(&name, || repeat(REPS, || conv_input_grad(x.clone(), w.clone(), g.clone(), o.clone())))
            }
            OpSpec::ConvWeightGrad { input, c_out, k, stride, padding, groups } => {
                let (x, g) = weight_grad_operands(*input, *c_out, *k, *stride, *padding, dtype, device);
                let w = rand([*c_out, input[1] / groups, *k, *k], dtype, device);
                let o = ConvOptions::new([*stride; 2], [*padding; 2], [1, 1], *groups);
                timer.time(&name, || repeat(REPS, || conv2d_weight_backward(x.clone(), w.clone(), g.clone(), o.clone())))
            }
            OpSpec::BatchNormFwdBwd { input, .. } | OpSpec::SiluFwdBwd { input } => {
                let x = rand_channels_last(*input, Distribution::Uniform(-1.0, 1.0), dtype, device);
                let g = rand_channels_last(*input, Distribution::Uniform(-1.0, 1.0), dtype, device);
                let c = input[1];
                let (weight, bias) = (Tensor::<1>::ones([c], device), Tensor::<1>::zeros([c], device));
                timer.time(&name, || {
                    repeat(REPS, || {
                        let leaf = x.clone().autodiff().require_grad();
                        let y = match spec {
                            // The network's own training BatchNorm (fused, or composed under `LIBREYOLO_BN=composed`).
                            OpSpec::BatchNormFwdBwd { act, .. } => batch_norm::train(leaf.clone(), weight.clone(), bias.clone(), batch_norm::EPS, *act).0,
                            _ => silu(leaf.clone()),
                        };
                        let grads = y.mul(g.clone().autodiff()).sum().backward();
                        leaf.grad(&grads)
                    })
                })
            }
            OpSpec::MaxPool { input, k, stride, padding } => {
                let x = rand(*input, dtype, device);
                let o = MaxPoolOptions::new([*k; 2]).with_stride([*stride; 2]).with_padding([*padding; 2]);
                timer.time(&name, || repeat(REPS, || max_pool2d(x.clone(), o.clone())))
            }
            OpSpec::AvgPool { input, k, stride, padding } => {
                let x = rand(*input, dtype, device);
                let o = AvgPoolOptions::new([*k; 2]).with_stride([*stride; 2]).with_padding([*padding; 2]).with_count_include_pad(true);
                timer.time(&name, || repeat(REPS, || avg_pool2d(x.clone(), o.clone())))
            }
            OpSpec::Upsample { input, scale } => {
                let x = rand(*input, dtype, device);
                let o = InterpolateOptions::new(InterpolateMode::Nearest).with_scale_factor([*scale as f32; 2]);
                timer.time(&name, || repeat(REPS, || interpolate(x.clone(), o.clone())))
            }
            OpSpec::Concat { inputs } => {
                let xs: Vec<Tensor<4>> = inputs.iter().map(|d| rand(*d, dtype, device)).collect();
                timer.time(&name, || repeat(REPS, || Tensor::cat(xs.clone(), 1)))
            }
            OpSpec::GatherRowsFwdBwd { input, rows } => {
                let (x, at, g) = gather_rows_operands(*input, *rows, dtype, device);
                timer.time(&name, || repeat(REPS, || gather_rows_fwd_bwd(x.clone(), at.clone(), g.clone()).1))
            }
        };
        out.push(OpTiming { spec: spec.clone(), count: *count, dtype: format!("{dtype:?}"), ms: timing.mean_ms / REPS as f64, first_s: timing.first_s });
    }
    out
}

/// Per-category totals for one training step (ms per launch x launches per step).
pub fn totals(timings: &[OpTiming]) -> Vec<(String, String, f64, usize)> {
    let mut rows: Vec<(String, String, f64, usize)> = vec![];
    for t in timings {
        let cat = t.spec.category().to_string();
        match rows.iter_mut().find(|r| r.0 == cat && r.1 == t.dtype) {
            Some(r) => {
                r.2 += t.ms * t.count as f64;
                r.3 += t.count;
            }
            None => rows.push((cat, t.dtype.clone(), t.ms * t.count as f64, t.count)),
        }
    }
    rows
}

/// Runs `f` `n` times and returns the last result: every run launches its kernels. (Spelled
/// `map(..).last()`, clippy suggests `next_back()`, which would run only one.)
fn repeat<T>(n: usize, mut f: impl FnMut() -> T) -> Option<T> {
    let mut last = None;
    for _ in 0..n {
        last = Some(f());
    }
    last
}
