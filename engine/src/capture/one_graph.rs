//! How many warm-up runs a capture makes before its window (the check's eager references).
//!
//! The warm-up builds burn-fusion's fused kernels and grows the pools for the window: on a
//! shape's first run (threshold 1) that takes two runs, the first being burn-fusion's search;
//! after eager runs of the shape (LibreYOLO's threshold 3) one run does, and it is the check's
//! only reference (the H200, YOLOv9-t b16: docs/history/2026-12.md); a check that then
//! disagrees is unsure, and the shape's next capture makes two runs to measure their spread
//! ([`super::CaptureError::Unsure`]). A window that still needs an
//! allocation is refused by our cubecl-cuda: the capture then runs the step once more and
//! opens a second window ([`crate::step::record`]).

use super::Attempt;

/// Environment variable: warm-up runs before the window (at least 1; by default
/// [`default_warmup_runs`]), for A/B measurements of the capture's cost.
pub const WARMUP_ENV: &str = "LIBREYOLO_CAPTURE_WARMUP_RUNS";

/// Environment variable: accept burn's software graphs (replay re-runs the recorded items) on a
/// backend without hardware graphs, to exercise the capture path on the CPU (tests).
pub const SOFTWARE_ENV: &str = "LIBREYOLO_CAPTURE_SOFTWARE";

/// Environment variable: the run's first N capture windows are refused as if the backend had
/// refused them, to exercise what follows a refusal (the pass goes on, then one more warm-up
/// run and a second pass); set on one rank of a multi-GPU run, every rank must retry with it.
pub const REFUSE_ENV: &str = "LIBREYOLO_CAPTURE_REFUSE";

/// Whether the window being closed is refused by [`REFUSE_ENV`] (one of the first N of the run).
pub fn injected_refusal() -> bool {
    static LEFT: std::sync::OnceLock<std::sync::atomic::AtomicUsize> = std::sync::OnceLock::new();
    let left = LEFT.get_or_init(|| std::sync::atomic::AtomicUsize::new(parse_refusals(std::env::var(REFUSE_ENV).ok().as_deref()).unwrap_or(0)));
    left.fetch_update(std::sync::atomic::Ordering::SeqCst, std::sync::atomic::Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
}

fn parse_refusals(value: Option<&str>) -> Result<usize, String> {
    let Some(value) = value else { return Ok(0) };
    value.trim().parse::<usize>().map_err(|_| format!("{REFUSE_ENV}={value:?}: expected a whole number of capture windows to refuse"))
}

/// Warm-up runs before the capture window of a shape that ran eager `prior_runs` times: two on
/// its first run (burn-fusion searches on the first, so its kernels and allocations are not yet
/// the window's), one after eager runs of the same computation.
pub fn default_warmup_runs(prior_runs: u32) -> usize {
    if prior_runs == 0 { 2 } else { 1 }
}

/// The warm-up runs before the window of `attempt`'s shape: [`WARMUP_ENV`] (checked at
/// start-up), else [`default_warmup_runs`]; at least two when the attempt must measure the
/// spread of eager runs (an earlier check was inconclusive with one).
pub fn warmup_runs(attempt: Attempt) -> Result<usize, String> {
    let runs = parse_warmup_runs(std::env::var(WARMUP_ENV).ok().as_deref(), attempt.prior_runs)?;
    Ok(if attempt.measure_spread { runs.max(2) } else { runs })
}

/// Checks [`WARMUP_ENV`] and [`REFUSE_ENV`] at start-up, so a bad value fails before the first step.
pub fn check_env() -> Result<(), String> {
    warmup_runs(Attempt { prior_runs: 0, measure_spread: false })?;
    parse_refusals(std::env::var(REFUSE_ENV).ok().as_deref()).map(drop)
}

fn parse_warmup_runs(value: Option<&str>, prior_runs: u32) -> Result<usize, String> {
    let Some(value) = value else { return Ok(default_warmup_runs(prior_runs)) };
    value
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| format!("{WARMUP_ENV}={value:?}: expected a whole number of runs, at least 1 (the capture check's eager reference)"))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn refusals_to_inject_are_a_whole_number() {
        assert_eq!([parse_refusals(None), parse_refusals(Some(" 2"))], [Ok(0), Ok(2)]);
        let err = parse_refusals(Some("-1")).unwrap_err();
        assert!(err.contains(REFUSE_ENV) && err.contains("whole number"), "{err}");
    }
}
