//! Capturing a step's region: its graphs recorded, checked once against eager, and replayed.
//!
//! A region is a run of segments from the program's first graph to its last, eager items
//! between (e.g. LibreYOLO's contract: a forward graph, the eager loss and its backward, a
//! backward graph). Its capture:
//!
//! 1. warm-up runs of the whole region from the same state (each measured for the check, its
//!    effects undone), the device drained where each segment ends, as the windows drain it, so
//!    burn-fusion builds the kernels the windows record and the pools reach their steady size:
//!    two on a shape's first run (burn-fusion searches on the first), one after eager runs of
//!    it ([`crate::capture::one_graph`]);
//! 2. one pass through the region with a capture window around each graph, its eager items run
//!    between them on the capture run's outputs (each window's graph replayed once before them,
//!    so an item that reads values on the host reads computed ones), and before each window
//!    after the first one more eager run of the region, whose temporaries grow the pools outside
//!    a window (a recorded graph reserves its pages). A window the backend refuses (it would
//!    allocate) voids the pass, which goes on to the region's end all the same, then the whole
//!    pass is tried once more after another warm-up run. Data-parallel replicas go by
//!    the worst pass of all (a refusal anywhere is a second pass everywhere, a failure anywhere
//!    ends the capture everywhere), so that all of them run the same collectives;
//! 3. the state put back, and one replay from it on the capturing batch checked against the
//!    warm-up runs ([`agree`]); that replay stands as the step's result.
//!
//! A graph reads stable buffers: those the region reads from before it are copied once and
//! refreshed in place before each replay, and so are values its eager items make for a later
//! graph; a value an earlier graph wrote is read where that graph writes it. Without hardware
//! graphs (the CPU, `LIBREYOLO_CAPTURE_SOFTWARE`) a replay runs each graph's items on its
//! stable buffers: the same plumbing, checked by the tests against eager.

use std::cell::RefCell;
use std::ops::Range;
use std::rc::Rc;

use burn::backend::{Backend, BackendGraph, Dispatch};
use burn::tensor::Tensor;
use libreyolo_stages::kinds::optimizer::{Saved, save_one, write_saved};
use libreyolo_stages::stage::{AnyTensor, Board, Slot, Stage, StateMut, StepInfo, Value};

use super::core::{Core, Mode, Tapes};
use crate::capture::{Attempt, CaptureError, GraphOps, Verdict, one_graph, quiet};

/// A recorded graph segment of the region.
struct Recorded {
    segment: usize,
    /// The hardware graph, or `None` (software: replays run the items).
    graph: Option<BackendGraph<Dispatch>>,
    /// Stable copies of the values an eager item of the region makes for it, refreshed in place.
    stable: Vec<(Slot, Value)>,
    /// The capture run's outputs: the buffers every hardware replay rewrites.
    outputs: Vec<(Slot, Value)>,
}

/// The region's graphs and the stable buffers they read.
pub struct RegionGraphs {
    /// Stable copies of what the region reads from before it.
    entry: Vec<(Slot, Value)>,
    recorded: Vec<Recorded>,
}

impl RegionGraphs {
    fn is_hardware(&self) -> bool {
        self.recorded.iter().all(|r| r.graph.is_some())
    }
}

/// One run of the region on this step's values.
pub struct RegionOps<'a> {
    core: &'a Core,
    /// The step's values on entering the region.
    board: Board,
    entry: &'a [Slot],
    step: StepInfo,
    /// The state before a capture whose checked replay stands as this step's result, until the
    /// other replicas agree ([`GraphOps::discard`] puts it back).
    before: Option<Vec<Saved>>,
}

impl<'a> RegionOps<'a> {
    pub fn new(core: &'a Core, board: Board, entry: &'a [Slot], step: StepInfo) -> Self {
        Self { core, board, entry, step, before: None }
    }
}

/// What one run of the region produced ([`RegionOps::measure`]).
#[derive(Debug, Clone)]
struct Measured {
    loss: f64,
    /// The parts of the signature (their sum): the gradients handed on, then how far each writer moved the state.
    parts: Vec<f64>,
}

impl Measured {
    /// (loss, signature).
    fn pair(&self) -> (f64, f64) {
        (self.loss, self.parts.iter().sum())
    }
}

/// A state tensor as saved.
pub fn snapshot(stages: &[Rc<dyn Stage>]) -> Vec<Saved> {
    let mut out = vec![];
    for s in stages {
        s.state(&mut |t| out.push(save_one(t)));
    }
    out
}

/// Copies `saved` back into the same buffers, in place.
pub fn restore(stages: &[Rc<dyn Stage>], saved: &[Saved]) {
    let mut it = saved.iter();
    for s in stages {
        s.state(&mut |t| write_saved(t, it.next().expect("restored in the order saved"), None));
    }
}

/// The state tensors themselves (their handles, not copies), to put back with [`put_back`].
/// While they are held, a write to them cannot happen in place: it lands in a new buffer, and
/// putting the held ones back discards it with the original buffers untouched.
fn hold(stages: &[Rc<dyn Stage>]) -> Vec<AnyTensor> {
    let mut out = vec![];
    for s in stages {
        s.state(&mut |t| {
            out.push(match t {
                StateMut::Any(t) => t.clone(),
                StateMut::Vector(t) => AnyTensor::R1(t.clone()),
            })
        });
    }
    out
}

