//! Runs a [`Program`]: each step the items before the region and after it eagerly, and the region
//! through the capture manager ([`crate::capture::CaptureManager`]): eager until its input
//! shape reaches the threshold, then captured ([`super::record`]) and replayed.

use std::cell::RefCell;
use std::ops::Range;
use std::rc::Rc;

use libreyolo_stages::data::Batch;
use libreyolo_stages::stage::BATCH_SLOT;
use libreyolo_stages::stage::{Board, LossTerms, Slot, StepInfo, Value};

use super::core::{Core, Mode, Tapes};
use super::record::RegionGraphs;
use crate::capture::CaptureManager;

/// Where the executor reports what it runs (the profiler's probes).
pub trait Probe {
    fn enter(&mut self, phase: &str);
    fn exit(&mut self);
    /// The step's region was a graph replay: called inside its `captured` phase, before `exit`.
    fn replayed(&mut self) {}
}

/// No probes.
pub struct NoProbe;

impl Probe for NoProbe {
    fn enter(&mut self, _: &str) {}
    fn exit(&mut self) {}
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
                let mut ops = super::record::RegionOps::new(&self.core, board.clone(), &self.entry, step);
                board = graphs.run(&key, &mut ops).map_err(|e| anyhow::anyhow!("{e}"))?;
                replayed = graphs.replays() > before;
                if replayed {
                    // Inside the phase: the profiler gives the replay's kernels to it.
                    probe.replayed();
                }
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
