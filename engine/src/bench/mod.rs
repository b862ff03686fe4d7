//! Measurements run by `libreyolo-run bench`: each prints a table and returns its figures, with
//! the first iteration (kernel compilation and autotuning) reported apart from steady state.

pub mod kernel_check;
pub mod loss;
pub mod network;
pub mod network_check;
pub mod ops;

use std::time::Instant;

use burn::tensor::Device;
use serde::Serialize;

/// Timing of one measured operation.
#[derive(Debug, Clone, Serialize)]
pub struct Timing {
    pub name: String,
    /// First run, including compilation and autotuning (seconds).
    pub first_s: f64,
    /// Further warm-up runs before measuring.
    pub warmup_iters: usize,
    pub iters: usize,
    /// Mean milliseconds per run after warm-up, with a device sync at the end of each run.
    pub mean_ms: f64,
    pub min_ms: f64,
    pub median_ms: f64,
}

/// How a bench times its runs: host wall time around `REPS` eager launches, or the replay of
/// those launches captured as one CUDA graph (`bench --graph`).
#[derive(Debug, Clone, Copy)]
pub struct Timer<'a> {
    pub device: &'a Device,
    pub warmup: usize,
    pub iters: usize,
    /// Time replays of a captured graph: the kernels' GPU time without the host's launch cost,
    /// which is what a captured training step pays.
    pub graph: bool,
}

impl Timer<'_> {
    pub fn time<T>(&self, name: &str, f: impl FnMut() -> T) -> Timing {
        if self.graph { time_graph(name, self.device, self.warmup, self.iters, f) } else { time(name, self.device, self.warmup, self.iters, f) }
    }
}

/// Runs `f` once (timed as warm-up cost), `warmup` more times, then `iters` timed runs, each
/// followed by a device sync.
pub fn time<T>(name: &str, device: &Device, warmup: usize, iters: usize, mut f: impl FnMut() -> T) -> Timing {
    let first_s = first_runs(name, device, warmup, &mut f);
    let mut samples = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        drop(f());
        let _ = device.sync();
        samples.push(t.elapsed().as_secs_f64() * 1e3);
    }
    summarize(name, first_s, warmup, samples)
}

/// Like [`time`], but `f` is captured as a CUDA graph after the warm-up runs and each timed run
/// is one replay followed by a device sync. Where the device records no hardware graph (the
/// CPU), the replay re-runs `f` and the timing is eager's; it says so.
pub fn time_graph<T>(name: &str, device: &Device, warmup: usize, iters: usize, mut f: impl FnMut() -> T) -> Timing {
    let first_s = first_runs(name, device, warmup, &mut f);
    let mut graph = burn::tensor::capture(device, f);
    let _ = device.sync();
    if !graph.is_hardware() {
        eprintln!("  {name}: no hardware graph recorded; timed by re-running it");
    }
    let mut samples = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        // Safety: every buffer the closure touched is owned or borrowed by the closure, which the
        // graph owns, and the replay is synced on this thread before the next one.
        unsafe { graph.replay() };
        let _ = device.sync();
        samples.push(t.elapsed().as_secs_f64() * 1e3);
    }
    summarize(name, first_s, warmup, samples)
}

/// The first run (compilation, autotune: returned in seconds) and `warmup` more, synced.
fn first_runs<T>(name: &str, device: &Device, warmup: usize, f: &mut impl FnMut() -> T) -> f64 {
    let start = Instant::now();
    drop(f());
    let _ = device.sync();
    let first_s = start.elapsed().as_secs_f64();
    eprintln!("  {name}: first run {first_s:.2}s");
    for _ in 0..warmup {
        drop(f());
    }
    let _ = device.sync();
    first_s
}

fn summarize(name: &str, first_s: f64, warmup: usize, mut samples: Vec<f64>) -> Timing {
    samples.sort_by(f64::total_cmp);
    let iters = samples.len();
    let mean_ms = samples.iter().sum::<f64>() / iters.max(1) as f64;
    let timing = Timing {
        name: name.to_string(),
        first_s,
        warmup_iters: warmup,
        iters,
        mean_ms,
        min_ms: samples.first().copied().unwrap_or(f64::NAN),
        median_ms: samples.get(iters / 2).copied().unwrap_or(f64::NAN),
    };
    eprintln!("  {name}: mean {:.3} ms, min {:.3} ms, median {:.3} ms over {iters}", timing.mean_ms, timing.min_ms, timing.median_ms);
    timing
}

/// Prints timings as a Markdown table.
pub fn print_table(title: &str, rows: &[Timing]) {
    println!("\n{title}\n");
    println!("| measurement | first run (s) | mean ms | min ms | median ms | iters |");
    println!("|---|---:|---:|---:|---:|---:|");
    for r in rows {
        println!("| {} | {:.2} | {:.3} | {:.3} | {:.3} | {} |", r.name, r.first_s, r.mean_ms, r.min_ms, r.median_ms, r.iters);
    }
}
