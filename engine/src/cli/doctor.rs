//! `libreyolo-run doctor`: is this machine's compute device usable, and does graph capture
//! work on it? Enumerates devices, checks a matmul and a convolution against the CPU, then
//! captures a small computation as a CUDA graph and replays it on fresh inputs written in place
//! into its stable input buffer, comparing each replay with an eager run.

use std::cell::RefCell;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use burn::tensor::activation::silu;
use burn::tensor::module::conv2d;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Device, Tensor, TensorData, s};
use clap::Args;
use serde::Serialize;

use super::Failure;
use crate::device::{self, Backend};
use crate::manifest::DeviceRequest;

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Device to check: auto, cpu, or a CUDA index.
    #[arg(long, default_value = "auto")]
    device: DeviceRequest,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
struct Report {
    cuda_devices: Vec<String>,
    /// NCCL loadable (multi-GPU training needs it).
    nccl: bool,
    device: String,
    kernel_cache: Option<String>,
    matmul_max_rel_err: f32,
    conv2d_max_rel_err: f32,
    /// Seconds for the first op on the device (driver start, kernel compilation).
    first_op_s: f64,
    graph_hardware: bool,
    graph_capture_s: f64,
    /// Largest |replay - eager| over the replays.
    graph_replay_max_abs_diff: f32,
    graph_replays_bitwise_equal: bool,
    graph_replays_distinct: bool,
    /// The optimizer's, EMA's and running statistics' in-place kernels against the CPU, queued
    /// and replayed in a graph: largest relative error.
    in_place_updates_max_rel_err: f32,
    passed: bool,
}

/// Relative error allowed against the CPU: GPU matmuls may use TF32 and other summation orders.
const OP_TOLERANCE: f32 = 1e-2;

/// Relative error allowed for the in-place updates: elementwise f32, so a few ulp (the GPU may
/// fuse a multiply-add that the CPU rounds twice).
const IN_PLACE_TOLERANCE: f32 = 1e-5;

pub fn run(args: &DoctorArgs) -> Result<(), Failure> {
    let report = check(args)?;
    println!("{}", serde_json::to_string_pretty(&report).expect("report serializes"));
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report).expect("report serializes")).with_context(|| format!("writing {}", path.display()))?;
    }
    if !report.passed {
        return Err(Failure::Run(anyhow::anyhow!("doctor: some checks failed (see the report above)")));
    }
    Ok(())
}

fn check(args: &DoctorArgs) -> anyhow::Result<Report> {
    let kernel_cache = crate::kernel_cache::configure().map(|p| p.display().to_string());
    let started = Instant::now();
    let n = device::cuda_device_count();
    let cuda_devices: Vec<String> = (0..n)
        .map(|i| {
            let name = Device::cuda(i).identity().map(|id| id.name).unwrap_or_else(|| "unknown".into());
            format!("cuda:{i} {name}")
        })
        .collect();
    eprintln!("[{:>6.1}s] {} CUDA device(s): {:?}", started.elapsed().as_secs_f64(), n, cuda_devices);
    let nccl = cubecl_cuda::nccl::nccl_available();
    if n > 1 || nccl {
        eprintln!("[{:>6.1}s] NCCL (multi-GPU): {}", started.elapsed().as_secs_f64(), if nccl { "found" } else { "not found as libnccl.so" });
    }

    let resolved = device::resolve(&args.device).map_err(anyhow::Error::msg)?;
    let dev = resolved.devices().into_iter().next().expect("at least one device");
    let cpu = Device::flex();
    eprintln!("[{:>6.1}s] checking {}", started.elapsed().as_secs_f64(), resolved.describe());

    let t0 = Instant::now();
    let matmul = |d: &Device| {
        let a = tensor2(&host_data(1, 64 * 96), [64, 96], d);
        let b = tensor2(&host_data(2, 96 * 48), [96, 48], d);
        a.matmul(b).into_data()
    };
    let matmul_err = max_rel_err(&matmul(&dev), &matmul(&cpu));
    let first_op_s = t0.elapsed().as_secs_f64();
    eprintln!("[{:>6.1}s] matmul max rel err {matmul_err:.2e} (first op {first_op_s:.1}s)", started.elapsed().as_secs_f64());

    let conv = |d: &Device| {
        let x = Tensor::<4>::from_data(TensorData::new(host_data(3, 2 * 3 * 32 * 32), [2, 3, 32, 32]), d);
        let w = Tensor::<4>::from_data(TensorData::new(host_data(4, 8 * 3 * 3 * 3), [8, 3, 3, 3]), d);
        conv2d(x, w, None, ConvOptions::new([2, 2], [1, 1], [1, 1], 1)).into_data()
    };
    let conv_err = max_rel_err(&conv(&dev), &conv(&cpu));
    eprintln!("[{:>6.1}s] conv2d max rel err {conv_err:.2e}", started.elapsed().as_secs_f64());

    let graph = check_graph(&dev, &started)?;
    let in_place_err = check_in_place_updates(&dev, &started);
    let hardware_required = resolved.backend == Backend::Cuda;
    let passed = matmul_err <= OP_TOLERANCE
        && conv_err <= OP_TOLERANCE
        && in_place_err <= IN_PLACE_TOLERANCE
        && graph.max_abs_diff <= 1e-5
        && graph.distinct
        && (graph.hardware || !hardware_required);
    Ok(Report {
        cuda_devices,
        nccl,
        device: resolved.describe(),
        kernel_cache,
        matmul_max_rel_err: matmul_err,
        conv2d_max_rel_err: conv_err,
        first_op_s,
        graph_hardware: graph.hardware,
        graph_capture_s: graph.capture_s,
        graph_replay_max_abs_diff: graph.max_abs_diff,
        graph_replays_bitwise_equal: graph.max_abs_diff == 0.0,
        graph_replays_distinct: graph.distinct,
        in_place_updates_max_rel_err: in_place_err,
        passed,
    })
}

