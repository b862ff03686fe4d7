//! From measured steps to figures and a verdict, with LibreYOLO's formulas and thresholds
//! (reference section c): the verdict comes from the unsynchronised half only, utilisation is
//! kernel busy time over the unsynchronised step time, and the first matching rule wins.

use crate::kernel_cache::CompileCost;
use serde::{Deserialize, Serialize};

/// Schema tag of `profile.json`.
pub const SCHEMA: &str = "libreyolo_run.profile/v1";

/// One kernel launch seen in a synced step, on the profile's clock (ms since its start).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KernelEvent {
    pub name: String,
    pub phase: String,
    pub step: usize,
    pub start_ms: f64,
    pub dur_ms: f64,
}

/// A phase's span in one step (host clock, ms since the profile's start).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PhaseSpan {
    pub phase: String,
    pub start_ms: f64,
    pub dur_ms: f64,
}

/// One measured step.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepRecord {
    pub index: usize,
    /// Synced steps bracket every phase with a device sync (composition); real steps don't.
    pub synced: bool,
    pub start_ms: f64,
    pub dur_ms: f64,
    /// Host time blocked waiting for the loader's next batch.
    pub dataload_ms: f64,
    pub phases: Vec<PhaseSpan>,
    /// The step replayed a captured graph (a step that fell back to eager did not).
    #[serde(default)]
    pub replayed: bool,
}

/// What was measured, before analysis.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Measurements {
    pub steps: Vec<StepRecord>,
    pub kernels: Vec<KernelEvent>,
    /// Whether kernel times come from the device (`None`: no kernel observer on this backend).
    pub kernel_timing: Option<String>,
    /// New memory-pool pages per real step (cudaMalloc-like events), when the pool reports them.
    pub pool_pages_per_step: Option<f64>,
    pub peak_memory_mb: Option<f64>,
    /// Host cost of the probes themselves per unsynced step (two clock reads per phase).
    pub probe_overhead_us_per_step: f64,
    /// Seconds from the profiler's start (the trainer built) to the end of the first step, and
    /// to the start of the measured window: the warm-up (kernel compilation, autotune, capture),
    /// reported on its own and never in a step time.
    pub first_step_s: Option<f64>,
    pub warmup_s: Option<f64>,
    /// Kernel compilation paid before the window (a GPU's NVRTC and module loads).
    pub warmup_compile: Option<CompileCost>,
}

