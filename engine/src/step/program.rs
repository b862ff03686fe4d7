//! The step program: the manifest's stage DAG compiled into the items the executor runs, grouped
//! into segments that run eagerly or as captured graphs.
//!
//! * Every stage is one item, in DAG order, except a forward cut inside the network
//!   (`until = "LAYER"`), which is two (the layers up to the cut, captured with the stage; the
//!   rest eager), and the backward, which becomes one item per *part* of the step's autodiff:
//!   a maximal run of differentiable items that run the same way (one graph, or eager). Each
//!   part's backward runs the way its part ran — a graph's tape exists only in its capture —
//!   from the last part to the first, passing upstream gradients between them. That is the
//!   autodiff seam: a captured forward, an eager loss and a captured backward (LibreYOLO's
//!   contract) is one case of it; a captured loss between an eager forward and backward another.
//! * Consecutive captured items form one graph; a graph's backward forced by a captured part
//!   (the `network.backward` stage not marked) is a graph of its own.
//! * A stage that cannot be captured in this run (a collective under data parallelism) runs
//!   eager, with a note; accumulation over micro-batches and the gradient all-reduce add an eager
//!   `grad.sync` after the backward.
//!
//! The executor ([`super::exec`]) runs the items before the first graph and after the last one
//! eagerly every step, and the *region* between them through the capture manager: captured per
//! input shape, replayed, or eager.

use std::ops::Range;

use libreyolo_stages::stage::BATCH_SLOT;
use libreyolo_stages::stage::{Autodiff, Parallel, Part, Slot, Ty};

use crate::dag::StepDag;

/// What an item runs: a stage of the DAG, or the engine's gradient synchronisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageRef {
    Dag(usize),
    Sync,
}

#[derive(Debug, Clone)]
pub struct Item {
    pub stage: StageRef,
    pub part: Part,
    /// Runs inside a graph when the region is captured.
    pub graph: bool,
    /// A graph only because its part of the autodiff was captured (a backward the manifest
    /// left eager): it forms a graph of its own.
    pub forced: bool,
    /// Slots of the stage's input and output ports, in port order.
    pub inputs: Vec<Slot>,
    pub outputs: Vec<Slot>,
    /// Every slot the item reads (its inputs, and for a backward part the upstream gradients and
    /// the gradients of later parts) and writes.
    pub reads: Vec<Slot>,
    pub writes: Vec<Slot>,
    /// Its part of the step's autodiff (differentiable items and backward parts).
    pub piece: Option<usize>,
    /// Differentiable inputs made in another part: they become leaves of this part's tape.
    pub leaves: Vec<Slot>,
    /// Differentiable outputs another part reads (or the backward differentiates): kept on the
    /// tape for this part's backward.
    pub tape_outputs: Vec<Slot>,
    /// For a backward part: (value slot, gradient slot) of the part's leaves and tape outputs.
    pub grad_slots: Vec<(Slot, Slot)>,
}

/// Consecutive items run the same way.
#[derive(Debug, Clone)]
pub struct Segment {
    pub graph: bool,
    pub items: Range<usize>,
    /// Slots read inside and written before it (what a graph reads from stable buffers).
    pub inputs: Vec<Slot>,
    /// Slots written inside and read after it, the step's loss included (a graph's outputs).
    pub outputs: Vec<Slot>,
}

#[derive(Debug, Clone)]
pub struct Program {
    pub items: Vec<Item>,
    pub segments: Vec<Segment>,
    /// The segments from the first graph to the last: run through the capture manager.
    pub region: Option<Range<usize>>,
    pub slots: usize,
    pub pieces: usize,
    /// The loss the backward differentiates (what the trainer logs).
    pub loss: Option<Slot>,
    /// The items a dry run compiles ahead without a region: from the first to the last item of
    /// a stage kind that could be captured (the device work of the step).
    pub(crate) span_range: Range<usize>,
    /// An item within the span whose stage reads the host (a kind that cannot be captured, such
    /// as a loss that matches on the host): a dry run, which computes nothing, would hand it
    /// garbage, so the span is not dry-run.
    pub(crate) span_reads_host: Option<String>,
    /// Capture was asked for and nothing is captured: why.
    pub why_eager: Option<String>,
    /// Stages marked `capture = true` that run eager in this run, with the reason.
    pub notes: Vec<String>,
    names: Vec<String>,
}