struct GraphCheck {
    hardware: bool,
    capture_s: f64,
    max_abs_diff: f32,
    distinct: bool,
}

/// Captures `silu(x @ w) * 2 + x.sum_dim(1)` with `x` a stable buffer, then for new inputs
/// writes them into `x` in place, replays, and compares with an eager run.
fn check_graph(dev: &Device, started: &Instant) -> anyhow::Result<GraphCheck> {
    let (rows, cols) = (16, 64);
    let w = tensor2(&host_data(10, cols * cols), [cols, cols], dev);
    let f = |x: Tensor<2>, w: &Tensor<2>| silu(x.clone().matmul(w.clone())).mul_scalar(2.0).add(x.sum_dim(1));
    // The closure borrows the input; owning a clone would make the in-place refresh allocate.
    let x = RefCell::new(tensor2(&host_data(11, rows * cols), [rows, cols], dev));

    let t0 = Instant::now();
    let mut graph = burn::tensor::capture(dev, || f(x.borrow().clone(), &w));
    let capture_s = t0.elapsed().as_secs_f64();
    let hardware = graph.is_hardware();
    eprintln!("[{:>6.1}s] graph captured in {capture_s:.2}s, hardware graph: {hardware}", started.elapsed().as_secs_f64());

    let mut max_abs_diff = 0f32;
    let mut distinct = true;
    let mut previous: Option<Vec<f32>> = None;
    for seed in 20..23 {
        let fresh = tensor2(&host_data(seed, rows * cols), [rows, cols], dev);
        {
            let mut x = x.borrow_mut();
            if hardware && !x.can_mut() {
                bail!("the graph's input buffer is shared, so an in-place refresh would not reach the graph");
            }
            x.inplace(|t| t.slice_assign(s![.., ..], fresh.clone()));
        }
        let replayed = unsafe { graph.replay() }.clone().into_data();
        let eager = f(fresh, &w).into_data();
        let replayed_v = replayed.try_to_vec::<f32>().context("graph output is f32")?;
        let eager_v = eager.try_to_vec::<f32>().context("eager output is f32")?;
        for (a, b) in replayed_v.iter().zip(&eager_v) {
            max_abs_diff = max_abs_diff.max((a - b).abs());
        }
        if previous.as_ref() == Some(&replayed_v) {
            distinct = false;
        }
        previous = Some(replayed_v);
    }
    eprintln!("[{:>6.1}s] 3 replays vs eager: max |diff| {max_abs_diff:e}, distinct outputs: {distinct}", started.elapsed().as_secs_f64());
    Ok(GraphCheck { hardware, capture_s, max_abs_diff, distinct })
}

/// The checked state's sizes: several cubes of the kernels' launch (256 units), the last partial.
const PARAM_DIMS: [usize; 4] = [40, 33, 3, 3];
const PARAM_LEN: usize = 40 * 33 * 3 * 3;
const CHANNELS: usize = 333;

