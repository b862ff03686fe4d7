//! One graph of a step (forward + loss + backward, or the whole step) whose warm-up runs are also
//! the eager runs it is checked against.
//!
//! burn's `capture` runs its closure three times to warm up, then once in the capture window; the
//! check against eager then ran the step twice more and the replay once. A whole step's runs
//! update the state, so those warm-up runs could not serve as references. Here each warm-up run
//! starts from the same saved state (the caller's `undo` puts it back after each) and its figures
//! are kept as the check's eager runs. The warm-up builds burn-fusion's fused kernels and grows
//! the pools for the window: on a shape's first run (threshold 1) that takes two runs, the first
//! being burn-fusion's search; after eager runs of the shape (LibreYOLO's threshold 3) one run
//! does, and it is the check's only reference (the H200, YOLOv9-t b16: docs/performance.md). A
//! window that still needs an allocation is refused by our cubecl-cuda: [`record`] then runs the
//! step once more and opens a second window; if that is refused too the capture fails, logged,
//! and training goes on eager.

use std::time::Instant;

use burn::backend::{Backend, BackendGraph, Dispatch};
use burn::tensor::Device;

/// Environment variable: warm-up runs before the window (at least 1; by default
/// [`default_warmup_runs`]), for A/B measurements of the capture's cost.
pub const WARMUP_ENV: &str = "LIBREYOLO_CAPTURE_WARMUP_RUNS";

/// Warm-up runs before the capture window of a shape that ran eager `prior_runs` times: two on
/// its first run (burn-fusion searches on the first, so its kernels and allocations are not yet
/// the window's), one after eager runs of the same computation ([`record`] adds one if the
/// window is refused).
pub fn default_warmup_runs(prior_runs: u32) -> usize {
    if prior_runs == 0 { 2 } else { 1 }
}

/// A recorded closure: replayed as one hardware graph, or re-run (software graphs on the CPU).
pub struct OneGraph<T, F> {
    device: Device,
    hardware: Option<BackendGraph<Dispatch>>,
    /// The capture run's output: the buffers every hardware replay overwrites.
    output: T,
    closure: F,
}

/// What each warm-up run produced, as the caller measures it (e.g. loss and a signature of the
/// update), in order.
pub type Figures = Vec<(f64, f64)>;

/// The warm-up runs before the window of a shape that ran eager `prior_runs` times:
/// [`WARMUP_ENV`] (checked at start-up), else [`default_warmup_runs`].
pub fn warmup_runs(prior_runs: u32) -> Result<usize, String> {
    parse_warmup_runs(std::env::var(WARMUP_ENV).ok().as_deref(), prior_runs)
}

fn parse_warmup_runs(value: Option<&str>, prior_runs: u32) -> Result<usize, String> {
    let Some(value) = value else { return Ok(default_warmup_runs(prior_runs)) };
    value.trim().parse::<usize>().ok().filter(|&n| n >= 1).ok_or_else(|| format!("{WARMUP_ENV}={value:?}: expected a whole number of runs, at least 1 (the capture check's eager reference)"))
}