/// The run the profile describes.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Meta {
    pub model: String,
    pub device: String,
    pub batch: usize,
    pub imgsz: String,
    pub precision: String,
    pub workers: usize,
    pub capture: bool,
    pub manifest: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Window {
    pub warmup: usize,
    pub real_steps: usize,
    pub synced_steps: usize,
    /// Seconds to the end of the first step and to the window's start ([`Measurements`]).
    #[serde(default)]
    pub first_step_s: Option<f64>,
    #[serde(default)]
    pub warmup_s: Option<f64>,
    /// What of the warm-up was kernel compilation ([`Measurements::warmup_compile`]).
    #[serde(default)]
    pub warmup_compile: Option<CompileCost>,
    /// Window steps (real and synced) that replayed a captured graph: `meta.capture` says the
    /// run set graphs up, this says the measured steps ran them.
    #[serde(default)]
    pub replayed_steps: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Real {
    pub step_ms: f64,
    /// Fastest real step (steps that returned before their device work left out: see
    /// `fastest_step_ms`) and median real step.
    #[serde(default)]
    pub step_ms_min: f64,
    #[serde(default)]
    pub step_ms_median: f64,
    pub dataload_ms: f64,
    pub compute_ms: f64,
    pub img_per_s: f64,
    pub dataload_frac: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PhaseRow {
    pub phase: String,
    /// Device time of the phase's kernels per synced step (None without a kernel observer).
    pub gpu_ms_per_step: Option<f64>,
    /// Synced wall time per step; for `dataload`, the real (unsynced) wait.
    pub wall_ms_per_step: f64,
    pub kernels_per_step: f64,
    pub unique_kernels: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KernelRow {
    pub kernel: String,
    pub raw_name: String,
    pub category: String,
    pub phase: String,
    pub ms_per_step: f64,
    pub pct_of_gpu: f64,
    pub count_per_step: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CategoryRow {
    pub name: String,
    pub pct: f64,
    pub ms_per_step: f64,
}

/// `profile.json`: self-contained (docs/profile.md documents every field).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Profile {
    pub schema: String,
    pub meta: Meta,
    pub window: Window,
    pub real: Real,
    pub bound: String,
    pub bound_why: String,
    pub levers: String,
    pub gpu_util: f64,
    pub gpu_util_raw: f64,
    pub gpu_busy_ms_per_step: f64,
    pub kernels_per_step: f64,
    pub unique_kernels: usize,
    pub mean_kernel_us: f64,
    pub host_overhead_ms_per_step: f64,
    pub memory_pressure: bool,
    pub pool_pages_per_step: Option<f64>,
    pub peak_memory_mb: Option<f64>,
    pub kernel_timing: Option<String>,
    pub probe_overhead_us_per_step: f64,
    /// Synced composition (ms per step) by phase, in the step's order.
    pub composition_ms: Vec<(String, f64)>,
    pub composition_total_ms: f64,
    pub phases: Vec<PhaseRow>,
    pub categories: Vec<CategoryRow>,
    pub top_kernels: Vec<KernelRow>,
    pub kernels: Vec<KernelRow>,
    pub measurements: Measurements,
}

/// The four verdicts, first match wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    MemoryPressure,
    Dataloader,
    Compute,
    HostLaunch,
}

impl Bound {
    pub fn name(self) -> &'static str {
        match self {
            Bound::MemoryPressure => "memory-pressure",
            Bound::Dataloader => "dataloader",
            Bound::Compute => "compute",
            Bound::HostLaunch => "host / launch",
        }
    }

    pub fn levers(self) -> &'static str {
        match self {
            Bound::Dataloader => "workers↑, cache='ram'/'disk', lighter aug, larger batch",
            Bound::HostLaunch => "larger batch (amortize launches), fewer per-step reads/syncs, CUDA graphs (capture=true), op fusion",
            Bound::Compute => "already GPU-bound — try AMP/bf16 or a larger model",
            Bound::MemoryPressure => "lower batch, reduce activation memory, avoid running at the OOM edge",
        }
    }
}

/// The inputs of the verdict.
#[derive(Debug, Clone, Copy, Default)]
pub struct VerdictInputs {
    pub step_ms: f64,
    pub dataload_ms: f64,
    pub gpu_busy_ms_per_step: f64,
    pub kernels_per_step: f64,
    pub mallocs_per_step: f64,
}

/// LibreYOLO's `_refine_verdict`: memory pressure (>= 5 allocations per step or utilisation
/// above 1.05), then the dataloader (>= 20 % of the step), then compute (>= 80 % busy), else
/// host / launch.
pub fn verdict(v: VerdictInputs) -> (Bound, String) {
    let util = if v.step_ms > 0.0 { v.gpu_busy_ms_per_step / v.step_ms + 0.0 } else { 0.0 };
    let frac = if v.step_ms > 0.0 { v.dataload_ms / v.step_ms } else { 0.0 };
    if v.mallocs_per_step >= 5.0 || util > 1.05 {
        return (
            Bound::MemoryPressure,
            format!("allocator/VRAM pressure (~{:.0} new pool pages per step); throughput and utilisation are unreliable", v.mallocs_per_step),
        );
    }
    if frac >= 0.2 {
        return (Bound::Dataloader, format!("the GPU waits on input data (~{:.0}% of the step)", frac * 100.0));
    }
    if util.min(1.0) >= 0.8 {
        return (Bound::Compute, format!("the GPU is saturated (~{:.0}% busy)", util.min(1.0) * 100.0));
    }
    let mean_us = if v.kernels_per_step > 0.0 { v.gpu_busy_ms_per_step * 1000.0 / v.kernels_per_step } else { 0.0 };
    (
        Bound::HostLaunch,
        format!(
            "GPU only ~{:.0}% busy — fed too slowly: {:.0} kernels/step at ~{:.0}us each plus host overhead",
            util.min(1.0) * 100.0,
            v.kernels_per_step,
            mean_us
        ),
    )
}