/// Lengths of the EMA's other averaged vectors: more than one launch of `blend_many` (16 pairs
/// each), lengths across a cube's 256 units, each blended toward the start of the momentum buffer.
const EXTRA_LENS: [usize; 18] = [1, 2, 3, 7, 16, 64, 100, 255, 256, 257, 300, 511, 512, 513, 1000, 2048, 4099, 9000];

/// The training state a step updates in place: a conv weight and its momentum buffer (SGD,
/// Nesterov, weight decay), its EMA with other averaged vectors (one `blend_many`), a running
/// statistic, and a second weight with its two moments (AdamW, weight decay).
struct UpdatedState {
    param: Tensor<4>,
    buffer: Tensor<1>,
    average: Tensor<4>,
    running: Tensor<1>,
    /// AdamW's parameter, first and second moment.
    adam: [Tensor<1>; 3],
    extras: Vec<Tensor<1>>,
}

impl UpdatedState {
    fn new(dev: &Device) -> Self {
        Self {
            param: Tensor::from_data(TensorData::new(host_data(30, PARAM_LEN), PARAM_DIMS), dev),
            buffer: Tensor::from_data(TensorData::new(host_data(31, PARAM_LEN), [PARAM_LEN]), dev),
            average: Tensor::from_data(TensorData::new(host_data(32, PARAM_LEN), PARAM_DIMS), dev),
            running: Tensor::from_data(TensorData::new(host_data(33, CHANNELS), [CHANNELS]), dev),
            adam: [36, 37, 38].map(|seed| {
                // The second moment is a running mean of squares: not negative.
                let values = host_data(seed, PARAM_LEN).into_iter().map(|v| if seed == 38 { v.abs() } else { v }).collect::<Vec<_>>();
                Tensor::from_data(TensorData::new(values, [PARAM_LEN]), dev)
            }),
            extras: EXTRA_LENS.iter().enumerate().map(|(i, &n)| Tensor::from_data(TensorData::new(host_data(40 + i as u64, n), [n]), dev)).collect(),
        }
    }

    fn step(&mut self, grad: &Tensor<1>, batch: &Tensor<1>, scalars: &[Tensor<1>; 5]) {
        use libreyolo_kernels::in_place::{AdamWConstants, AdamWScalars, adamw_many, blend_const, blend_many, sgd_many};
        let [lr, momentum, decay, one_minus, bias2] = scalars;
        let [p, m, v] = std::mem::replace(&mut self.adam, [0, 1, 2].map(|_| grad.clone())).map(|t| vec![t.into_dispatch()]);
        let adam_scalars = AdamWScalars { lr, beta1: decay, one_minus_beta1: one_minus, bias1: one_minus, bias2 };
        let (p, m, v) = adamw_many(p, m, v, vec![grad.clone().into_dispatch()], &adam_scalars, AdamWConstants { beta2: 0.999, eps: 1e-8, weight_decay: 0.05 });
        self.adam = [p, m, v].map(|t| Tensor::from_dispatch(t.into_iter().next().expect("one")));
        let (param, buffer) = (std::mem::replace(&mut self.param, self.average.clone()), std::mem::replace(&mut self.buffer, grad.clone()));
        let (params, buffers) =
            sgd_many(vec![param.into_dispatch()], vec![buffer.into_dispatch()], vec![grad.clone().into_dispatch()], lr, momentum, 5e-4, true);
        (self.param, self.buffer) =
            (Tensor::from_dispatch(params.into_iter().next().expect("one")), Tensor::from_dispatch(buffers.into_iter().next().expect("one")));
        let average = std::mem::replace(&mut self.average, self.param.clone());
        let extras = std::mem::take(&mut self.extras);
        let sources: Vec<_> = std::iter::once(self.param.clone().into_dispatch())
            .chain(extras.iter().map(|e| self.buffer.clone().narrow(0, 0, e.dims()[0]).into_dispatch()))
            .collect();
        let targets: Vec<_> = std::iter::once(average.into_dispatch()).chain(extras.into_iter().map(Tensor::into_dispatch)).collect();
        let mut blended = blend_many(targets, sources, decay, one_minus).into_iter();
        self.average = Tensor::from_dispatch(blended.next().expect("the average"));
        self.extras = blended.map(Tensor::from_dispatch).collect();
        self.running.inplace(|r| blend_const(r, batch.clone(), 0.97, 0.03));
    }

