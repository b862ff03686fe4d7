//! One graph of a step (forward + loss + backward, or the whole step) whose warm-up runs are also
//! the eager runs it is checked against.
//!
//! burn's `capture` runs its closure three times to warm up, then once in the capture window; the
//! check against eager then ran the step twice more and the replay once. A whole step's runs
//! update the state, so those warm-up runs could not serve as references. Here each warm-up run
//! starts from the same saved state (the caller's `undo` puts it back after each) and its figures
//! are kept: the last two are the check's eager runs. Two warm-up runs in all, not three: they
//! build burn-fusion's fused kernels and grow the pools for the window, at threshold 1 too (the
//! H200, YOLOv9-t b16: the capture 8.3 -> 5.8 s; docs/performance.md). A window that still
//! needs an allocation is refused by our cubecl-cuda: the capture then fails, logged, and
//! training goes on eager.

use std::time::Instant;

use burn::backend::{Backend, BackendGraph, Dispatch};
use burn::tensor::Device;

/// Environment variable: warm-up runs before the window (at least 2, the check's references;
/// [`WARMUP_RUNS`] by default), for A/B measurements of the capture's cost.
pub const WARMUP_ENV: &str = "LIBREYOLO_CAPTURE_WARMUP_RUNS";

/// Warm-up runs before the capture window unless [`WARMUP_ENV`] says otherwise.
pub const WARMUP_RUNS: usize = 2;

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

/// The warm-up runs before the window: [`WARMUP_ENV`] (checked at start-up), else [`WARMUP_RUNS`].
pub fn warmup_runs() -> Result<usize, String> {
    parse_warmup_runs(std::env::var(WARMUP_ENV).ok().as_deref())
}

fn parse_warmup_runs(value: Option<&str>) -> Result<usize, String> {
    let Some(value) = value else { return Ok(WARMUP_RUNS) };
    value.trim().parse::<usize>().ok().filter(|&n| n >= 2).ok_or_else(|| format!("{WARMUP_ENV}={value:?}: expected a whole number of runs, at least 2 (the capture check compares two)"))
}

/// Runs `closure` `runs` times from the same state (`measure` each output, then `undo` its
/// effects), then once in a capture window on `device`. The capture run's effects are the
/// caller's to undo (a software graph's run is real). Each warm-up output lives until the
/// device drained, or the lazy fusion backend would skip its kernels and the window would be
/// the first to allocate their buffers.
pub fn record<T, F: FnMut() -> T>(device: &Device, mut closure: F, runs: usize, mut measure: impl FnMut(&T) -> (f64, f64), mut undo: impl FnMut()) -> (OneGraph<T, F>, Figures) {
    let d = device.as_dispatch();
    let _ = Dispatch::graph_prepare(d);
    let mut figures = Vec::with_capacity(runs);
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
    let (hardware, output, recorded) = match Dispatch::graph_start_capture(d) {
        Ok(()) => {
            let output = closure();
            let recorded = started.elapsed();
            // A failed stop still takes the stream out of capture mode: the graph is lost, and
            // replays re-run the closure (which the caller refuses on CUDA).
            (Dispatch::graph_stop_capture(d).ok(), output, recorded)
        }
        Err(_) => (None, closure(), started.elapsed()),
    };
    tracing::info!(
        "cuda_graph: warm-up runs {} s, the window {:.2} s (recording {:.2} s, instantiating {:.2} s)",
        times.join(" + "),
        started.elapsed().as_secs_f64(),
        recorded.as_secs_f64(),
        (started.elapsed() - recorded).as_secs_f64()
    );
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
    fn the_warm_up_count_is_at_least_two() {
        assert_eq!(parse_warmup_runs(None), Ok(WARMUP_RUNS));
        assert_eq!(parse_warmup_runs(Some(" 3")), Ok(3));
        for bad in ["1", "0", "two", ""] {
            let err = parse_warmup_runs(Some(bad)).unwrap_err();
            assert!(err.contains(WARMUP_ENV) && err.contains("at least 2"), "{err}");
        }
    }
}