/// What a run allows to capture.
#[derive(Debug, Clone)]
pub struct Options {
    /// `capture.enabled` (`cuda_graph`).
    pub capture: bool,
    /// Why nothing can be captured on this device or in this run, if so.
    pub refused: Option<String>,
    pub parallel: Parallel,
    /// Micro-batches per optimizer step.
    pub accumulate: usize,
}

impl Options {
    /// Every stage eager.
    pub fn eager() -> Self {
        Self { capture: false, refused: None, parallel: Parallel { world: 1, sync_bn: false }, accumulate: 1 }
    }
}

impl Program {
    /// Compiles `dag` for a run with `opts`.
    pub fn compile(dag: &StepDag, opts: &Options) -> Program {
        let mut c = Compiler::new(dag, opts);
        c.items();
        c.pieces_and_backward();
        c.into_program()
    }

    /// A short name of item `i` for logs and the profiler: its stage's name, with its part.
    pub fn item_name(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// The items of segment `s`, by name.
    pub fn segment_names(&self, s: usize) -> Vec<&str> {
        self.segments[s].items.clone().map(|i| self.item_name(i)).collect()
    }

    /// The graphs of the region, e.g. `[forward] loss backward(loss) [backward(forward)]`: each
    /// graph's items in brackets, eager items between them bare.
    pub fn describe_region(&self) -> String {
        let Some(region) = &self.region else { return "nothing".into() };
        let parts: Vec<String> = region
            .clone()
            .map(|s| {
                let names = self.segment_names(s).join(", ");
                if self.segments[s].graph { format!("[{names}]") } else { names }
            })
            .collect();
        parts.join(" ")
    }

    /// How many graphs the region records.
    pub fn graphs(&self) -> usize {
        self.region.clone().map_or(0, |r| r.filter(|&s| self.segments[s].graph).count())
    }
}

struct Compiler<'a> {
    dag: &'a StepDag,
    opts: &'a Options,
    /// `(stage, output port)` -> slot.
    out_slots: Vec<Vec<Slot>>,
    slots: usize,
    items: Vec<Item>,
    names: Vec<String>,
    /// Where the backward's items go, and its stage.
    backward: Option<(usize, usize)>,
    notes: Vec<String>,
    pieces: usize,
    loss: Option<Slot>,
}

impl<'a> Compiler<'a> {
    fn new(dag: &'a StepDag, opts: &'a Options) -> Self {
        let mut slots = BATCH_SLOT + 1;
        let out_slots = dag
            .stages
            .iter()
            .map(|s| {
                s.kind
                    .outputs
                    .iter()
                    .map(|_| {
                        slots += 1;
                        slots - 1
                    })
                    .collect()
            })
            .collect();
        Self { dag, opts, out_slots, slots, items: vec![], names: vec![], backward: None, notes: vec![], pieces: 0, loss: None }
    }

    fn slot(&mut self) -> Slot {
        self.slots += 1;
        self.slots - 1
    }

    /// Whether stage `i` runs in a graph in this run; a refusal is noted.
    fn captured(&mut self, i: usize) -> bool {
        let stage = &self.dag.stages[i];
        if !(self.opts.capture && stage.capture) || self.opts.refused.is_some() {
            return false;
        }
        match (stage.kind.collective)(&self.opts.parallel) {
            Some(why) if self.opts.parallel.world > 1 => {
                self.notes.push(format!("stage `{}` runs eager: {why}", stage.name));
                false
            }
            _ => true,
        }
    }

    fn push(&mut self, name: String, item: Item) {
        self.names.push(name);
        self.items.push(item);
    }

    fn item(stage: StageRef, part: Part, graph: bool, inputs: Vec<Slot>, outputs: Vec<Slot>) -> Item {
        Item {
            stage,
            part,
            graph,
            forced: false,
            reads: inputs.clone(),
            writes: outputs.clone(),
            inputs,
            outputs,
            piece: None,
            leaves: vec![],
            tape_outputs: vec![],
            grad_slots: vec![],
        }
    }