    /// The state on the host, read now: `into_data` may hand back bytes that are only read from
    /// the device when first touched, after the next in-place update.
    fn values(&self) -> Vec<TensorData> {
        let read = |t: TensorData| TensorData::new(t.try_to_vec::<f32>().unwrap_or_default(), t.shape().clone());
        let mut out = vec![
            read(self.param.clone().into_data()),
            read(self.buffer.clone().into_data()),
            read(self.average.clone().into_data()),
            read(self.running.clone().into_data()),
        ];
        out.extend(self.adam.iter().map(|t| read(t.clone().into_data())));
        out.extend(self.extras.iter().map(|e| read(e.clone().into_data())));
        out
    }
}

/// Three updates queued on `dev` without reads, then read, against the CPU; then one captured
/// and replayed three times. The largest relative error.
fn check_in_place_updates(dev: &Device, started: &Instant) -> f32 {
    let cpu = Device::flex();
    let (gv, bv) = (host_data(34, PARAM_LEN), host_data(35, CHANNELS));
    let inputs = |d: &Device| {
        let scalar = |v: f32| Tensor::<1>::from_data(TensorData::new(vec![v], [1]), d);
        (
            Tensor::<1>::from_data(TensorData::new(gv.clone(), [PARAM_LEN]), d),
            Tensor::<1>::from_data(TensorData::new(bv.clone(), [CHANNELS]), d),
            [scalar(0.01), scalar(0.937), scalar(0.9), scalar(0.1), scalar(1e-3)],
        )
    };
    let on_cpu = |values: &[TensorData]| {
        let t = |d: &TensorData| Tensor::<1>::from_data(TensorData::new(d.try_to_vec::<f32>().unwrap_or_default(), [d.num_elements()]), &cpu);
        UpdatedState {
            param: t(&values[0]).reshape(PARAM_DIMS),
            buffer: t(&values[1]),
            average: t(&values[2]).reshape(PARAM_DIMS),
            running: t(&values[3]),
            adam: [t(&values[4]), t(&values[5]), t(&values[6])],
            extras: values[7..].iter().map(t).collect(),
        }
    };
    let errors = |from: &[TensorData], got: &[TensorData]| -> Vec<f32> {
        let (g, b, s) = inputs(&cpu);
        let mut want = on_cpu(from);
        for _ in 0..3 {
            want.step(&g, &b, &s);
        }
        got.iter().zip(want.values()).map(|(x, w)| max_rel_err(x, &w)).collect()
    };
    let (grad, batch, scalars) = inputs(dev);
    let mut eager = UpdatedState::new(dev);
    let start = eager.values();
    for _ in 0..3 {
        eager.step(&grad, &batch, &scalars);
    }
    let got = eager.values();
    let eager_errors = errors(&start, &got);
    let state = RefCell::new(UpdatedState::new(dev));
    let mut graph = burn::tensor::capture(dev, || state.borrow_mut().step(&grad, &batch, &scalars));
    let before = state.borrow().values();
    for _ in 0..3 {
        unsafe { graph.replay() };
    }
    let after = state.borrow().values();
    let graph_errors = errors(&before, &after);
    let max = |errors: &[f32]| errors.iter().copied().fold(0f32, f32::max);
    eprintln!(
        "[{:>6.1}s] in-place updates (SGD, AdamW, EMA of {} tensors, running statistic) max rel err {:.2e} (3 queued steps), {:.2e} (3 graph replays)",
        started.elapsed().as_secs_f64(),
        1 + EXTRA_LENS.len(),
        max(&eager_errors),
        max(&graph_errors)
    );
    max(&eager_errors).max(max(&graph_errors))
}

fn tensor2(values: &[f32], shape: [usize; 2], dev: &Device) -> Tensor<2> {
    Tensor::from_data(TensorData::new(values.to_vec(), shape), dev)
}

/// Deterministic values in [-1, 1) (xorshift), the same on every device.
fn host_data(seed: u64, n: usize) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn max_rel_err(a: &TensorData, b: &TensorData) -> f32 {
    let a = a.try_to_vec::<f32>().unwrap_or_default();
    let b = b.try_to_vec::<f32>().unwrap_or_default();
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-12);
    if a.len() != b.len() {
        return f32::INFINITY;
    }
    a.iter().zip(&b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}