/// Runs `closure` `runs` times from the same state (`measure` each output, then `undo` its
/// effects), then once in a capture window on `device`. A window the backend refuses (after one
/// run on a cold kernel cache, seen on the H200: that run still compiled) is tried once more after
/// one more warm-up run. The capture run's effects are the caller's to undo (a software graph's
/// run is real). Each warm-up output lives until the device drained, or the lazy fusion backend
/// would skip its kernels and the window would be the first to allocate their buffers.
pub fn record<T, F: FnMut() -> T>(device: &Device, mut closure: F, runs: usize, mut measure: impl FnMut(&T) -> (f64, f64), mut undo: impl FnMut()) -> (OneGraph<T, F>, Figures) {
    let d = device.as_dispatch();
    let mut figures = Vec::with_capacity(runs + 1);
    let mut log = Vec::new();
    // `retry`: after a refused window, whose writes the state must first be undone from.
    let mut attempt = |runs: usize, retry: bool, closure: &mut F, figures: &mut Figures, log: &mut Vec<String>| {
        if retry {
            undo();
        }
        let _ = Dispatch::graph_prepare(d);
        let mut times = Vec::with_capacity(runs);
        for _ in 0..runs {
            let started = Instant::now();
            let out = closure();
            let _ = Dispatch::sync(d);
            figures.push(measure(&out));
            drop(out);
            undo();
            times.push(format!("{:.2}", started.elapsed().as_secs_f64()));
        }
        // The state as it was, written before the window opens.
        let _ = Dispatch::sync(d);
        let started = Instant::now();
        let (window, output, recorded) = match Dispatch::graph_start_capture(d) {
            Ok(()) => {
                let output = closure();
                let recorded = started.elapsed();
                // A failed stop still takes the stream out of capture mode: the graph is lost,
                // and what the window would have written reads as failed until written again.
                (Some(Dispatch::graph_stop_capture(d)), output, recorded)
            }
            Err(_) => (None, closure(), started.elapsed()),
        };
        let window_s = started.elapsed().as_secs_f64();
        log.push(format!("warm-up runs {} s, the window {window_s:.2} s (recording {:.2} s, instantiating {:.2} s)", times.join(" + "), recorded.as_secs_f64(), window_s - recorded.as_secs_f64()));
        (window, output)
    };
    let (mut window, mut output) = attempt(runs, false, &mut closure, &mut figures, &mut log);
    if let Some(Err(refused)) = &window {
        log.push(format!("refused ({}); one more run", format!("{refused:?}").replace('\n', " ")));
        drop(output);
        (window, output) = attempt(1, true, &mut closure, &mut figures, &mut log);
    }
    tracing::info!("cuda_graph: {}", log.join("; "));
    let hardware = window.and_then(Result::ok);
    (OneGraph { device: device.clone(), hardware, output, closure }, figures)
}

impl<T, F: FnMut() -> T> OneGraph<T, F> {
    pub fn is_hardware(&self) -> bool {
        self.hardware.is_some()
    }

    /// Replays the recorded launches (or re-runs the closure) and returns the output.
    ///
    /// # Safety
    /// As `burn::tensor::Graph::replay`: every buffer the closure touched during the capture run
    /// is still alive, nothing else uses them until the replay's work completed, and the
    /// caller's refreshes and reads run on the stream it was captured on.
    pub unsafe fn replay(&mut self) -> Result<&T, String> {
        match &self.hardware {
            Some(graph) => unsafe { Dispatch::graph_replay(self.device.as_dispatch(), graph) }.map_err(|e| format!("replaying the graph: {e:?}"))?,
            None => self.output = (self.closure)(),
        }
        Ok(&self.output)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// On the CPU (no hardware graphs) every warm-up run starts from the undone state and is
    /// measured, the capture run is real, and a replay re-runs the closure.
    #[test]
    fn warm_up_runs_start_from_the_same_state_and_are_measured() {
        let state = Cell::new(10.0);
        let closure = || {
            state.set(state.get() + 1.0);
            state.get()
        };
        let (mut graph, figures) = record(&Device::flex(), closure, 3, |out| (*out, *out * 2.0), || state.set(10.0));
        assert_eq!(figures, vec![(11.0, 22.0); 3], "each run from the undone state");
        assert!(!graph.is_hardware());
        assert_eq!(state.get(), 11.0, "the capture run ran for real");
        assert_eq!(*unsafe { graph.replay() }.unwrap(), 12.0);
    }

    #[test]
    fn two_warm_up_runs_on_a_first_run_one_after_eager_runs_or_as_told() {
        assert_eq!([parse_warmup_runs(None, 0), parse_warmup_runs(None, 2)], [Ok(2), Ok(1)]);
        assert_eq!(parse_warmup_runs(Some(" 3"), 0), Ok(3));
        assert_eq!(parse_warmup_runs(Some("1"), 0), Ok(1));
        for bad in ["0", "two", ""] {
            let err = parse_warmup_runs(Some(bad), 2).unwrap_err();
            assert!(err.contains(WARMUP_ENV) && err.contains("at least 1"), "{err}");
        }
    }
}
