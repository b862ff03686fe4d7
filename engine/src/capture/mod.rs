//! The capture manager: when to capture a CUDA graph, when to replay it and when to run eager
//! (design.md's capture contract, LibreYOLO's `TrainGraphManager` / `GraphRunner` semantics).
//!
//! * Shapes are counted per key (input dims and dtype); a key is captured when it has been seen
//!   `threshold` times (3 = LibreYOLO's `auto`, 1 = capture on first use); hits replay, misses
//!   run eager.
//! * At most `max_graphs` graphs; when full, new shapes run eager (one warning), like the
//!   reference. Graphs guard their memory for life, so an LRU that re-captures would trade
//!   memory churn and capture time for little.
//! * A capture or replay failure logs one line and drops the rest of the run to eager; it
//!   never fails the run. A capture whose check against eager was inconclusive (one eager
//!   reference, its spread unmeasured) runs that step eager and captures again on the shape's
//!   next run, with two references ([`CaptureError::Unsure`]). `invalidate` drops every graph and resets the counts, so capture
//!   happens again at the threshold.
//! * Replicas of a data-parallel run capture together: each checks its own shard, and the
//!   worst outcome of all decides for every one ([`CaptureManager::agreeing`]), so that no
//!   replica replays a graph while another runs the step eager (their collectives would no
//!   longer pair up).
//!
//! What a graph is and how it runs is the caller's [`GraphOps`]: the real one records burn
//! graphs on CUDA ([`forward`]); the tests inject failures through their own.

pub mod forward;
pub mod one_graph;
pub mod quiet;

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use burn::tensor::Tensor;

use serde::Serialize;

pub use libreyolo_families::tensor::write_into;

/// A copy of `t` in a fresh, uniquely owned buffer of its shape, dtype and device: a buffer a
/// graph can read or write in place.
pub fn fresh_copy<const D: usize>(t: &Tensor<D>) -> Tensor<D> {
    let mut copy = t.zeros_like();
    write_into(&mut copy, t.clone());
    copy
}

/// A graph's stable input: a [`fresh_copy`] of `t`, which the captured closure borrows.
pub fn stable_copy<const D: usize>(t: &Tensor<D>) -> Rc<RefCell<Tensor<D>>> {
    Rc::new(RefCell::new(fresh_copy(t)))
}

/// Writes `new` into a graph's stable input before a replay. On a hardware graph the buffer
/// must be uniquely owned, or the write would land in a new buffer the graph never reads.
pub fn refresh<const D: usize>(stable: &RefCell<Tensor<D>>, new: &Tensor<D>, hardware: bool) -> Result<(), String> {
    let mut t = stable.borrow_mut();
    if hardware && !t.can_mut() {
        return Err("a stable input buffer is shared, so an in-place refresh would not reach the graph".into());
    }
    write_into(&mut t, new.clone());
    Ok(())
}

/// What identifies a graph: the input's dims and dtype (and the dims of its other inputs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
pub struct ShapeKey {
    pub dims: Vec<usize>,
    pub dtype: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub others: Vec<Vec<usize>>,
}

impl ShapeKey {
    /// `[16, 3, 640, 640] (bf16)`, with the other inputs' dims when there are any (e.g. the
    /// targets' rows, which `data.label_rows = "batch"` varies).
    /// Past [`Self::SHOWN`] other inputs (an update's region reads every gradient), the first
    /// few and their count, so the log line stays a line.
    pub fn describe(&self) -> String {
        match self.others.len() {
            0 => format!("{:?} ({})", self.dims, self.dtype),
            n if n <= Self::SHOWN => format!("{:?} ({}; other inputs {:?})", self.dims, self.dtype, self.others),
            n => {
                let first: Vec<String> = self.others[..Self::SHOWN].iter().map(|d| format!("{d:?}")).collect();
                format!("{:?} ({}; {n} other inputs: {}, ...)", self.dims, self.dtype, first.join(", "))
            }
        }
    }