/// Kernel categories, first match wins (names lower-cased; cubecl's kernel type names).
pub fn category(name: &str) -> &'static str {
    let n = name.to_ascii_lowercase();
    let any = |keys: &[&str]| keys.iter().any(|k| n.contains(k));
    if any(&["reduce", "norm", "sum", "mean", "variance", "softmax", "argmax", "argmin", "topk"]) {
        "reduction / norm"
    } else if any(&["nchw", "nhwc"]) {
        "layout / copy"
    } else if any(&["matmul", "gemm", "conv", "mma", "im2col"]) {
        "gemm / conv"
    } else if any(&["copy", "transpose", "permute", "cat", "slice", "gather", "scatter", "pad", "contiguous", "layout", "repeat", "fill"]) {
        "layout / copy"
    } else if any(&[
        "elemwise",
        "elementwise",
        "fuse",
        "unary",
        "binary",
        "scalar",
        "clamp",
        "cast",
        "mask",
        "select",
        "compare",
        "pool",
        "interpolate",
        "nearest",
    ]) {
        "elementwise"
    } else {
        "other"
    }
}

/// A kernel's short name: the last path segment of its type name, generics dropped.
pub fn friendly(name: &str) -> String {
    let base = name.split('<').next().unwrap_or(name);
    base.rsplit("::").next().unwrap_or(base).to_string()
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = xs.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 { 0.0 } else { s / n as f64 }
}

/// The fastest real step that did its work, as the median counts steps. An unsynced step can
/// return before the device has done its work (a captured step is one queued replay): its time
/// is the host's alone (7 ms where the H200 replays a 70 ms whole step), so steps under half the
/// median are left out. Not the synced half: its probes sync at every stage, which serializes
/// a host-bound eager step (977 ms where the real half's median was 650). The synced half only
/// when nothing real was measured.
fn fastest_step_ms(real: &[&StepRecord], synced: &[&StepRecord], median_ms: f64) -> f64 {
    let fastest = |steps: &[&StepRecord]| steps.iter().map(|s| s.dur_ms).filter(|&d| d >= median_ms / 2.0).fold(f64::INFINITY, f64::min);
    let m = if real.is_empty() { fastest(synced) } else { fastest(real) };
    if m.is_finite() { m } else { 0.0 }
}

