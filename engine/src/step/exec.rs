//! Runs a [`Program`]: each step the items before the region and after it eagerly, and the region
//! through the capture manager ([`crate::capture::CaptureManager`]): eager until its input
//! shape reaches the threshold, then captured ([`super::record`]) and replayed.

use std::cell::RefCell;
use std::ops::Range;
use std::rc::Rc;

use burn::tensor::{Device, FloatDType};
use libreyolo_stages::data::Batch;
use libreyolo_stages::stage::BATCH_SLOT;
use libreyolo_stages::stage::{Board, Io, LossTerms, Slot, Stage, StepInfo, Tape, Value};

use super::program::{Program, StageRef};
use super::record::RegionGraphs;
use crate::capture::{CaptureManager, ShapeKey};
use crate::dag::StepDag;

/// Where the executor reports what it runs (the profiler's probes).
pub trait Probe {
    fn enter(&mut self, phase: &str);
    fn exit(&mut self);
    /// The step's region was a graph replay.
    fn replayed(&mut self) {}
}

/// No probes.
pub struct NoProbe;

impl Probe for NoProbe {
    fn enter(&mut self, _: &str) {}
    fn exit(&mut self) {}
}

/// The tapes of one run of the step: one per part of its autodiff.
pub struct Tapes {
    parts: Vec<RefCell<Tape>>,
    none: RefCell<Tape>,
}

impl Tapes {
    pub fn new(parts: usize) -> Self {
        Self { parts: (0..parts).map(|_| RefCell::default()).collect(), none: RefCell::default() }
    }
}

/// How an item runs.
#[derive(Debug, Clone, Copy)]
pub struct Mode {
    /// Inside a captured segment (a graph records it, or a software replay re-runs it), or on
    /// its code path outside one (the region's eager runs, warm-ups and dry runs).
    pub in_graph: bool,
    /// Inside a capture window whose writes must stay in their buffers: a hardware one, or a
    /// software one (the CPU tests), which keeps the hardware graph's rules so that a marking
    /// a GPU would refuse is refused on the CPU too.
    pub hardware: bool,
}

/// The program and its stages: what every run of the step reads.
pub struct Core {
    pub program: Program,
    /// The DAG's stages by index, then `grad.sync`.
    pub stages: Vec<Rc<dyn Stage>>,
    pub device: Device,
    /// The forward's compute dtype (part of a graph's key).
    pub compute: Option<FloatDType>,
    /// Software graphs are acceptable (`LIBREYOLO_CAPTURE_SOFTWARE`: the CPU tests).
    pub allow_software: bool,
    /// Stage name of each item, for probes.
    phases: Vec<String>,
}

impl Core {
    pub fn new(program: Program, dag: &StepDag, stages: Vec<Rc<dyn Stage>>, device: Device, compute: Option<FloatDType>, allow_software: bool) -> Self {
        let phases = program
            .items
            .iter()
            .map(|item| match item.stage {
                StageRef::Dag(s) => dag.stages[s].name.clone(),
                StageRef::Sync => "grad.sync".into(),
            })
            .collect();
        Self { program, stages, device, compute, allow_software, phases }
    }

    pub fn stage(&self, s: StageRef) -> &Rc<dyn Stage> {
        match s {
            StageRef::Dag(i) => &self.stages[i],
            StageRef::Sync => self.stages.last().expect("grad.sync is built"),
        }
    }

    /// Runs item `i` on `board`: its differentiable inputs from another part become leaves of
    /// its part's tape first, and its outputs another part reads go on the tape after.
    pub fn run_item(&self, i: usize, board: &mut Board, tapes: &Tapes, mode: Mode, refused: &RefCell<Option<String>>, step: StepInfo) -> anyhow::Result<()> {
        let item = &self.program.items[i];
        let tape = item.piece.map_or(&tapes.none, |p| &tapes.parts[p]);
        for &slot in &item.leaves {
            let value = board.get(slot).cloned().ok_or_else(|| anyhow::anyhow!("`{}` reads a value no stage wrote", self.program.item_name(i)))?;
            let leaves = {
                let mut t = tape.borrow_mut();
                match t.leaves.iter().find(|(s, _)| *s == slot) {
                    Some((_, l)) => l.clone(),
                    None => {
                        let l: Vec<_> = value.differentiable().iter().map(|x| x.leaf()).collect();
                        t.leaves.push((slot, l.clone()));
                        l
                    }
                }
            };
            board.put(slot, value.with_differentiable(leaves));
        }
        let mut io = Io {
            board,
            inputs: &item.inputs,
            outputs: &item.outputs,
            part: &item.part,
            tape,
            grad_slots: &item.grad_slots,
            in_graph: mode.in_graph,
            hardware: mode.hardware,
            refused,
            step,
        };
        self.stage(item.stage).run(&mut io).map_err(|e| e.context(format!("stage `{}`", self.program.item_name(i))))?;
        for &slot in &item.tape_outputs {
            let tensors = board.get(slot).map(Value::differentiable).unwrap_or_default();
            tape.borrow_mut().outputs.push((slot, tensors));
        }
        Ok(())
    }