    /// The other inputs [`Self::describe`] lists in full.
    const SHOWN: usize = 8;
}

/// Why a capture fails where the backend records no hardware graph (and software graphs were
/// not asked for).
pub const NO_HARDWARE_GRAPH: &str = "the backend recorded no hardware graph (not a CUDA device, or the capture window was refused)";

/// What the manager asks of one capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// How many times this input's shape ran eager before (the computation's kernels and pools
    /// already built).
    pub prior_runs: u32,
    /// An earlier capture of the shape was [`CaptureError::Unsure`]: check against two eager
    /// references, whose spread widens the tolerances.
    pub measure_spread: bool,
}

/// Why a capture gave no graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaptureError {
    /// The run goes on eager.
    Failed(String),
    /// The check against eager disagreed with one eager reference, so how far eager runs of
    /// the step spread among themselves (non-deterministic bf16 reductions) was unmeasured: the
    /// step runs eager and the shape is captured again on its next run with two references.
    Unsure(String),
}

impl CaptureError {
    /// The same kind of error with its message rewritten by `f`.
    pub fn map(self, f: impl FnOnce(String) -> String) -> Self {
        match self {
            CaptureError::Failed(e) => CaptureError::Failed(f(e)),
            CaptureError::Unsure(e) => CaptureError::Unsure(f(e)),
        }
    }
}

impl std::fmt::Display for CaptureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CaptureError::Failed(e) | CaptureError::Unsure(e) => f.write_str(e),
        }
    }
}

/// How a capture ended on one replica, best first: the replicas of a data-parallel run go by
/// the worst of theirs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    Captured,
    Unsure,
    Failed,
}

/// The worst verdict over every replica, from this one's (each replica calls it at the same
/// point of the same step).
pub type Agreement = Box<dyn Fn(Verdict) -> Verdict>;

impl From<String> for CaptureError {
    fn from(e: String) -> Self {
        CaptureError::Failed(e)
    }
}

/// How a captured computation is run.
pub trait GraphOps<G, T> {
    /// The computation without a graph.
    fn eager(&mut self) -> T;
    /// Records a graph for the current input (warm-up included); its side effects must be
    /// undone by the implementation (e.g. BatchNorm statistics), also when it fails. With the
    /// graph, the output of a replay on this input that already stands as this run's result (a
    /// check that replayed it from the state before), else `None` and the caller replays.
    ///
    /// `peers` is the other replicas' say on a step inside the capture (the worst verdict of
    /// all, each replica casting its own at the same point; the identity when training alone):
    /// an implementation whose capture has collectives between its windows agrees with it on
    /// whether to retry, so that every replica runs the same collectives.
    fn capture(&mut self, attempt: Attempt, peers: &dyn Fn(Verdict) -> Verdict) -> Result<(G, Option<T>), CaptureError>;
    /// Writes the current input into the graph's stable buffers and replays it.
    fn replay(&mut self, graph: &mut G) -> Result<T, String>;
    /// A capture that held here but not on another replica: undoes what the capture's checked
    /// replay did to the state (the step then runs eager), and drops the graph.
    fn discard(&mut self, graph: G) {
        drop(graph);
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct CapturedGraph {
    pub key: ShapeKey,
    pub replays: u64,
}

/// LibreYOLO's `graph_info()`: what was captured and how often it ran.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GraphInfo {
    pub what: String,
    pub captured: Vec<CapturedGraph>,
    pub graph_count: usize,
    pub max_graphs: usize,
    pub eager_runs: u64,
    /// Eager runs of a shape other than a captured one (or while full).
    pub eager_fallbacks: u64,
    pub fallback_reason: Option<String>,
}

pub struct CaptureManager<G> {
    what: String,
    threshold: u32,
    max_graphs: usize,
    seen: HashMap<ShapeKey, u32>,
    /// Shapes whose capture was [`CaptureError::Unsure`] once: the next is checked against two
    /// eager references, and a second doubt fails.
    unsure: HashSet<ShapeKey>,
    /// The other replicas' say ([`Self::agreeing`]); `None` when training alone.
    agree: Option<Agreement>,
    graphs: Vec<(ShapeKey, G, u64)>,
    disabled: Option<String>,
    eager_runs: u64,
    eager_fallbacks: u64,
    warned_full: bool,
}

impl<G> CaptureManager<G> {
    /// `what` names the captured region in logs ("training step", "predict forward").
    pub fn new(what: &str, threshold: u32, max_graphs: usize) -> Self {
        Self {
            what: what.into(),
            threshold: threshold.max(1),
            max_graphs: max_graphs.max(1),
            seen: HashMap::new(),
            unsure: HashSet::new(),
            agree: None,
            graphs: vec![],
            disabled: None,
            eager_runs: 0,
            eager_fallbacks: 0,
            warned_full: false,
        }
    }