/// Analyses `m` measured with `meta`; `warmup` steps were discarded before it.
pub fn analyse(meta: Meta, warmup: usize, m: Measurements) -> Profile {
    let real: Vec<&StepRecord> = m.steps.iter().filter(|s| !s.synced).collect();
    let synced: Vec<&StepRecord> = m.steps.iter().filter(|s| s.synced).collect();
    let step_ms = mean(real.iter().map(|s| s.dur_ms));
    let dataload_ms = mean(real.iter().map(|s| s.dataload_ms));
    let n_synced = synced.len().max(1) as f64;

    // Phase order: dataload first, then as the steps ran them.
    let mut order: Vec<String> = vec!["dataload".into()];
    for s in m.steps.iter() {
        for p in &s.phases {
            if !order.contains(&p.phase) {
                order.push(p.phase.clone());
            }
        }
    }
    let has_kernels = m.kernel_timing.is_some();
    fn kernels_in<'a>(kernels: &'a [KernelEvent], phase: &'a str) -> impl Iterator<Item = &'a KernelEvent> + 'a {
        kernels.iter().filter(move |k| k.phase == phase)
    }
    let phases: Vec<PhaseRow> = order
        .iter()
        .map(|phase| {
            let wall = if phase == "dataload" {
                dataload_ms
            } else {
                synced.iter().map(|s| s.phases.iter().filter(|p| &p.phase == phase).map(|p| p.dur_ms).sum::<f64>()).sum::<f64>() / n_synced
            };
            let mut unique: Vec<&str> = kernels_in(&m.kernels, phase).map(|k| k.name.as_str()).collect();
            unique.sort_unstable();
            unique.dedup();
            PhaseRow {
                phase: phase.clone(),
                gpu_ms_per_step: has_kernels.then(|| kernels_in(&m.kernels, phase).map(|k| k.dur_ms).sum::<f64>() / n_synced),
                wall_ms_per_step: wall,
                kernels_per_step: kernels_in(&m.kernels, phase).count() as f64 / n_synced,
                unique_kernels: unique.len(),
            }
        })
        .collect();
    let composition_ms: Vec<(String, f64)> = phases.iter().filter(|p| p.phase != "dataload").map(|p| (p.phase.clone(), p.wall_ms_per_step)).collect();
    let composition_total_ms = composition_ms.iter().map(|(_, v)| v).sum();

    // `+ 0.0`: an empty float sum is -0.0, which prints as "-0".
    let busy = m.kernels.iter().map(|k| k.dur_ms).sum::<f64>() / n_synced + 0.0;
    let kernels_per_step = m.kernels.len() as f64 / n_synced;
    let mut rows: Vec<KernelRow> = vec![];
    // Row of each (kernel, phase): an eager step records ~25k kernels, so a linear search per
    // kernel made the analysis quadratic (minutes for a long window).
    let mut row_of: std::collections::HashMap<(&str, &str), usize> = std::collections::HashMap::new();
    for k in &m.kernels {
        match row_of.get(&(k.name.as_str(), k.phase.as_str())).map(|&i| &mut rows[i]) {
            Some(r) => {
                r.ms_per_step += k.dur_ms / n_synced;
                r.count_per_step += 1.0 / n_synced;
            }
            None => {
                row_of.insert((k.name.as_str(), k.phase.as_str()), rows.len());
                rows.push(KernelRow {
                    kernel: friendly(&k.name),
                    raw_name: k.name.chars().take(90).collect(),
                    category: category(&k.name).into(),
                    phase: k.phase.clone(),
                    ms_per_step: k.dur_ms / n_synced,
                    pct_of_gpu: 0.0,
                    count_per_step: 1.0 / n_synced,
                });
            }
        }
    }
    for r in rows.iter_mut() {
        r.pct_of_gpu = if busy > 0.0 { 100.0 * r.ms_per_step / busy } else { 0.0 };
    }
    rows.sort_by(|a, b| b.ms_per_step.total_cmp(&a.ms_per_step));
    let mut categories: Vec<CategoryRow> = vec![];
    for r in &rows {
        match categories.iter_mut().find(|c| c.name == r.category) {
            Some(c) => c.ms_per_step += r.ms_per_step,
            None => categories.push(CategoryRow { name: r.category.clone(), pct: 0.0, ms_per_step: r.ms_per_step }),
        }
    }
    for c in categories.iter_mut() {
        c.pct = if busy > 0.0 { 100.0 * c.ms_per_step / busy } else { 0.0 };
    }
    categories.sort_by(|a, b| b.ms_per_step.total_cmp(&a.ms_per_step));

    let inputs = VerdictInputs { step_ms, dataload_ms, gpu_busy_ms_per_step: busy, kernels_per_step, mallocs_per_step: m.pool_pages_per_step.unwrap_or(0.0) };
    let (bound, why) = verdict(inputs);
    let util = if step_ms > 0.0 { busy / step_ms } else { 0.0 };
    let batch = meta.batch;
    let step_ms_median = {
        let mut d: Vec<f64> = real.iter().map(|s| s.dur_ms).collect();
        d.sort_by(f64::total_cmp);
        d.get(d.len() / 2).copied().unwrap_or(0.0)
    };
    Profile {
        schema: SCHEMA.into(),
        window: Window {
            warmup,
            real_steps: real.len(),
            synced_steps: synced.len(),
            first_step_s: m.first_step_s,
            warmup_s: m.warmup_s,
            warmup_compile: m.warmup_compile.clone(),
            replayed_steps: m.steps.iter().filter(|s| s.replayed).count(),
        },
        real: Real {
            step_ms,
            step_ms_min: fastest_step_ms(&real, &synced, step_ms_median),
            step_ms_median,
            dataload_ms,
            compute_ms: step_ms - dataload_ms,
            img_per_s: if step_ms > 0.0 { batch as f64 / (step_ms / 1000.0) } else { 0.0 },
            dataload_frac: if step_ms > 0.0 { dataload_ms / step_ms } else { 0.0 },
        },
        bound: bound.name().into(),
        bound_why: why,
        levers: bound.levers().into(),
        gpu_util: util.min(1.0),
        gpu_util_raw: util,
        gpu_busy_ms_per_step: busy,
        kernels_per_step,
        unique_kernels: {
            let mut u: Vec<&str> = m.kernels.iter().map(|k| k.name.as_str()).collect();
            u.sort_unstable();
            u.dedup();
            u.len()
        },
        mean_kernel_us: if kernels_per_step > 0.0 { busy * 1000.0 / kernels_per_step } else { 0.0 },
        host_overhead_ms_per_step: (step_ms - busy - dataload_ms).max(0.0),
        memory_pressure: bound == Bound::MemoryPressure,
        pool_pages_per_step: m.pool_pages_per_step,
        peak_memory_mb: m.peak_memory_mb,
        kernel_timing: m.kernel_timing.clone(),
        probe_overhead_us_per_step: m.probe_overhead_us_per_step,
        composition_ms,
        composition_total_ms,
        phases,
        categories,
        top_kernels: rows.iter().take(8).cloned().collect(),
        kernels: rows,
        meta,
        measurements: m,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(step: f64, load: f64, busy: f64, mallocs: f64) -> VerdictInputs {
        VerdictInputs { step_ms: step, dataload_ms: load, gpu_busy_ms_per_step: busy, kernels_per_step: 500.0, mallocs_per_step: mallocs }
    }

    #[test]
    fn verdict_rules_in_order_with_the_reference_thresholds() {
        // memory pressure wins over everything: allocations, or busy above the step time
        assert_eq!(verdict(v(100.0, 50.0, 90.0, 5.0)).0, Bound::MemoryPressure);
        assert_eq!(verdict(v(100.0, 0.0, 106.0, 0.0)).0, Bound::MemoryPressure);
        assert_eq!(verdict(v(100.0, 0.0, 105.0, 4.9)).0, Bound::Compute);
        // the dataloader at 20 % of the step, even when the GPU is busy
        assert_eq!(verdict(v(100.0, 20.0, 90.0, 0.0)).0, Bound::Dataloader);
        assert_eq!(verdict(v(100.0, 19.9, 90.0, 0.0)).0, Bound::Compute);
        // compute at 80 % busy, host / launch below
        assert_eq!(verdict(v(100.0, 0.0, 80.0, 0.0)).0, Bound::Compute);
        assert_eq!(verdict(v(100.0, 0.0, 79.9, 0.0)).0, Bound::HostLaunch);
        // no kernels (CPU): host / launch at 0 %
        let (b, why) = verdict(VerdictInputs { step_ms: 50.0, ..Default::default() });
        assert_eq!(b, Bound::HostLaunch);
        assert!(why.starts_with("GPU only ~0% busy"), "{why}");
        let (_, why) = verdict(v(100.0, 25.0, 10.0, 0.0));
        assert_eq!(why, "the GPU waits on input data (~25% of the step)");
    }

    #[test]
    fn categories_first_match_wins() {
        assert_eq!(category("cubek::reduce::ReduceKernel<f32>"), "reduction / norm");
        assert_eq!(category("burn_cubecl::kernel::conv::ImplicitGemmConv"), "gemm / conv");
        assert_eq!(category("cubek_matmul::MatmulKernel"), "gemm / conv");
        assert_eq!(category("burn_cubecl::kernel::CopyKernel"), "layout / copy");
        assert_eq!(category("ElemwiseFuse_cd6644ee"), "elementwise");
        assert_eq!(category("SomethingElse"), "other");
        assert_eq!(friendly("a::b::DirectConv2dKernel<f32, u32>"), "DirectConv2dKernel");
    }

    #[test]
    fn analysis_separates_real_and_synced_halves() {
        let step = |index, synced, dur, load| StepRecord {
            index,
            synced,
            start_ms: index as f64 * 100.0,
            dur_ms: dur,
            dataload_ms: load,
            phases: vec![
                PhaseSpan { phase: "forward".into(), start_ms: 0.0, dur_ms: dur / 4.0 },
                PhaseSpan { phase: "backward".into(), start_ms: 0.0, dur_ms: dur / 2.0 },
            ],
            replayed: index % 2 == 0,
        };
        let m = Measurements {
            steps: vec![step(0, false, 40.0, 10.0), step(1, false, 60.0, 10.0), step(2, true, 80.0, 0.0), step(3, true, 80.0, 0.0)],
            kernels: (0..4)
                .map(|i| KernelEvent {
                    name: "conv".into(),
                    phase: if i % 2 == 0 { "forward".into() } else { "backward".into() },
                    step: 2 + i / 2,
                    start_ms: 0.0,
                    dur_ms: 10.0,
                })
                .collect(),
            kernel_timing: Some("device".into()),
            ..Default::default()
        };
        let p = analyse(Meta { batch: 8, ..Default::default() }, 5, m);
        assert_eq!(p.real.step_ms, 50.0); // real half only
        assert_eq!(p.window.replayed_steps, 2); // steps 0 and 2 replayed a graph
        assert_eq!(p.real.step_ms_median, 60.0);
        assert_eq!(p.real.step_ms_min, 40.0); // the real half, as the median
        // A step under half the median returned before the device did its work (a queued
        // replay); the synced half's times are not the real half's (probes at every stage).
        let real: Vec<StepRecord> = [7.0, 70.0, 72.0, 75.0].into_iter().enumerate().map(|(i, d)| step(i, false, d, 0.0)).collect();
        let synced = [step(9, true, 150.0, 0.0)];
        assert_eq!(fastest_step_ms(&real.iter().collect::<Vec<_>>(), &[&synced[0]], 72.0), 70.0);
        assert_eq!(fastest_step_ms(&[], &[&synced[0]], 0.0), 150.0);
        assert_eq!(p.real.dataload_ms, 10.0);
        assert!((p.real.img_per_s - 160.0).abs() < 1e-9);
        assert_eq!(p.gpu_busy_ms_per_step, 20.0); // 40 ms over 2 synced steps
        assert!((p.gpu_util - 0.4).abs() < 1e-12);
        assert_eq!(p.bound, "dataloader"); // 10/50 = 20 %
        let fwd = p.phases.iter().find(|r| r.phase == "forward").unwrap();
        assert_eq!(fwd.wall_ms_per_step, 20.0); // synced composition
        assert_eq!(fwd.gpu_ms_per_step, Some(10.0));
        assert_eq!(p.phases[0].phase, "dataload");
        assert_eq!(p.host_overhead_ms_per_step, 20.0);
    }

    /// Every launch of a kernel adds to one row per phase, long (fused, generic) names included:
    /// the row keeps a shortened name, which once failed to match the next launch, so each
    /// launch of a long-named kernel became a row of its own (and the analysis quadratic).
    #[test]
    fn launches_of_a_kernel_with_a_long_name_share_one_row() {
        let long = format!("burn_cubecl_fusion::FusedKernel<{}>", "f32, ".repeat(40));
        let kernel = |name: &str, phase: &str| KernelEvent { name: name.into(), phase: phase.into(), step: 1, start_ms: 0.0, dur_ms: 2.0 };
        let m = Measurements {
            steps: vec![StepRecord { index: 0, synced: true, start_ms: 0.0, dur_ms: 20.0, dataload_ms: 0.0, phases: vec![], replayed: false }],
            kernels: vec![kernel(&long, "forward"), kernel(&long, "forward"), kernel(&long, "backward"), kernel("conv", "forward")],
            kernel_timing: Some("device".into()),
            ..Default::default()
        };
        let p = analyse(Meta { batch: 8, ..Default::default() }, 0, m);
        let rows: Vec<(&str, f64)> = p.top_kernels.iter().map(|r| (r.phase.as_str(), r.count_per_step)).collect();
        assert_eq!(rows, vec![("forward", 2.0), ("backward", 1.0), ("forward", 1.0)], "{:?}", p.top_kernels);
        assert!(p.top_kernels[0].raw_name.chars().count() <= 90);
    }
}
