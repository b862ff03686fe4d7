//! What every run of the step reads: the compiled program and its stages ([`Core`]), one item
//! run with its inputs, outputs and tape ([`Core::run_item`]), and how it runs ([`Mode`]). The
//! executor ([`super::exec`]) and the region's capture ([`super::record`]) both run items
//! through it.

use std::cell::RefCell;
use std::ops::Range;
use std::rc::Rc;

use burn::tensor::{Device, FloatDType};
use libreyolo_stages::stage::{Board, Io, Slot, Stage, StepInfo, Tape, Value};

use super::program::{Program, StageRef};
use crate::capture::ShapeKey;
use crate::dag::StepDag;

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
    pub(super) phases: Vec<String>,
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
        self.first_items(range).into_iter().map(|i| self.stage(self.program.items[i].stage).clone()).collect()
    }

    /// The names of [`writers`](Self::writers)' stages, in the same order: each by the phase of
    /// its first item in `range`.
    pub fn writer_names(&self, range: Range<usize>) -> Vec<String> {
        self.first_items(range).into_iter().map(|i| self.phases[i].clone()).collect()
    }

    /// The first item of each stage that runs in `range`, in order.
    fn first_items(&self, range: Range<usize>) -> Vec<usize> {
        let mut seen: Vec<StageRef> = vec![];
        range
            .filter(|&i| {
                let s = self.program.items[i].stage;
                let first = !seen.contains(&s);
                if first {
                    seen.push(s);
                }
                first
            })
            .collect()
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