/// Puts the tensors [`hold`] took back in place of whatever the state holds now.
fn put_back(stages: &[Rc<dyn Stage>], held: Vec<AnyTensor>) {
    let mut it = held.into_iter();
    for s in stages {
        s.state(&mut |t| {
            let h = it.next().expect("put back in the order held");
            match (t, h) {
                (StateMut::Any(t), h) => *t = h,
                (StateMut::Vector(t), AnyTensor::R1(h)) => *t = h,
                _ => unreachable!("held in the same order"),
            }
        });
    }
}

/// How far each stage's state moved from `saved`: the sum of squares of the differences, on the
/// device, one a stage (`None` for a stage without state).
fn moved(stages: &[Rc<dyn Stage>], saved: &[Saved]) -> Vec<Option<Tensor<1>>> {
    let mut it = saved.iter();
    stages
        .iter()
        .map(|s| {
            let mut sums: Vec<Tensor<1>> = vec![];
            s.state(&mut |t| {
                let was = it.next().expect("compared in the order saved");
                sums.push(match t {
                    StateMut::Any(now) => now.squared_distance(was),
                    StateMut::Vector(now) => AnyTensor::R1(now.clone()).squared_distance(was),
                });
            });
            sums.into_iter().reduce(|a, b| a.add(b))
        })
        .collect()
}

/// How far each writer's state `now` lies from `was` (both as saved), summed on the host in f64
/// (no device reduction involved), with its three furthest-moved tensors by name: the debug
/// log's cross-check of [`moved`], so a device sum that miscounts is told from a state that moved.
fn apart_on_host(stages: &[Rc<dyn Stage>], now: &[Saved], was: &[Saved]) -> String {
    let host = |t: &AnyTensor| t.flat().into_data().convert::<f64>().try_to_vec::<f64>().unwrap_or_default();
    let mut pairs = now.iter().zip(was);
    let mut parts = vec![];
    for s in stages {
        let names = s.state_names();
        let mut count = 0;
        s.state(&mut |_| count += 1);
        let mut tensors: Vec<(String, f64)> = (0..count)
            .map(|k| {
                let (a, b) = pairs.next().expect("compared in the order saved");
                let d: f64 = host(a).iter().zip(host(b)).map(|(x, y)| (x - y) * (x - y)).sum();
                (state_name(&names, k), d)
            })
            .collect();
        let total: f64 = tensors.iter().map(|(_, d)| d).sum();
        tensors.sort_by(|a, b| b.1.total_cmp(&a.1));
        let top: Vec<String> = tensors.iter().take(3).map(|(n, d)| format!("{n} {d:.4e}")).collect();
        parts.push(format!("{total:.6e} ({})", top.join(", ")));
    }
    parts.join("; ")
}

/// The name of a writer's `k`-th state tensor (`Stage::state_names`), else `#k`, its place.
fn state_name(names: &[String], k: usize) -> String {
    names.get(k).cloned().unwrap_or_else(|| format!("#{k}"))
}

/// The first value of `t` on the host (NaN if it cannot be read).
fn read_scalar(t: Tensor<1>) -> f64 {
    t.into_data().convert::<f64>().try_to_vec::<f64>().ok().and_then(|v| v.first().copied()).unwrap_or(f64::NAN)
}

/// Stable copies of `board`'s values at `slots`: fresh buffers a graph reads in place. A value
/// without device tensors (host labels, an event) has nothing to keep stable: it is left out,
/// so that each step reads its own from the board rather than the capture step's.
fn stable_copies(board: &Board, slots: &[Slot]) -> Vec<(Slot, Value)> {
    slots
        .iter()
        .filter_map(|&s| {
            let v = board.get(s)?;
            let tensors = v.tensors();
            (!tensors.is_empty()).then(|| (s, v.with_tensors(tensors.iter().map(AnyTensor::fresh_copy).collect())))
        })
        .collect()
}

/// Writes the step's values into stable buffers, in place. The stable values are taken apart
/// by move (a cloned handle would make their buffers look shared) and put back together.
fn refresh(stable: &mut [(Slot, Value)], board: &Board, hardware: bool) -> Result<(), String> {
    for (slot, value) in stable.iter_mut() {
        let new = board.get(*slot).ok_or("a graph's input has no value this step")?.tensors();
        let mut new = new.iter();
        let taken = std::mem::replace(value, Value::Event);
        *value = taken.try_map_tensors(|mut t| {
            let n = new.next().ok_or("a graph's input changed its number of tensors")?;
            if t.dims() != n.dims() {
                return Err(format!("a graph's input changed shape ({:?} -> {:?})", t.dims(), n.dims()));
            }
            t.refresh(n, hardware)?;
            Ok(t)
        })?;
    }
    Ok(())
}

fn put_all(board: &mut Board, values: &[(Slot, Value)]) {
    for (s, v) in values {
        board.put(*s, v.clone());
    }
}