    /// One item per stage in DAG order (two for a forward cut inside the network); the
    /// backward's place is kept, and `grad.sync` follows it when the run needs it.
    fn items(&mut self) {
        for &i in &self.dag.order {
            let stage = &self.dag.stages[i];
            let inputs: Vec<Slot> = stage.inputs.iter().map(|v| self.out_slots[v.stage][v.port]).collect();
            let outputs = self.out_slots[i].clone();
            let graph = self.captured(i);
            let name = stage.name.clone();
            match (stage.kind.autodiff, &stage.until) {
                (Autodiff::Backward, _) => {
                    self.backward = Some((self.items.len(), i));
                    self.loss = Some(inputs[0]);
                    if self.opts.accumulate > 1 || self.opts.parallel.world > 1 {
                        let g = outputs[0];
                        self.push("grad.sync".into(), Self::item(StageRef::Sync, Part::Whole, false, vec![g], vec![g]));
                    }
                }
                (Autodiff::Forward, Some(layer)) => {
                    let crossing = self.slot();
                    // The layers up to the cut read the images; the rest reads what crosses the
                    // cut and the stage's other inputs (a head's labels).
                    let rest = [vec![crossing], inputs[1..].to_vec()].concat();
                    self.push(
                        format!("{name}(..{layer})"),
                        Self::item(StageRef::Dag(i), Part::Until(layer.clone()), graph, inputs[..1].to_vec(), vec![crossing]),
                    );
                    self.push(format!("{name}({layer}..)"), Self::item(StageRef::Dag(i), Part::From(layer.clone()), false, rest, outputs));
                }
                _ => self.push(name, Self::item(StageRef::Dag(i), Part::Whole, graph, inputs, outputs)),
            }
        }
    }

    /// The differentiable items that lead to the backward's loss, in order.
    fn differentiable(&self, end: usize) -> Vec<usize> {
        let Some(loss) = self.loss else { return vec![] };
        let mut needed = vec![loss];
        let mut out = vec![];
        for i in (0..end).rev() {
            let item = &self.items[i];
            let StageRef::Dag(s) = item.stage else { continue };
            let kind = self.dag.stages[s].kind;
            if !matches!(kind.autodiff, Autodiff::Forward | Autodiff::Through) || !item.outputs.iter().any(|o| needed.contains(o)) {
                continue;
            }
            out.push(i);
            let ports: Vec<Ty> = match item.part {
                Part::From(_) => std::iter::once(Ty::Activations).chain(kind.inputs[1..].iter().map(|p| p.ty)).collect(),
                _ => kind.inputs.iter().map(|p| p.ty).collect(),
            };
            needed.extend(item.inputs.iter().zip(ports).filter(|(_, ty)| ty.differentiable()).map(|(s, _)| *s));
        }
        out.reverse();
        out
    }

    /// Assigns the parts of the autodiff, places one backward item per part (last part first)
    /// and wires the leaves, tape outputs and gradient slots between them.
    fn pieces_and_backward(&mut self) {
        let Some((at, b)) = self.backward else { return };
        let chain = self.differentiable(at);
        // Parts: a new one where the way of running changes, or a graph is interrupted.
        let mut piece_of: Vec<Option<usize>> = vec![None; self.items.len()];
        let mut previous: Option<usize> = None;
        for &i in &chain {
            let same = previous.is_some_and(|p| {
                let (a, c) = (&self.items[p], &self.items[i]);
                a.graph == c.graph && (!a.graph || self.items[p..i].iter().all(|x| x.graph))
            });
            if !same {
                self.pieces += 1;
            }
            piece_of[i] = Some(self.pieces - 1);
            previous = Some(i);
        }
        let loss = self.loss.expect("a backward reads a loss");
        // Leaves and tape outputs: differentiable values crossing between parts.
        let producer = |slot: Slot, items: &[Item]| items.iter().position(|x| x.outputs.contains(&slot));
        let mut grad_of: Vec<(Slot, Slot)> = vec![];
        for &i in &chain {
            for k in 0..self.items[i].inputs.len() {
                let slot = self.items[i].inputs[k];
                let Some(p) = producer(slot, &self.items) else { continue };
                if piece_of[p].is_some() && piece_of[p] != piece_of[i] {
                    self.items[i].leaves.push(slot);
                    if !self.items[p].tape_outputs.contains(&slot) {
                        self.items[p].tape_outputs.push(slot);
                    }
                    if !grad_of.iter().any(|(v, _)| *v == slot) {
                        let g = self.slot();
                        grad_of.push((slot, g));
                    }
                }
            }
        }
        if let Some(p) = producer(loss, &self.items)
            && piece_of[p].is_some()
            && !self.items[p].tape_outputs.contains(&loss)
        {
            self.items[p].tape_outputs.push(loss);
        }
        for (i, p) in piece_of.iter().enumerate() {
            self.items[i].piece = *p;
        }
        // One backward item per part, last part first, where the stage stood.
        let stage = &self.dag.stages[b];
        let marked = self.opts.capture && stage.capture && self.opts.refused.is_none();
        let grads = self.out_slots[b][0];
        let name = stage.name.clone();
        let mut backward: Vec<(String, Item)> = vec![];
        for piece in (0..self.pieces).rev() {
            let members: Vec<usize> = chain.iter().copied().filter(|&i| piece_of[i] == Some(piece)).collect();
            let graph = self.items[members[0]].graph;
            if marked && !graph {
                self.notes.push(format!("the backward of {} runs eager: its forward ran eager, so it has no graph to differentiate", self.part_name(&members)));
            }
            let tape_outputs: Vec<Slot> = members.iter().flat_map(|&i| self.items[i].tape_outputs.clone()).collect();
            let leaves: Vec<Slot> = members.iter().flat_map(|&i| self.items[i].leaves.clone()).collect();
            let grad_slots: Vec<(Slot, Slot)> = grad_of.iter().copied().filter(|(v, _)| tape_outputs.contains(v) || leaves.contains(v)).collect();
            let mut item = Self::item(StageRef::Dag(b), Part::Backward { objective: tape_outputs.contains(&loss).then_some(loss) }, graph, vec![], vec![grads]);
            item.forced = graph && !marked;
            item.piece = Some(piece);
            item.reads = grad_slots.iter().filter(|(v, _)| tape_outputs.contains(v)).map(|(_, g)| *g).collect();
            if piece + 1 < self.pieces {
                item.reads.push(grads); // the gradients of the later parts, joined
            }
            item.writes = grad_slots.iter().filter(|(v, _)| leaves.contains(v)).map(|(_, g)| *g).chain([grads]).collect();
            item.grad_slots = grad_slots;
            backward.push((format!("{name}({})", self.part_name(&members)), item));
        }
        let (names, items): (Vec<String>, Vec<Item>) = backward.into_iter().unzip();
        self.names.splice(at..at, names);
        self.items.splice(at..at, items);
    }