    /// Runs the items of `range` in order; `drain`: the device drained where a segment ends (as
    /// a capture window drains it, so the lazy fusion backend fuses the same kernels).
    pub fn run_items(&self, range: Range<usize>, board: &mut Board, tapes: &Tapes, in_region: bool, drain: bool, step: StepInfo) -> anyhow::Result<()> {
        let refused = RefCell::new(None);
        for i in range {
            let mode = Mode { in_graph: in_region && self.program.items[i].graph, hardware: false };
            self.run_item(i, board, tapes, mode, &refused, step)?;
            if drain && self.program.segments.iter().any(|s| s.items.end == i + 1) {
                let _ = self.device.sync();
            }
        }
        Ok(())
    }

    /// The items of the region, when there is one.
    pub fn region_items(&self) -> Option<Range<usize>> {
        let region = self.program.region.clone()?;
        Some(self.program.segments[region.start].items.start..self.program.segments[region.end - 1].items.end)
    }

    /// The stages whose state the items of `range` write, each once, in item order.
    pub fn writers(&self, range: Range<usize>) -> Vec<Rc<dyn Stage>> {
        let mut seen: Vec<StageRef> = vec![];
        for i in range {
            let s = self.program.items[i].stage;
            if !seen.contains(&s) {
                seen.push(s);
            }
        }
        seen.into_iter().map(|s| self.stage(s).clone()).collect()
    }

    /// The graph key of a run entering the region with `board`: the dims of the first tensor it
    /// reads (the images), the other inputs' dims, and the compute dtype.
    pub fn key(&self, board: &Board, entry: &[Slot]) -> ShapeKey {
        let mut dims: Vec<Vec<usize>> = entry.iter().filter_map(|&s| board.get(s)).flat_map(|v| v.tensors()).map(|t| t.dims()).collect();
        let first = if dims.is_empty() { vec![] } else { dims.remove(0) };
        let dtype = self.compute.map(|d| format!("{d:?}")).unwrap_or_else(|| "F32".into());
        ShapeKey { dims: first, dtype, others: dims }
    }

    /// The slots the region reads from before it (its stable inputs when captured).
    pub fn region_entry(&self) -> Vec<Slot> {
        let Some(items) = self.region_items() else { return vec![] };
        let mut written: Vec<Slot> = vec![];
        let mut entry: Vec<Slot> = vec![];
        for item in &self.program.items[items] {
            for &r in &item.reads {
                if !written.contains(&r) && !entry.contains(&r) {
                    entry.push(r);
                }
            }
            written.extend(item.writes.iter().copied());
        }
        entry
    }
}

/// What a step hands back.
pub struct StepOut {
    /// The loss the backward differentiated (on the device).
    pub loss: Option<LossTerms>,
    /// The region ran as a graph replay.
    pub replayed: bool,
}

/// Runs the step, capturing its region.
pub struct Executor {
    pub core: Core,
    /// The region's capture manager (absent when nothing is captured).
    pub graphs: Option<CaptureManager<RegionGraphs>>,
    entry: Vec<Slot>,
    /// The first run of each input shape is dry-run first ([`crate::precompile`]).
    pub precompile: Option<(crate::precompile::Precompile, String)>,
}

impl Executor {
    /// `graphs`: the region's capture manager, `None` to run it eager.
    pub fn new(core: Core, graphs: Option<CaptureManager<RegionGraphs>>) -> Self {
        let entry = core.region_entry();
        let graphs = graphs.filter(|_| core.program.region.is_some());
        Self { core, graphs, entry, precompile: None }
    }