/// The value without its autodiff history (what a graph's outputs hold between replays).
fn detached(v: &Value) -> Value {
    v.with_tensors(v.tensors().iter().map(AnyTensor::inner).collect())
}

impl RegionOps<'_> {
    fn items(&self) -> Range<usize> {
        self.core.region_items().expect("a region")
    }

    fn writers(&self) -> Vec<Rc<dyn Stage>> {
        self.core.writers(self.items())
    }

    /// What a run of the region produced: the loss it differentiated, and the sum of squares of
    /// the gradients it hands on plus how far each writer moved the state.
    fn measure(&self, board: &Board, writers: &[Rc<dyn Stage>], saved: &[Saved]) -> Measured {
        let program = &self.core.program;
        let loss = match program.loss.and_then(|s| board.get(s)) {
            Some(Value::Loss(l)) => read_scalar(l.total.clone()),
            _ => f64::NAN,
        };
        let items = self.items();
        let after = &program.items[items.end..];
        let mut handed: Vec<Tensor<1>> = vec![];
        for item in &program.items[items] {
            for &w in &item.writes {
                if let Some(Value::Grads(g)) = board.get(w)
                    && after.iter().any(|x| x.reads.contains(&w))
                {
                    handed.extend(g.iter().map(|(_, t)| t.clone().square().sum()));
                }
            }
        }
        let parts = std::iter::once(handed.into_iter().reduce(|a, b| a.add(b))).chain(moved(writers, saved));
        let zero = || Tensor::<1>::zeros([1], &self.core.device);
        // One read for all of them.
        let parts: Vec<f64> =
            Tensor::cat(parts.map(|p| p.unwrap_or_else(zero)).collect(), 0).into_data().convert::<f64>().try_to_vec::<f64>().unwrap_or_default();
        Measured { loss, parts }
    }

    /// The parts of two runs' signatures side by side, named (`grads handed on`, then each writer
    /// by its first item's phase), for the log of a failed check.
    fn by_part(&self, eager: &Measured, replayed: &Measured) -> String {
        let names = std::iter::once("grads handed on".to_string()).chain(self.core.writer_names(self.items()));
        names.zip(eager.parts.iter().zip(&replayed.parts)).map(|(n, (a, b))| format!("{n} {a:.6e} -> {b:.6e}")).collect::<Vec<_>>().join(", ")
    }

    /// The region eagerly on `board` (its graphs' code path), drained at segment ends if `drain`.
    fn run_eager(&self, board: &mut Board, drain: bool) -> anyhow::Result<()> {
        self.core.run_items(self.items(), board, &Tapes::new(self.core.program.pieces), true, drain, self.step)
    }

    /// Which state tensors the replay moved furthest from where an eager run of the same step
    /// moved them: `|replayed - eager| / |eager - before|` per tensor (the norms' squares summed
    /// with a millionth of `|eager|`'s under the root), with `eager` the state
    /// after the last warm-up run and `before` the state saved before the step. For a refused
    /// check, e.g. `optimizer head.cv3.0.weight 4.1e-2`: the writer by its phase and the tensor
    /// by its name (`Stage::state_names`; else `#k`, its place in the writer's state).
    fn furthest_apart(&self, writers: &[Rc<dyn Stage>], eager: &[Saved], before: &[Saved]) -> String {
        let names = self.core.writer_names(self.items());
        let mut it = eager.iter().zip(before);
        let (mut rel, mut place): (Vec<Tensor<1>>, Vec<(usize, usize)>) = (vec![], vec![]);
        for (w, s) in writers.iter().enumerate() {
            let mut k = 0;
            s.state(&mut |t| {
                let (eager, before) = it.next().expect("compared in the order saved");
                let now = match t {
                    StateMut::Any(now) => now.clone(),
                    StateMut::Vector(now) => AnyTensor::R1(now.clone()),
                };
                // A tensor the step barely moved (a gradient near zero) is measured against a
                // thousandth of its size instead, so rounding does not top the list.
                let moved = eager.squared_distance(before).add(eager.sum_squares().mul_scalar(1e-6)).clamp_min(1e-30);
                rel.push(now.squared_distance(eager).div(moved).sqrt());
                place.push((w, k));
                k += 1;
            });
        }
        if rel.is_empty() {
            return "(no state)".into();
        }
        let rel: Vec<f64> = Tensor::cat(rel, 0).into_data().convert::<f64>().try_to_vec::<f64>().unwrap_or_default();
        let tensor_names: Vec<Vec<String>> = writers.iter().map(|s| s.state_names()).collect();
        let name = |(w, k): (usize, usize)| state_name(&tensor_names[w], k);
        let mut order: Vec<usize> = (0..rel.len()).collect();
        order.sort_by(|&a, &b| rel[b].total_cmp(&rel[a]));
        order.iter().take(6).map(|&i| format!("{} {} {:.1e}", names[place[i].0], name(place[i]), rel[i])).collect::<Vec<_>>().join(", ")
    }

    /// `n` warm-up runs of the region from the saved state, each measured into `figures`, the
    /// state the last one left copied into `last`; returns their times for the log.
    fn warm_up(
        &self,
        n: usize,
        entry: &[(Slot, Value)],
        writers: &[Rc<dyn Stage>],
        saved: &[Saved],
        figures: &mut Vec<Measured>,
        last: &mut Vec<Saved>,
    ) -> Result<String, String> {
        // Allocations from here on come from the pool the first window records into (burn's
        // `capture` prepares before its warm-up too).
        let _ = Dispatch::graph_prepare(self.core.device.as_dispatch());
        let mut times = vec![];
        for run in 0..n {
            let started = std::time::Instant::now();
            let mut b = self.board.clone();
            put_all(&mut b, entry);
            self.run_eager(&mut b, true).map_err(|e| format!("{e:#}"))?;
            let _ = self.core.device.sync();
            figures.push(self.measure(&b, writers, saved));
            if run + 1 == n {
                *last = snapshot(writers);
            }
            // Dropped once the device drained: the lazy fusion backend would skip its kernels.
            drop(b);
            restore(writers, saved);
            times.push(format!("{:.2}", started.elapsed().as_secs_f64()));
        }
        Ok(format!("warm-up runs {} s", times.join(" + ")))
    }

    /// The capture pass: each graph recorded in a window, the eager items between them run.
    fn pass(&self, entry: &[(Slot, Value)], writers: &[Rc<dyn Stage>]) -> Result<Vec<Recorded>, PassError> {
        let core = self.core;
        let d = core.device.as_dispatch();
        let mut b = self.board.clone();
        put_all(&mut b, entry);
        let tapes = Tapes::new(core.program.pieces);
        let refused = RefCell::new(None);
        let region = core.program.region.clone().expect("a region");
        let region_end = region.end;
        let mut recorded: Vec<Recorded> = vec![];
        // Slots whose value a graph's buffer holds (a later graph reads them there).
        let mut made_by_graph: Vec<Slot> = entry.iter().map(|(s, _)| *s).collect();
        let fail = |e: anyhow::Error| PassError::Other(format!("{e:#}"));
        // The first window the backend refused (it would have allocated inside).
        let mut window_refused: Option<String> = None;
        for s in region {
            let seg = &core.program.segments[s];
            if !seg.graph {
                // The eager items between windows compute on the earlier windows' outputs (each
                // replayed once after its recording): what they write of the state is discarded,
                // and the state keeps the buffers the recorded graphs read (a capture tape holds
                // the parameters here, so their writes could not be in place anyway).
                let held = hold(writers);
                for i in seg.items.clone() {
                    core.run_item(i, &mut b, &tapes, Mode { in_graph: false, hardware: false }, &refused, self.step).map_err(fail)?;
                    made_by_graph.retain(|x| !core.program.items[i].writes.contains(x));
                }
                put_back(writers, held);
                continue;
            }
            let own: Vec<Slot> = seg.inputs.iter().copied().filter(|x| !made_by_graph.contains(x)).collect();
            let stable = stable_copies(&b, &own);
            put_all(&mut b, &stable);
            if !recorded.is_empty() {
                // The earlier windows' pages are reserved to their graphs: one more eager run
                // grows the pools for this window's temporaries outside it, then the pool is
                // prepared for this window (as LibreYOLO's two graphs were recorded). Its state
                // writes are discarded (the state keeps the buffers the graphs read).
                let held = hold(writers);
                let mut grow = self.board.clone();
                put_all(&mut grow, entry);
                self.run_eager(&mut grow, true).map_err(fail)?;
                let _ = core.device.sync();
                drop(grow);
                put_back(writers, held);
                let _ = Dispatch::graph_prepare(d);
            }
            let _ = core.device.sync();
            let window = Dispatch::graph_start_capture(d).is_ok();
            let mode = Mode { in_graph: true, hardware: window || core.allow_software };
            let mut ran = Ok(());
            for i in seg.items.clone() {
                ran = core.run_item(i, &mut b, &tapes, mode, &refused, self.step).map_err(fail);
                if ran.is_err() {
                    break;
                }
            }
            // A failed stop still takes the stream out of capture mode.
            let graph = if window { Some(Dispatch::graph_stop_capture(d).map_err(|e| format!("recording {}: {e:?}", describe(core, s)))) } else { None };
            ran?;
            let graph = match graph
                .transpose()
                .and_then(|g| if one_graph::injected_refusal() { Err(format!("{} refused ({})", describe(core, s), one_graph::REFUSE_ENV)) } else { Ok(g) })
            {
                Ok(graph) => graph,
                Err(why) => {
                    // The pass goes on to the region's end, as it does on the other replicas,
                    // whose eager items between windows hold collectives (the gradient
                    // all-reduce): what follows reads what the window left (not computed, on a
                    // GPU), and the pass is void. The items are not run again: a backward
                    // piece has consumed its tape.
                    window_refused.get_or_insert(why);
                    None
                }
            };
            if let Some(g) = graph.as_ref().filter(|_| s + 1 < region_end) {
                // The eager items after this window may read its outputs on the host (RT-DETR's
                // Hungarian matching reads its costs): one replay computes them from the values
                // the window was recorded on. What it writes of the state is put back after the
                // pass. Safety: as a replay's (`replay_on`); the buffers are held by `b`, the
                // stable copies and the stages.
                unsafe { Dispatch::graph_replay(d, g) }.map_err(|e| PassError::Other(format!("replaying {}: {e:?}", describe(core, s))))?;
            }
            made_by_graph.extend(seg.outputs.iter().copied());
            let outputs = seg.outputs.iter().filter_map(|&o| b.get(o).map(|v| (o, detached(v)))).collect();
            recorded.push(Recorded { segment: s, graph, stable, outputs });
        }
        if let Some(why) = window_refused {
            return Err(PassError::Window(why));
        }
        if let Some(why) = refused.take() {
            return Err(PassError::Other(why));
        }
        Ok(recorded)
    }

    /// Writes this step's inputs into the graphs' stable buffers and runs the region: each
    /// graph replayed (or its items run on its buffers), the eager items between them.
    fn replay_on(&self, g: &mut RegionGraphs) -> Result<Board, String> {
        let core = self.core;
        let hardware = g.is_hardware();
        refresh(&mut g.entry, &self.board, hardware)?;
        let mut b = self.board.clone();
        put_all(&mut b, &g.entry);
        let tapes = Tapes::new(core.program.pieces);
        let refused = RefCell::new(None);
        let fail = |e: anyhow::Error| format!("{e:#}");
        let region = core.program.region.clone().expect("a region");
        let mut recorded = g.recorded.iter_mut();
        for s in region {
            let seg = &core.program.segments[s];
            if !seg.graph {
                // The later graphs read the state where they recorded it, so what these eager
                // items write of it must stay in its buffers: the windows' rule applies to them.
                for i in seg.items.clone() {
                    core.run_item(i, &mut b, &tapes, Mode { in_graph: false, hardware: true }, &refused, self.step).map_err(fail)?;
                    if let Some(why) = refused.take() {
                        return Err(format!("`{}`, eager between the graphs: {why}", core.program.item_name(i)));
                    }
                }
                continue;
            }
            let r = recorded.next().expect("a recording per graph");
            debug_assert_eq!(r.segment, s);
            refresh(&mut r.stable, &b, hardware)?;
            put_all(&mut b, &r.stable);
            match &r.graph {
                // Safety: every buffer the graph touches is held by `g` (stable inputs, outputs),
                // by an earlier graph's outputs, or by the stages (parameters and state), which
                // outlive the graphs; refreshes, replays and reads run on this thread.
                Some(graph) => {
                    unsafe { Dispatch::graph_replay(core.device.as_dispatch(), graph) }.map_err(|e| format!("replaying {}: {e:?}", describe(core, s)))?;
                    put_all(&mut b, &r.outputs);
                }
                None => {
                    for i in seg.items.clone() {
                        core.run_item(i, &mut b, &tapes, Mode { in_graph: true, hardware: false }, &refused, self.step).map_err(fail)?;
                    }
                }
            }
        }
        Ok(b)
    }
}