    /// Each capture's outcome agreed with the other replicas: the step is a graph on every
    /// replica or on none (a replica whose capture held discards it when another's failed), and
    /// an inconclusive check anywhere is retried everywhere.
    pub fn agreeing(mut self, agreement: Option<Agreement>) -> Self {
        self.agree = agreement;
        self
    }

    /// `ops.capture(attempt)`, its outcome agreed with the other replicas: a graph that held
    /// here is discarded when another replica's capture did not.
    fn capture_agreed<T>(&self, attempt: Attempt, ops: &mut impl GraphOps<G, T>) -> Result<(G, Option<T>), CaptureError> {
        let alone = |mine: Verdict| mine;
        let result = ops.capture(attempt, self.agree.as_deref().unwrap_or(&alone));
        let Some(agree) = &self.agree else { return result };
        let mine = match &result {
            Ok(_) => Verdict::Captured,
            Err(CaptureError::Unsure(_)) => Verdict::Unsure,
            Err(CaptureError::Failed(_)) => Verdict::Failed,
        };
        match (agree(mine), result) {
            (Verdict::Captured, result) => result,
            (all, Ok((graph, _))) => {
                ops.discard(graph);
                Err(if all == Verdict::Unsure {
                    CaptureError::Unsure("it held on this GPU, but another GPU's check was inconclusive".into())
                } else {
                    CaptureError::Failed("it held on this GPU, but another GPU's capture failed".into())
                })
            }
            (Verdict::Failed, Err(CaptureError::Unsure(e))) => Err(CaptureError::Failed(format!("{e}; another GPU's capture failed"))),
            (_, result) => result,
        }
    }

    /// A manager that never captures, with the reason (logged once by the caller).
    pub fn disabled(what: &str, reason: String) -> Self {
        let mut m = Self::new(what, 1, 1);
        m.disabled = Some(reason);
        m
    }

    pub fn is_disabled(&self) -> bool {
        self.disabled.is_some()
    }

