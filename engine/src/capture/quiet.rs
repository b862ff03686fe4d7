//! The backend's per-launch failure lines, held back while a capture pass runs.
//!
//! Why: cubecl logs every launch that fails at the moment it fails (`log_failure`, a warning).
//! When the backend refuses a capture window (it would allocate inside it), the pass goes on to
//! the region's end on buffers the window never filled, so every later launch of the pass fails
//! in turn: 784 warnings of "Memory location was never initialized" for YOLOv9-t's whole step on
//! an H100 on 2026-12-06, before the second pass captured and trained like eager. The refusal
//! itself is reported as the pass's reason; the lines it sets off are counted here and the count
//! joins the capture's one log line.

use std::sync::atomic::{AtomicUsize, Ordering};

use tracing::Level;

/// Capture passes running now (one per data-parallel replica thread).
static PASSES: AtomicUsize = AtomicUsize::new(0);
/// Lines held back since the process started.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Where cubecl's per-launch failure lines come from (`cubecl_runtime::logging::server`).
const LAUNCH_FAILURES: &str = "cubecl_runtime::logging";

/// Runs `f` (a capture pass) with the backend's launch-failure lines held back; returns its
/// value and how many lines were held meanwhile (other replicas' passes included).
pub fn holding<T>(f: impl FnOnce() -> T) -> (T, usize) {
    struct Pass;
    impl Drop for Pass {
        fn drop(&mut self) {
            PASSES.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let before = HELD.load(Ordering::SeqCst);
    PASSES.fetch_add(1, Ordering::SeqCst);
    let pass = Pass;
    let out = f();
    drop(pass);
    (out, HELD.load(Ordering::SeqCst) - before)
}

/// Whether a log line of `target` at `level` is to be held back now.
pub fn holds(target: &str, level: &Level) -> bool {
    *level == Level::WARN && target.starts_with(LAUNCH_FAILURES) && PASSES.load(Ordering::SeqCst) > 0
}

/// Counts a line held back (the logging set-up calls it for each line [`holds`] keeps out).
pub fn count_held() {
    HELD.fetch_add(1, Ordering::SeqCst);
}

/// The tests that hold lines take turns: the count of passes is the process's.
#[cfg(test)]
pub static TEST_TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

    const SERVER: &str = "cubecl_runtime::logging::server";

    #[test]
    fn launch_failures_are_held_only_during_a_pass() {
        let _turn = TEST_TURN.lock().unwrap_or_else(|e| e.into_inner());
        assert!(!holds(SERVER, &Level::WARN), "no pass: every line shows");
        let ((), _) = holding(|| {
            assert!(holds(SERVER, &Level::WARN));
            assert!(!holds(SERVER, &Level::ERROR), "only the warnings of failed launches");
            assert!(!holds("libreyolo_run::step::record", &Level::WARN), "only the backend's");
            let ((), _) = holding(|| assert!(holds(SERVER, &Level::WARN)));
            assert!(holds(SERVER, &Level::WARN), "an inner pass ending leaves the outer one holding");
        });
        let result: Result<(), ()> = std::panic::catch_unwind(|| holding(|| panic!("a pass that panics")).0).map_err(|_| ());
        assert!(result.is_err());
        assert!(!holds(SERVER, &Level::WARN), "a pass that panicked holds nothing after it");
    }
}