/// How a capture pass failed: a window the backend refused (tried once more), or anything else.
enum PassError {
    Window(String),
    Other(String),
}

/// The launches of a pass that failed, for its log line (none: nothing).
fn failed_launches(held: usize) -> String {
    match held {
        0 => String::new(),
        n => format!(" ({n} failed kernel launches in the pass, not printed one by one)"),
    }
}

/// A pass's outcome as this replica's vote: a refused window is a doubt (every replica tries
/// once more), anything else a failure.
fn pass_verdict<T>(pass: &Result<T, PassError>) -> Verdict {
    match pass {
        Ok(_) => Verdict::Captured,
        Err(PassError::Window(_)) => Verdict::Unsure,
        Err(PassError::Other(_)) => Verdict::Failed,
    }
}

/// What every replica does after a capture pass, from its own pass and the worst of all
/// (`retried`: this was the second pass): check the graphs, pass once more, or give up (with the
/// reason when the pass failed elsewhere; this replica's own error otherwise).
#[derive(Debug, PartialEq, Eq)]
enum AfterPass {
    Check,
    PassAgain,
    GiveUp(Option<&'static str>),
}

fn after_pass(mine: Verdict, all: Verdict, retried: bool) -> AfterPass {
    match (all, mine) {
        (Verdict::Captured, _) => AfterPass::Check,
        (Verdict::Unsure, _) if !retried => AfterPass::PassAgain,
        (_, Verdict::Captured) if all == Verdict::Unsure => {
            AfterPass::GiveUp(Some("its graphs recorded on this GPU, but another GPU's capture window was refused twice"))
        }
        (_, Verdict::Captured) => AfterPass::GiveUp(Some("its graphs recorded on this GPU, but another GPU's capture pass failed")),
        (_, Verdict::Unsure) if all == Verdict::Failed => AfterPass::GiveUp(Some("another GPU's capture pass failed")),
        _ => AfterPass::GiveUp(None),
    }
}

/// Graph segment `s` by its items, e.g. `the graph [forward, loss]`.
fn describe(core: &Core, s: usize) -> String {
    format!("the graph [{}]", core.program.segment_names(s).join(", "))
}

impl GraphOps<RegionGraphs, Result<Board, String>> for RegionOps<'_> {
    fn eager(&mut self) -> Result<Board, String> {
        let mut b = self.board.clone();
        self.run_eager(&mut b, false).map_err(|e| format!("{e:#}"))?;
        Ok(b)
    }

