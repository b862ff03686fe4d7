//! Measurements run by `libreyolo-run bench`: each prints a table and returns its figures, with
//! the first iteration (kernel compilation and autotuning) reported apart from steady state.

pub mod loss;
pub mod network;
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

/// Runs `f` once (timed as warm-up cost), `warmup` more times, then `iters` timed runs, each
/// followed by a device sync.
pub fn time<T>(name: &str, device: &Device, warmup: usize, iters: usize, mut f: impl FnMut() -> T) -> Timing {
    let start = Instant::now();
    drop(f());
    let _ = device.sync();
    let first_s = start.elapsed().as_secs_f64();
    eprintln!("  {name}: first run {first_s:.2}s");
    for _ in 0..warmup {
        drop(f());
    }
    let _ = device.sync();
    let mut samples = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        drop(f());
        let _ = device.sync();
        samples.push(t.elapsed().as_secs_f64() * 1e3);
    }
    samples.sort_by(f64::total_cmp);
    let mean_ms = samples.iter().sum::<f64>() / samples.len().max(1) as f64;
    let timing = Timing {
        name: name.to_string(),
        first_s,
        warmup_iters: warmup,
        iters,
        mean_ms,
        min_ms: samples.first().copied().unwrap_or(f64::NAN),
        median_ms: samples.get(samples.len() / 2).copied().unwrap_or(f64::NAN),
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