    /// Runs one step for `key`: replay, capture or eager.
    pub fn run<T>(&mut self, key: &ShapeKey, ops: &mut impl GraphOps<G, T>) -> T {
        if self.disabled.is_some() {
            self.eager_runs += 1;
            return ops.eager();
        }
        if let Some(i) = self.graphs.iter().position(|(k, _, _)| k == key) {
            let (_, graph, replays) = &mut self.graphs[i];
            match ops.replay(graph) {
                Ok(out) => {
                    *replays += 1;
                    return out;
                }
                Err(e) => {
                    let first = *replays == 0;
                    self.disable(format!("{}graph replay failed: {e}", if first { "first " } else { "" }));
                    self.eager_runs += 1;
                    return ops.eager();
                }
            }
        }
        let seen = self.seen.entry(key.clone()).or_insert(0);
        *seen += 1;
        let prior_runs = *seen - 1;
        if *seen >= self.threshold {
            if self.graphs.len() >= self.max_graphs {
                if !self.warned_full {
                    tracing::warn!("cuda_graph: {} already holds {} graph(s) (max_graphs); other shapes run eager", self.what, self.max_graphs);
                    self.warned_full = true;
                }
            } else {
                let started = std::time::Instant::now();
                let attempt = Attempt { prior_runs, measure_spread: self.unsure.contains(key) };
                match self.capture_agreed(attempt, ops) {
                    Ok((mut graph, replayed)) => {
                        // The time is the capture's share of the warm-up (docs/history/).
                        tracing::info!("cuda_graph: captured {} at input shape {} in {:.1} s", self.what, key.describe(), started.elapsed().as_secs_f64());
                        match replayed.map(Ok).unwrap_or_else(|| ops.replay(&mut graph)) {
                            Ok(out) => {
                                self.graphs.push((key.clone(), graph, 1));
                                return out;
                            }
                            Err(e) => self.disable(format!("first graph replay failed: {e}")),
                        }
                    }
                    Err(CaptureError::Unsure(e)) if !attempt.measure_spread => {
                        tracing::info!(
                            "cuda_graph: {}'s check at input shape {} was inconclusive ({e}); this step runs eager, the next captures again against two eager runs",
                            self.what,
                            key.describe()
                        );
                        self.unsure.insert(key.clone());
                    }
                    Err(CaptureError::Failed(e) | CaptureError::Unsure(e)) => self.disable(format!("graph capture failed: {e}")),
                }
                self.eager_runs += 1;
                return ops.eager();
            }
        }
        self.eager_runs += 1;
        if !self.graphs.is_empty() || self.warned_full {
            self.eager_fallbacks += 1;
        }
        ops.eager()
    }

    /// Drops every graph and the shape counts: capture happens again at the threshold.
    pub fn invalidate(&mut self, reason: &str) {
        if self.disabled.is_some() {
            return;
        }
        self.graphs.clear();
        self.seen.clear();
        self.unsure.clear();
        self.warned_full = false;
        tracing::info!("cuda_graph: capture invalidated ({reason}); will re-capture");
    }

    /// Permanently eager from now on, with one warning.
    fn disable(&mut self, reason: String) {
        tracing::warn!("cuda_graph {} capture disabled, falling back to eager: {reason}", self.what);
        self.graphs.clear();
        self.disabled = Some(reason);
    }

    /// Replays so far, over all graphs.
    pub fn replays(&self) -> u64 {
        self.graphs.iter().map(|(_, _, r)| *r).sum()
    }

    pub fn info(&self) -> GraphInfo {
        GraphInfo {
            what: self.what.clone(),
            captured: self.graphs.iter().map(|(k, _, r)| CapturedGraph { key: k.clone(), replays: *r }).collect(),
            graph_count: self.graphs.len(),
            max_graphs: self.max_graphs,
            eager_runs: self.eager_runs,
            eager_fallbacks: self.eager_fallbacks,
            fallback_reason: self.disabled.clone(),
        }
    }
}

/// `cuda_graph=true|false|auto` (predict), as LibreYOLO parses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphMode {
    Off,
    /// Capture on the first use of each shape.
    On,
    /// Capture once a shape has repeated 3 times.
    Auto,
}

impl GraphMode {
    pub fn parse(value: &str) -> Result<Self, String> {
        match value.trim().to_ascii_lowercase().as_str() {
            "false" | "0" | "off" => Ok(GraphMode::Off),
            "true" | "1" | "on" => Ok(GraphMode::On),
            "auto" => Ok(GraphMode::Auto),
            _ => Err(format!("Invalid cuda_graph={value}. Expected true, false or 'auto'.")),
        }
    }