    fn capture(&mut self, attempt: Attempt, peers: &dyn Fn(Verdict) -> Verdict) -> Result<(RegionGraphs, Option<Result<Board, String>>), CaptureError> {
        let writers = self.writers();
        let saved = snapshot(&writers);
        let entry = stable_copies(&self.board, self.entry);
        let runs = one_graph::warmup_runs(attempt)?;
        let mut figures: Vec<Measured> = vec![];
        // The state after the last warm-up run: what a refused check names its furthest tensors against.
        let mut after_eager: Vec<Saved> = vec![];
        // A failed run leaves the state as it was saved (the trait's promise).
        let undo = |e: String| {
            restore(&writers, &saved);
            e
        };
        let mut log = vec![self.warm_up(runs, &entry, &writers, &saved, &mut figures, &mut after_eager).map_err(undo)?];
        let started = std::time::Instant::now();
        // Every replica goes by the worst pass of all, so that all of them run the same
        // collectives: a window refused anywhere is tried again everywhere, after one more
        // warm-up run (the pool then holds what the window would have allocated).
        let decide = |pass: &Result<Vec<Recorded>, PassError>, retried: bool| {
            let mine = pass_verdict(pass);
            after_pass(mine, peers(mine), retried)
        };
        // A refused window's pass goes on over buffers the window never filled: the backend's
        // line for each launch that fails in it is counted, not printed.
        let (mut recorded, mut held) = quiet::holding(|| self.pass(&entry, &writers));
        let mut next = decide(&recorded, false);
        if next == AfterPass::PassAgain {
            log.push(match &recorded {
                Err(PassError::Window(refused)) => format!("refused ({}){}; one more run", refused.replace('\n', " "), failed_launches(held)),
                _ => "another GPU's window was refused; one more run".into(),
            });
            drop(recorded);
            let _ = self.core.device.sync();
            restore(&writers, &saved);
            log.push(self.warm_up(1, &entry, &writers, &saved, &mut figures, &mut after_eager).map_err(undo)?);
            (recorded, held) = quiet::holding(|| self.pass(&entry, &writers));
            next = decide(&recorded, true);
        }
        log.push(format!("the pass {:.2} s{}", started.elapsed().as_secs_f64(), failed_launches(held)));
        tracing::info!("cuda_graph: {}", log.join("; "));
        let _ = self.core.device.sync();
        restore(&writers, &saved);
        let recorded = match (recorded, next) {
            (Ok(recorded), AfterPass::Check) => recorded,
            (_, AfterPass::GiveUp(Some(why))) => return Err(CaptureError::Failed(why.into())),
            (Err(PassError::Window(e) | PassError::Other(e)), _) => return Err(CaptureError::Failed(e)),
            (Ok(_), next) => unreachable!("a pass that held goes on to {next:?} only by the worst pass of all"),
        };
        let mut g = RegionGraphs { entry, recorded };
        if !g.is_hardware() && !self.core.allow_software {
            return Err(CaptureError::Failed(crate::capture::NO_HARDWARE_GRAPH.into()));
        }
        // The check: one replay from the saved state on this batch against the warm-up runs.
        // The last two warm-up runs (or the only one) are the check's eager references.
        let (reference, again) = match &figures[..] {
            [.., a, b] => (a.clone(), Some(b.pair())),
            [a] => (a.clone(), None),
            [] => unreachable!("at least one warm-up run"),
        };
        let checked = self.replay_on(&mut g).map_err(CaptureError::Failed).and_then(|out| {
            let replayed = self.measure(&out, &writers, &saved);
            tracing::debug!("cuda_graph: the check by part, eager -> replayed: {}", self.by_part(&reference, &replayed));
            if tracing::enabled!(tracing::Level::DEBUG) {
                let replayed_state = snapshot(&writers);
                tracing::debug!(
                    "cuda_graph: the writers' state moved, summed on the host, eager: {}; replayed: {}",
                    apart_on_host(&writers, &after_eager, &saved),
                    apart_on_host(&writers, &replayed_state, &saved)
                );
            }
            let by_part = |e: String| {
                let apart = self.furthest_apart(&writers, &after_eager, &saved);
                format!("{e}; by part, eager -> replayed: {}; furthest apart: {apart}", self.by_part(&reference, &replayed))
            };
            agree(reference.pair(), again, replayed.pair(), "step's result").map_err(|e| e.map(by_part)).map(|()| out)
        });
        let _ = self.core.device.sync();
        match checked {
            Ok(out) => {
                self.before = Some(saved);
                Ok((g, Some(Ok(out))))
            }
            Err(e) => {
                restore(&writers, &saved);
                Err(e)
            }
        }
    }