    /// One step (a micro-batch) on `batch`.
    pub fn step(&mut self, batch: Batch, step: StepInfo, probe: &mut dyn Probe) -> anyhow::Result<StepOut> {
        let core = &self.core;
        for s in &core.stages {
            s.prepare(&step);
        }
        let mut board = Board::new(core.program.slots);
        board.put(BATCH_SLOT, Value::Batch(Rc::new(batch)));
        let tapes = Tapes::new(core.program.pieces);
        let n = core.program.items.len();
        let region = core.region_items().unwrap_or(n..n);
        let span = match self.graphs {
            Some(_) => region.clone(),
            None => core.program.span_items(),
        };
        let refused = RefCell::new(None);
        let mut replayed = false;
        let mut i = 0;
        let mut first_run = None;
        while i < n {
            if i == span.start && span.start < span.end {
                first_run = self.precompile_first_run(&board, span.clone(), step);
            }
            if i == region.start
                && let Some(graphs) = self.graphs.as_mut()
            {
                probe.enter("captured");
                let key = self.core.key(&board, &self.entry);
                let before = graphs.replays();
                let mut ops = super::record::RegionOps { core: &self.core, board: board.clone(), entry: &self.entry, step };
                board = graphs.run(&key, &mut ops).map_err(|e| anyhow::anyhow!("{e}"))?;
                replayed = graphs.replays() > before;
                probe.exit();
                i = region.end;
                continue;
            }
            probe.enter(&self.core.phases[i]);
            let mode = Mode { in_graph: false, hardware: false };
            self.core.run_item(i, &mut board, &tapes, mode, &refused, step)?;
            probe.exit();
            i += 1;
        }
        if let Some((name, before)) = first_run
            && let Some((p, _)) = self.precompile.as_mut()
        {
            p.record(&name, crate::precompile::compiled_so_far() - before);
        }
        for s in &self.core.stages {
            s.finish(&step);
        }
        if replayed {
            probe.replayed();
        }
        let loss = match self.core.program.loss.and_then(|s| board.take(s)) {
            Some(Value::Loss(l)) => Some(l),
            _ => None,
        };
        Ok(StepOut { loss, replayed })
    }

    /// On the first run of an input shape: a dry run of `span` first, where it is worth it,
    /// returning the step's name and the kernels compiled before it.
    fn precompile_first_run(&mut self, board: &Board, span: Range<usize>, step: StepInfo) -> Option<(String, u64)> {
        let (p, label) = self.precompile.as_mut()?;
        let key = self.core.key(board, &self.core.program.inputs_of(span.clone()));
        let dims: [usize; 4] = key.dims.clone().try_into().ok()?;
        let captured = self.graphs.is_some();
        let kind = if captured { "captured" } else { "eager" };
        let what = if captured { self.core.program.describe_region() } else { "eager".to_string() };
        let (name, mut dry) = p.first_run(kind, dims, || format!("{label} {what} {dims:?} {}", key.dtype))?;
        if dry && let Some(stage) = &self.core.program.span_reads_host {
            tracing::info!("{kind} step on {dims:?}: no dry run ahead of its first run (`{stage}` reads the host, which a dry run leaves unwritten)");
            dry = false;
        }
        let before = crate::precompile::compiled_so_far();
        if dry {
            let writers = self.core.writers(span.clone());
            let saved = super::record::snapshot(&writers);
            crate::precompile::dry_run(&self.core.device, &format!("{kind} step on {dims:?}"), || {
                let mut b = board.clone();
                let tapes = Tapes::new(self.core.program.pieces);
                // The captured code path (nothing read back), as in a graph.
                let refused = RefCell::new(None);
                for i in span.clone() {
                    let _ = self.core.run_item(i, &mut b, &tapes, Mode { in_graph: true, hardware: false }, &refused, step);
                }
                b
            });
            super::record::restore(&writers, &saved);
        }
        Some((name, before))
    }
}

impl Program {
    /// The items of [`Program::span`] as a range over items.
    pub fn span_items(&self) -> Range<usize> {
        self.span_range.clone()
    }

    /// The slots the items of `range` read from before it.
    pub fn inputs_of(&self, range: Range<usize>) -> Vec<Slot> {
        let mut written: Vec<Slot> = vec![];
        let mut out: Vec<Slot> = vec![];
        for item in &self.items[range] {
            for &r in &item.reads {
                if !written.contains(&r) && !out.contains(&r) {
                    out.push(r);
                }
            }
            written.extend(item.writes.iter().copied());
        }
        out
    }
}