    /// The stages of a part, e.g. `forward+loss`.
    fn part_name(&self, members: &[usize]) -> String {
        members.iter().map(|&i| self.names[i].as_str()).collect::<Vec<_>>().join("+")
    }

    fn into_program(self) -> Program {
        let mut segments: Vec<Segment> = vec![];
        for (i, item) in self.items.iter().enumerate() {
            let joins = segments.last().is_some_and(|s| {
                let last = &self.items[s.items.end - 1];
                s.graph == item.graph && !(item.graph && (item.forced || last.forced))
            });
            match segments.last_mut() {
                Some(s) if joins => s.items.end = i + 1,
                _ => segments.push(Segment { graph: item.graph, items: i..i + 1, inputs: vec![], outputs: vec![] }),
            }
        }
        for s in &mut segments {
            let inside = &self.items[s.items.clone()];
            let mut written: Vec<Slot> = vec![];
            for item in inside {
                for &r in &item.reads {
                    if !written.contains(&r) && !s.inputs.contains(&r) {
                        s.inputs.push(r);
                    }
                }
                written.extend(item.writes.iter().copied());
            }
            let after = &self.items[s.items.end..];
            for &w in &written {
                let read_later = after.iter().any(|x| x.reads.contains(&w)) || Some(w) == self.loss;
                if read_later && !s.outputs.contains(&w) {
                    s.outputs.push(w);
                }
            }
        }
        let first = segments.iter().position(|s| s.graph);
        let last = segments.iter().rposition(|s| s.graph);
        let region = first.zip(last).map(|(a, b)| a..b + 1);
        let why_eager = match (&region, self.opts.capture) {
            (Some(_), _) | (None, false) => None,
            (None, true) => Some(match &self.opts.refused {
                Some(why) => why.clone(),
                None if self.notes.is_empty() => "no stage is marked `capture = true`".into(),
                None => self.notes.join("; "),
            }),
        };
        let device = |item: &Item| match item.stage {
            StageRef::Dag(i) => self.dag.stages[i].kind.capturable(),
            StageRef::Sync => false,
        };
        let first = self.items.iter().position(device).unwrap_or(0);
        let last = self.items.iter().rposition(device).map_or(first, |i| i + 1).max(first);
        let span_reads_host = (first..last).find(|&i| !device(&self.items[i])).map(|i| self.names[i].clone());
        Program {
            items: self.items,
            segments,
            region,
            slots: self.slots,
            pieces: self.pieces,
            loss: self.loss,
            span_range: first..last,
            span_reads_host,
            why_eager,
            notes: self.notes,
            names: self.names,
        }
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