    fn replay(&mut self, g: &mut RegionGraphs) -> Result<Result<Board, String>, String> {
        self.replay_on(g).map(Ok)
    }

    fn discard(&mut self, g: RegionGraphs) {
        let _ = self.core.device.sync();
        if let Some(before) = self.before.take() {
            restore(&self.writers(), &before);
        }
        drop(g);
    }
}

/// The most two eager runs of the capture batch may differ on the loss, relative.
const EAGER_LOSS_SPREAD_MAX: f64 = 1e-2;
/// The most two eager runs of the capture batch may differ on the signature, relative (atomic
/// reductions moved it by up to ~1% on the GPU).
const EAGER_SIGNATURE_SPREAD_MAX: f64 = 5e-2;

/// Whether a replay agrees with eager: `eager` and `again` are two eager runs of the same step
/// from the same state, `replayed` the graph's, each as (loss, signature). The tolerances (1e-3
/// on the loss, 1e-2 on the signature) widen to four times the spread of the two eager runs, so
/// kernels that are not deterministic (atomic split-K reductions in bf16) pass while a graph
/// that reads or writes the wrong buffers does not. With one eager run (`again` `None`) a
/// finite disagreement is [`CaptureError::Unsure`]: the spread that could explain it is
/// unmeasured. Gradients that overflow in both eager runs (fp16 with a loss scale too large for
/// this batch, which the scaler answers by skipping the step) agree with a replay whose
/// gradients overflow too. A region without the loss compares the signature alone. Two eager
/// runs further apart than [`EAGER_LOSS_SPREAD_MAX`] or [`EAGER_SIGNATURE_SPREAD_MAX`] are no
/// reference: the check fails.
pub fn agree(eager: (f64, f64), again: Option<(f64, f64)>, replayed: (f64, f64), what: &str) -> Result<(), CaptureError> {
    // With one eager run its spread is unknown: the tolerances stay at their floors.
    let second = |v: f64| match again {
        Some(_) => format!("a second eager run gave {v:.6e}"),
        None => "one eager run, its spread unmeasured".to_string(),
    };
    let doubt = |e: String| {
        let losses = (eager.0.is_nan() && replayed.0.is_nan()) || (eager.0.is_finite() && replayed.0.is_finite());
        let finite = losses && eager.1.is_finite() && replayed.1.is_finite();
        if again.is_none() && finite { CaptureError::Unsure(e) } else { CaptureError::Failed(e) }
    };
    let again = again.unwrap_or(eager);
    let spread = |a: f64, b: f64| (a - b).abs() / a.abs().max(1e-12);
    let tol_loss = 1e-3f64.max(4.0 * spread(eager.0, again.0));
    let tol_sig = 1e-2f64.max(4.0 * spread(eager.1, again.1));
    let overflowed = !eager.1.is_finite() && !again.1.is_finite();
    let no_loss = eager.0.is_nan() && again.0.is_nan() && replayed.0.is_nan();
    // Two eager runs of the same batch from the same state further apart than the order of
    // atomic additions explains are no reference: which one the replay matches says nothing.
    // (MobileNetV4-s on an H100: the first warm-ups moved AdamW's state 8.079e1, the later ones
    // 3.187e1, the CPU 3.31e1; the replay matched the first, widening the tolerance to 240%.)
    let apart = [("loss", eager.0, again.0, EAGER_LOSS_SPREAD_MAX), (what, eager.1, again.1, EAGER_SIGNATURE_SPREAD_MAX)];
    if let Some((name, a, b, _)) = apart.into_iter().find(|&(_, a, b, max)| a.is_finite() && b.is_finite() && spread(a, b) > max) {
        return Err(CaptureError::Failed(format!(
            "two eager runs of the capture batch disagree ({name} {a:.6e} against {b:.6e}): the step is not reproducible eagerly, so the replay has no reference"
        )));
    }
    if !no_loss && !(spread(eager.0, replayed.0) <= tol_loss) {
        Err(doubt(format!(
            "the replayed loss {} differs from eager {} on the capture batch (tolerance {tol_loss:.1e}; {})",
            replayed.0,
            eager.0,
            second(again.0)
        )))
    } else if overflowed {
        if replayed.1.is_finite() {
            Err(CaptureError::Failed(format!(
                "the replayed {what} (sum of squares {:.6e}) is finite where both eager runs overflowed ({} and {})",
                replayed.1, eager.1, again.1
            )))
        } else {
            Ok(())
        }
    } else if !(spread(eager.1, replayed.1) <= tol_sig) {
        Err(doubt(format!(
            "the replayed {what} (sum of squares {:.6e}) differs from eager ({:.6e}) on the capture batch (tolerance {tol_sig:.1e}; {})",
            replayed.1,
            eager.1,
            second(again.1)
        )))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_agrees_within_the_spread_of_eager() {
        // Deterministic kernels: the H200's two-graph gradients 1.6% off fail, 0.5% passes.
        assert!(agree((17.1, 2.385e5), Some((17.1, 2.385e5)), (17.1, 2.424e5), "gradient").unwrap_err().to_string().contains("gradient"));
        assert!(agree((17.1, 2.385e5), Some((17.1, 2.385e5)), (17.1, 2.397e5), "gradient").is_ok());
        // One eager reference: the floors; a finite disagreement is unsure (the spread that could
        // explain it unmeasured), a NaN one fails.
        assert!(agree((17.1, 2.385e5), None, (17.1, 2.397e5), "gradient").is_ok());
        let unsure = agree((17.1, 2.385e5), None, (17.1, 2.424e5), "gradient").unwrap_err();
        assert!(matches!(&unsure, CaptureError::Unsure(e) if e.contains("one eager run")), "{unsure}");
        assert!(matches!(agree((17.1, 2.385e5), None, (17.2, 2.385e5), "gradient"), Err(CaptureError::Unsure(_))));
        assert!(matches!(agree((17.1, 2.385e5), None, (17.1, f64::NAN), "gradient"), Err(CaptureError::Failed(_))));
        assert!(matches!(agree((17.1, 2.385e5), None, (f64::NAN, 2.385e5), "gradient"), Err(CaptureError::Failed(_))));
        assert!(matches!(agree((f64::INFINITY, 2.385e5), None, (f64::INFINITY, 2.385e5), "gradient"), Err(CaptureError::Failed(_))));
        assert!(matches!(agree((f64::NAN, 2.385e5), None, (f64::NAN, 2.6e5), "step"), Err(CaptureError::Unsure(_))));
        // Two references: a disagreement beyond their spread fails.
        assert!(matches!(agree((17.1, 2.385e5), Some((17.1, 2.385e5)), (17.1, 2.424e5), "gradient"), Err(CaptureError::Failed(_))));
        // Eager runs 1% apart (atomic reductions): 1.6% is within four times that spread.
        assert!(agree((17.1, 2.385e5), Some((17.1, 2.409e5)), (17.1, 2.424e5), "gradient").is_ok());
        // Eager runs far apart are no reference, whichever the replay matches.
        let err = agree((17.1, 8.079e1), Some((17.1, 3.187e1)), (17.1, 8.079e1), "step's result").unwrap_err();
        assert!(matches!(&err, CaptureError::Failed(e) if e.contains("two eager runs")), "{err}");
        assert!(matches!(agree((17.1, 2.0), Some((17.5, 2.0)), (17.1, 2.0), "step"), Err(CaptureError::Failed(_))));
        // A graph reading never-written memory (the H200's first whole-step capture).
        let err = agree((18215.2, 1.0), Some((18215.2, 1.0)), (17.15, 1.0), "step").unwrap_err().to_string();
        assert!(err.contains("replayed loss 17.15"), "{err}");
        // NaN never agrees.
        assert!(agree((17.1, 1.0), Some((17.1, 1.0)), (f64::NAN, 1.0), "gradient").is_err());
        assert!(agree((17.1, 1.0), Some((17.1, 1.0)), (17.1, f64::NAN), "gradient").is_err());
        // fp16 at a loss scale this batch overflows: eager and replay overflow alike (the scaler
        // skips the step in both), which agrees; a finite replay against overflowing eager does not.
        assert!(agree((17.1, f64::INFINITY), Some((17.1, f64::NAN)), (17.1, f64::INFINITY), "gradient").is_ok());
        assert!(agree((17.1, f64::INFINITY), Some((17.1, f64::INFINITY)), (17.1, 2.4e5), "gradient").unwrap_err().to_string().contains("finite"));
        // One eager run overflowing and the other not is no overflow: NaN spread, refused.
        assert!(agree((17.1, f64::INFINITY), Some((17.1, 2.4e5)), (17.1, 2.4e5), "gradient").is_err());
        // A region without the loss (the update alone) compares what it moved.
        assert!(agree((f64::NAN, 3.0), Some((f64::NAN, 3.0)), (f64::NAN, 3.0), "step").is_ok());
        assert!(agree((f64::NAN, 3.0), Some((f64::NAN, 3.0)), (f64::NAN, 4.0), "step").is_err());
    }

    /// Replicas go by the worst pass of all: a refusal anywhere is a second pass everywhere, a
    /// second refusal or a failure anywhere gives up everywhere, each saying why.
    #[test]
    fn every_replica_passes_again_or_gives_up_with_the_others() {
        use Verdict::{Captured, Failed, Unsure};
        assert_eq!(after_pass(Captured, Captured, false), AfterPass::Check);
        assert_eq!(after_pass(Captured, Captured, true), AfterPass::Check);
        // Refused here or on another GPU: everyone passes once more.
        assert_eq!(after_pass(Unsure, Unsure, false), AfterPass::PassAgain);
        assert_eq!(after_pass(Captured, Unsure, false), AfterPass::PassAgain);
        // Refused again: this replica's refusal is its reason; one whose pass held names the other's.
        assert_eq!(after_pass(Unsure, Unsure, true), AfterPass::GiveUp(None));
        assert!(matches!(after_pass(Captured, Unsure, true), AfterPass::GiveUp(Some(why)) if why.contains("refused twice")));
        // A failure anywhere ends it, on the first pass already.
        for retried in [false, true] {
            assert_eq!(after_pass(Failed, Failed, retried), AfterPass::GiveUp(None));
            assert!(matches!(after_pass(Captured, Failed, retried), AfterPass::GiveUp(Some(why)) if why.contains("another GPU's capture pass failed")));
            assert!(matches!(after_pass(Unsure, Failed, retried), AfterPass::GiveUp(Some(why)) if why.contains("failed")));
        }
    }
}