    /// The shape-count threshold of this mode.
    pub fn threshold(self) -> u32 {
        match self {
            GraphMode::Auto => 3,
            _ => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Failure injection: a computation whose capture or replay fail on demand.
    #[derive(Default)]
    struct Injected {
        fail_capture: bool,
        /// Captures answered `Unsure` unless asked to measure the spread.
        unsure_without_spread: bool,
        fail_replay_after: Option<u32>,
        replays: u32,
        captures: u32,
        eager: u32,
        /// The capture's own check replays once and returns that output.
        replays_in_check: bool,
        prior_runs: Vec<u32>,
        attempts: Vec<Attempt>,
        /// Graphs that held here and were dropped because another replica's did not.
        discarded: Vec<u32>,
    }

    impl GraphOps<u32, &'static str> for Injected {
        fn eager(&mut self) -> &'static str {
            self.eager += 1;
            "eager"
        }
        fn capture(&mut self, attempt: Attempt, _: &dyn Fn(Verdict) -> Verdict) -> Result<(u32, Option<&'static str>), CaptureError> {
            self.captures += 1;
            self.prior_runs.push(attempt.prior_runs);
            self.attempts.push(attempt);
            if self.fail_capture {
                return Err(CaptureError::Failed("injected capture failure".into()));
            }
            if self.unsure_without_spread && !attempt.measure_spread {
                return Err(CaptureError::Unsure("injected doubt".into()));
            }
            let checked = self.replays_in_check.then(|| {
                self.replays += 1;
                "checked replay"
            });
            Ok((self.captures, checked))
        }
        fn replay(&mut self, _g: &mut u32) -> Result<&'static str, String> {
            if self.fail_replay_after.is_some_and(|n| self.replays >= n) {
                return Err("injected replay failure".into());
            }
            self.replays += 1;
            Ok("replay")
        }
        fn discard(&mut self, graph: u32) {
            self.discarded.push(graph);
        }
    }

    fn key(b: usize) -> ShapeKey {
        ShapeKey { dims: vec![b, 3, 640, 640], dtype: "bf16".into(), others: vec![] }
    }

    #[test]
    fn a_key_describes_a_few_other_inputs_in_full_and_many_by_count() {
        assert_eq!(key(16).describe(), "[16, 3, 640, 640] (bf16)");
        let few = ShapeKey { others: vec![vec![16, 300, 5]], ..key(16) };
        assert_eq!(few.describe(), "[16, 3, 640, 640] (bf16; other inputs [[16, 300, 5]])");
        // An update's region: every gradient is an input.
        let many = ShapeKey { dims: vec![432], dtype: "BF16".into(), others: (1..=897).map(|n| vec![n]).collect() };
        assert_eq!(many.describe(), "[432] (BF16; 897 other inputs: [1], [2], [3], [4], [5], [6], [7], [8], ...)");
    }

    #[test]
    fn captures_at_the_threshold_and_replays_hits() {
        let mut m = CaptureManager::new("training step", 3, 1);
        let mut ops = Injected::default();
        let runs: Vec<_> = (0..5).map(|_| m.run(&key(16), &mut ops)).collect();
        // 1st and 2nd eager, the 3rd captures and is served by the graph.
        assert_eq!(runs, ["eager", "eager", "replay", "replay", "replay"]);
        assert_eq!((ops.captures, ops.eager), (1, 2));
        assert_eq!(ops.prior_runs, [2], "told of the two eager runs before");
        // Another shape (the last partial batch) runs eager: at most one graph.
        for _ in 0..4 {
            assert_eq!(m.run(&key(8), &mut ops), "eager");
        }
        let info = m.info();
        assert_eq!(info.graph_count, 1);
        assert_eq!(info.captured[0].replays, 3);
        assert_eq!(info.eager_fallbacks, 4);
        assert!(info.fallback_reason.is_none());
    }

    /// A capture whose check already replayed the step returns that output as the step's:
    /// it is not replayed a second time.
    #[test]
    fn a_checked_replay_is_the_capturing_runs_result() {
        let mut m = CaptureManager::new("training step", 1, 1);
        let mut ops = Injected { replays_in_check: true, ..Default::default() };
        let runs: Vec<_> = (0..3).map(|_| m.run(&key(16), &mut ops)).collect();
        assert_eq!(runs, ["checked replay", "replay", "replay"]);
        assert_eq!((ops.replays, ops.prior_runs.as_slice()), (3, &[0][..]));
        assert_eq!(m.info().captured[0].replays, 3);
    }

    #[test]
    fn a_capture_failure_drops_the_run_to_eager() {
        let mut m = CaptureManager::new("training step", 1, 2);
        let mut ops = Injected { fail_capture: true, ..Default::default() };
        assert_eq!(m.run(&key(16), &mut ops), "eager");
        assert!(m.is_disabled());
        ops.fail_capture = false;
        for _ in 0..3 {
            assert_eq!(m.run(&key(16), &mut ops), "eager");
        }
        assert_eq!(ops.captures, 1, "never retried");
        assert!(m.info().fallback_reason.unwrap().starts_with("graph capture failed: injected"));
    }

    /// A check inconclusive for want of a second eager reference is not a failure: that step
    /// runs eager and the shape's next run captures again, asking for the spread.
    #[test]
    fn an_unsure_check_captures_again_with_the_spread_measured() {
        let mut m = CaptureManager::new("training step", 2, 1);
        let mut ops = Injected { unsure_without_spread: true, ..Default::default() };
        let runs: Vec<_> = (0..4).map(|_| m.run(&key(16), &mut ops)).collect();
        assert_eq!(runs, ["eager", "eager", "replay", "replay"]);
        assert_eq!(ops.attempts, [Attempt { prior_runs: 1, measure_spread: false }, Attempt { prior_runs: 2, measure_spread: true }]);
        assert!(!m.is_disabled() && m.info().graph_count == 1);

        // Still unsure with the spread measured: a failure like any other.
        let mut m = CaptureManager::new("training step", 1, 1);
        let runs: Vec<_> = (0..3).map(|_| m.run(&key(16), &mut Unsure)).collect();
        assert_eq!(runs, ["eager", "eager", "eager"]);
        assert_eq!(m.info().fallback_reason.as_deref(), Some("graph capture failed: still unsure"));
    }

    /// The other replicas' outcome, fixed: what a data-parallel peer answers.
    fn peers(theirs: Verdict) -> Option<Agreement> {
        Some(Box::new(move |mine: Verdict| mine.max(theirs)))
    }

    /// Data-parallel replicas capture together: a graph that held here is discarded when a
    /// peer's capture failed (every replica runs that step, and the rest, eager), and retried
    /// with every replica when a peer's check was inconclusive.
    #[test]
    fn replicas_go_by_the_worst_capture_of_them_all() {
        let mut m = CaptureManager::new("training step", 1, 1).agreeing(peers(Verdict::Failed));
        let mut ops = Injected { replays_in_check: true, ..Default::default() };
        let runs: Vec<_> = (0..3).map(|_| m.run(&key(16), &mut ops)).collect();
        assert_eq!(runs, ["eager", "eager", "eager"], "the checked replay is not the step's result");
        assert_eq!((ops.captures, ops.discarded.as_slice()), (1, &[1][..]));
        assert_eq!(m.info().fallback_reason.as_deref(), Some("graph capture failed: it held on this GPU, but another GPU's capture failed"));

        // A peer unsure once: this replica's graph is discarded too, and all capture again.
        let unsure_once = std::cell::Cell::new(true);
        let agreement: Agreement = Box::new(move |mine: Verdict| mine.max(if unsure_once.replace(false) { Verdict::Unsure } else { Verdict::Captured }));
        let mut m = CaptureManager::new("training step", 1, 1).agreeing(Some(agreement));
        let mut ops = Injected { replays_in_check: true, ..Default::default() };
        let runs: Vec<_> = (0..3).map(|_| m.run(&key(16), &mut ops)).collect();
        assert_eq!(runs, ["eager", "checked replay", "replay"]);
        assert_eq!(ops.attempts.iter().map(|a| a.measure_spread).collect::<Vec<_>>(), [false, true]);
        assert_eq!(ops.discarded, [1]);

        // This replica unsure, a peer failed: a failure here too, not a retry.
        let mut m = CaptureManager::new("training step", 1, 1).agreeing(peers(Verdict::Failed));
        assert_eq!(m.run(&key(16), &mut Unsure), "eager");
        assert_eq!(m.info().fallback_reason.as_deref(), Some("graph capture failed: still unsure; another GPU's capture failed"));

        // Peers that captured too change nothing.
        let mut m = CaptureManager::new("training step", 1, 1).agreeing(peers(Verdict::Captured));
        let mut ops = Injected { replays_in_check: true, ..Default::default() };
        assert_eq!([m.run(&key(16), &mut ops), m.run(&key(16), &mut ops)], ["checked replay", "replay"]);
        assert!(ops.discarded.is_empty());
    }

    /// A computation whose check is always inconclusive.
    struct Unsure;

    impl GraphOps<u32, &'static str> for Unsure {
        fn eager(&mut self) -> &'static str {
            "eager"
        }
        fn capture(&mut self, _: Attempt, _: &dyn Fn(Verdict) -> Verdict) -> Result<(u32, Option<&'static str>), CaptureError> {
            Err(CaptureError::Unsure("still unsure".into()))
        }
        fn replay(&mut self, _g: &mut u32) -> Result<&'static str, String> {
            Ok("replay")
        }
    }

    #[test]
    fn a_replay_failure_mid_run_drops_to_eager() {
        let mut m = CaptureManager::new("training step", 1, 1);
        let mut ops = Injected { fail_replay_after: Some(3), ..Default::default() };
        let runs: Vec<_> = (0..6).map(|_| m.run(&key(16), &mut ops)).collect();
        assert_eq!(runs, ["replay", "replay", "replay", "eager", "eager", "eager"]);
        assert_eq!(m.info().fallback_reason.as_deref(), Some("graph replay failed: injected replay failure"));
        assert_eq!(m.info().graph_count, 0);

        let mut m = CaptureManager::new("predict forward", 1, 1);
        let mut ops = Injected { fail_replay_after: Some(0), ..Default::default() };
        assert_eq!(m.run(&key(1), &mut ops), "eager");
        assert_eq!(m.info().fallback_reason.as_deref(), Some("first graph replay failed: injected replay failure"));
    }

    #[test]
    fn invalidation_recaptures_at_the_threshold() {
        let mut m = CaptureManager::new("training step", 2, 1);
        let mut ops = Injected::default();
        assert_eq!([m.run(&key(16), &mut ops), m.run(&key(16), &mut ops)], ["eager", "replay"]);
        m.invalidate("the captured region changed");
        assert_eq!(m.info().graph_count, 0);
        assert_eq!([m.run(&key(16), &mut ops), m.run(&key(16), &mut ops), m.run(&key(16), &mut ops)], ["eager", "replay", "replay"]);
        assert_eq!(ops.captures, 2);
        assert_eq!(ops.prior_runs, [1, 1], "the counts start again after an invalidation");
    }

    #[test]
    fn max_graphs_bounds_the_graphs_and_the_rest_runs_eager() {
        let mut m = CaptureManager::new("predict forward", 1, 2);
        let mut ops = Injected::default();
        for b in [1, 2, 3, 1, 2, 3] {
            m.run(&key(b), &mut ops);
        }
        let info = m.info();
        assert_eq!(info.graph_count, 2);
        assert_eq!(ops.captures, 2);
        assert_eq!(info.eager_fallbacks, 2, "shape 3 twice");
    }

    #[test]
    fn graph_mode_parses_like_libreyolo() {
        assert_eq!(GraphMode::parse("True"), Ok(GraphMode::On));
        assert_eq!(GraphMode::parse("false"), Ok(GraphMode::Off));
        assert_eq!(GraphMode::parse("auto").map(|m| m.threshold()), Ok(3));
        assert_eq!(GraphMode::parse("sometimes"), Err("Invalid cuda_graph=sometimes. Expected true, false or 'auto'.".into()));
        let m: CaptureManager<u32> = CaptureManager::disabled("x", "device is not CUDA".into());
        assert!(m.is_disabled());
    }
}
