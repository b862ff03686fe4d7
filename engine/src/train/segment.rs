//! The captured segment of the training step: network forward, the sync-free loss and the
//! backward in one graph (the manifest marks `forward`, `loss` and `backward` capture = true),
//! or the whole step with the BatchNorm statistics, gradient clip, optimizer and EMA too, their
//! per-step scalars read from device buffers written before each replay, or LibreYOLO's
//! contract: forward and backward as two graphs with the loss eager between them, optionally
//! followed by the update as a third graph ([`two_graphs`](super::two_graphs)). Host
//! bookkeeping (counters, the schedule) stays outside the graphs.
//! The graph reads stable input buffers (refreshed in place before each replay) and the
//! parameters' own buffers (the optimizer, EMA and BatchNorm updates write them in place,
//! eager, after the replay); it returns the loss terms, the gradients and the BatchNorm batch
//! statistics, which are folded in eagerly, so the capture's warm-up runs change nothing.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use burn::tensor::{Bool, Device, Tensor};
use libreyolo_families::params::TensorMut;
use libreyolo_families::{BatchStats, Network, ParamId, ParamStore};
use libreyolo_stages::ema::{DecayScalars, Ema};
use libreyolo_stages::loss::{LossTerms, Yolo9Loss};
use libreyolo_stages::optim::{Optimizer, Scalars};

use super::Trainer;
use super::one_graph::OneGraph;
use super::precision::LossScale;
use super::step::{ForwardSpec, backward, forward, loss};
use super::two_graphs::TwoGraphs;
use crate::capture::{GraphOps, ShapeKey, refresh, stable_copy, write_into};

/// Environment variable: accept burn's software graphs (replay re-runs the closure) on a
/// backend without hardware graphs, to exercise the capture path on the CPU (tests).
pub const SOFTWARE_ENV: &str = "LIBREYOLO_CAPTURE_SOFTWARE";

/// What the segment produces.
#[derive(Clone)]
pub struct SegmentOut {
    pub terms: LossTerms,
    pub grads: Vec<(ParamId, Tensor<1>)>,
    pub stats: Vec<BatchStats>,
}

/// The rest of a whole captured step: BatchNorm running statistics, gradient clip, optimizer and
/// EMA, all in place on stable buffers, with this step's scalars read from device buffers.
#[derive(Clone)]
pub struct StepTail {
    pub optim: Rc<RefCell<Box<dyn Optimizer>>>,
    pub scalars: Rc<RefCell<Scalars>>,
    pub ema: Option<(Rc<RefCell<Ema>>, Rc<RefCell<DecayScalars>>)>,
    pub clip_max_norm: f64,
    /// Check that the step owns every stored tensor it updates (hardware graphs only: the CPU
    /// backend never reports a buffer as uniquely owned).
    pub require_unique: bool,
    /// The first stored tensor found shared by such a check.
    pub shared: Rc<Cell<Option<String>>>,
}

/// The name of the first stored tensor whose buffer is shared, if any: an in-place update of it
/// would land in a new buffer.
fn first_shared(params: &ParamStore) -> Option<String> {
    use libreyolo_families::Value;
    params.entries().iter().find_map(|e| {
        let unique = match &e.value {
            Value::Rank4(t) => t.can_mut(),
            Value::Rank1(t) => t.can_mut(),
            Value::Count(_) => true,
        };
        (!unique).then(|| e.name.clone())
    })
}

/// A data-parallel rank's gradient all-reduce (the mean over the replicas), run eagerly before
/// a captured update.
pub type Reduce = Rc<dyn Fn(Vec<(ParamId, Tensor<1>)>) -> Vec<(ParamId, Tensor<1>)>>;

/// Everything the segment reads besides its inputs.
#[derive(Clone)]
pub struct SegmentSpec {
    pub network: Rc<Network>,
    pub params: Rc<RefCell<ParamStore>>,
    pub forward: ForwardSpec,
    pub loss: Yolo9Loss,
    pub aux_weight: f64,
    /// Factor of the loss before backward (1 / the micro-batches of an accumulation window).
    pub factor: f64,
    /// The dynamic loss scale (fp16): the loss is multiplied by it on the device before the
    /// backward, and a captured update unscales and skips a non-finite step there.
    pub scaler: Option<Rc<RefCell<LossScale>>>,
    /// The whole step: the updates after backward too.
    pub tail: Option<StepTail>,
    /// LibreYOLO's contract: forward and backward as two graphs, the loss eager between.
    pub split: bool,
    /// With `split`, a seam inside the network after this layer: the graphs hold the layers
    /// up to it, the layers after it run eagerly with the loss (the forward stage's `until`).
    pub seam: Option<usize>,
    /// With the update captured in a data-parallel run: the gradient all-reduce before it.
    pub reduce: Option<Reduce>,
}

impl SegmentSpec {
    /// forward -> loss -> backward on `images` and `targets`, then the update when it is part
    /// of the segment.
    pub fn run(&self, images: Tensor<4>, targets: Tensor<3>) -> SegmentOut {
        self.run_drained(images, targets, false)
    }

    /// [`run`](Self::run); with `drain`, the device is drained between the parts of LibreYOLO's
    /// split as its graph windows drain it (the capture's warm-up, [`super::two_graphs::run_split`]).
    pub fn run_drained(&self, images: Tensor<4>, targets: Tensor<3>, drain: bool) -> SegmentOut {
        let mut out = if self.split {
            super::two_graphs::run_split(self, images, targets, drain)
        } else {
            let params = self.params.borrow();
            let (cx, maps) = forward(&self.network, &params, &self.forward, images);
            let strides = self.network.head().strides.clone();
            let terms = loss(&self.loss, self.aux_weight, &strides, maps, targets, self.forward.group());
            let grads = backward(&terms.total, self.factor, self.scaler.as_ref(), &cx);
            let stats = cx.take_batch_stats();
            // The context holds a handle on every stored tensor. Dropped before the update, so
            // the updates own the buffers and write them in place: inside a capture window an
            // update that cannot would record its result into a new buffer that the next
            // replay's forward never reads (seen on the H200: the store then held never-written
            // memory).
            drop(cx);
            SegmentOut { terms, grads, stats }
        };
        if let Some(tail) = &self.tail {
            if let Some(reduce) = &self.reduce {
                out.grads = reduce(std::mem::take(&mut out.grads));
            }
            self.update(tail, std::mem::take(&mut out.grads), &out.stats);
        }
        out
    }

    /// The update after the backward, in place on stable buffers: BatchNorm running statistics,
    /// gradient clip, optimizer and EMA, this step's scalars read from device buffers. With the
    /// dynamic loss scale, the gradients are unscaled and a step whose gradients are not finite
    /// leaves the parameters and the optimizer state as they were (`GradScaler.step`), decided
    /// on the device; the EMA updates either way, as LibreYOLO's does.
    pub fn update(&self, tail: &StepTail, mut grads: Vec<(ParamId, Tensor<1>)>, stats: &[BatchStats]) {
        let mut params = self.params.borrow_mut();
        if tail.require_unique
            && let Some(shared) = first_shared(&params)
        {
            tail.shared.replace(Some(shared));
        }
        if tail.require_unique
            && let Some(s) = &self.scaler
            && !s.borrow().owns_its_buffers()
        {
            tail.shared.replace(Some("the loss scale".into()));
        }
        params.fold_batch_stats(stats, libreyolo_families::blocks::batch_norm::MOMENTUM);
        let finite = self.scaler.as_ref().map(|s| s.borrow_mut().unscale(&mut grads));
        super::step::clip_global_norm(&mut grads, tail.clip_max_norm);
        let mut optim = tail.optim.borrow_mut();
        let kept = finite.as_ref().map(|_| save_all(updated_by_optimizer(&mut params, &mut **optim)));
        optim.step(&mut params, grads, &tail.scalars.borrow());
        if let (Some(finite), Some(kept)) = (finite, kept) {
            keep_unless(&finite, updated_by_optimizer(&mut params, &mut **optim), &kept);
        }
        drop(optim);
        if let Some((ema, decay)) = &tail.ema {
            ema.borrow_mut().update_device(&params, &decay.borrow());
        }
    }

    /// Compiles the kernels of a run on `images` and `targets` without running it
    /// ([`crate::precompile`]), and leaves the state as it was.
    fn precompile(&self, device: &Device, what: &str, images: Tensor<4>, targets: Tensor<3>) {
        let saved = self.snapshot();
        let dims = images.dims();
        crate::precompile::dry_run(device, &format!("{what} on {dims:?}"), || self.run(images, targets));
        self.restore(&saved);
    }

    /// A deep copy of every tensor the whole step writes (parameters and BatchNorm statistics,
    /// optimizer state, EMA, loss scale), to undo the capture's warm-up runs.
    fn snapshot(&self) -> Vec<Saved> {
        let Some(tail) = &self.tail else { return vec![] };
        let mut out = save_all(self.params.borrow_mut().tensors_mut());
        out.extend(save_all(tail.optim.borrow_mut().tensors_mut().into_iter().map(TensorMut::Rank1).collect()));
        if let Some((ema, _)) = &tail.ema {
            out.extend(save_all(ema.borrow_mut().tensors_mut()));
        }
        if let Some(s) = &self.scaler {
            out.extend(save_all(s.borrow_mut().tensors_mut().into_iter().map(TensorMut::Rank1).collect()));
        }
        out
    }

    /// What a run of the step produced, as one number: the sum of squares of the gradients, or
    /// with the tail, of how far the parameters moved from `before` (a [`snapshot`](Self::snapshot)).
    fn signature(&self, out: &SegmentOut, before: &[Saved]) -> f64 {
        let sum = if self.tail.is_some() {
            let mut params = self.params.borrow_mut();
            let moved: Vec<Tensor<1>> = params
                .tensors_mut()
                .into_iter()
                .zip(before)
                .map(|(now, was)| match (now, was) {
                    (TensorMut::Rank4(t), Saved::Rank4(w)) => t.clone().sub(w.clone()).square().sum(),
                    (TensorMut::Rank1(t), Saved::Rank1(w)) => t.clone().sub(w.clone()).square().sum(),
                    _ => unreachable!("saved in the store's order"),
                })
                .collect();
            moved.into_iter().reduce(|a, b| a.add(b))
        } else {
            out.grads.iter().map(|(_, g)| g.clone().square().sum()).reduce(|a, b| a.add(b))
        };
        sum.map(read_scalar).unwrap_or(0.0)
    }

    /// Copies `saved` back into the same buffers, in place (`saved` stays as it is).
    fn restore(&self, saved: &[Saved]) {
        let Some(tail) = &self.tail else { return };
        let mut saved = saved.iter();
        let mut load = |t: TensorMut<'_>| write_saved(t, saved.next().expect("restored in the order saved"), None);
        self.params.borrow_mut().tensors_mut().into_iter().for_each(&mut load);
        tail.optim.borrow_mut().tensors_mut().into_iter().for_each(|t| load(TensorMut::Rank1(t)));
        if let Some((ema, _)) = &tail.ema {
            ema.borrow_mut().tensors_mut().into_iter().for_each(&mut load);
        }
        if let Some(s) = &self.scaler {
            s.borrow_mut().tensors_mut().into_iter().for_each(|t| load(TensorMut::Rank1(t)));
        }
    }
}

/// A saved state tensor.
enum Saved {
    Rank4(Tensor<4>),
    Rank1(Tensor<1>),
}

/// Deep copies of `tensors` (their own buffers).
fn save_all(tensors: Vec<TensorMut<'_>>) -> Vec<Saved> {
    tensors
        .into_iter()
        .map(|t| match t {
            TensorMut::Rank4(t) => Saved::Rank4(t.clone().mul_scalar(1.0)),
            TensorMut::Rank1(t) => Saved::Rank1(t.clone().mul_scalar(1.0)),
        })
        .collect()
}

/// What an optimizer step writes: the trainable parameters and the optimizer's state.
fn updated_by_optimizer<'a>(params: &'a mut ParamStore, optim: &'a mut dyn Optimizer) -> Vec<TensorMut<'a>> {
    let mut out = params.trainable_tensors_mut();
    out.extend(optim.tensors_mut().into_iter().map(TensorMut::Rank1));
    out
}

/// Puts `kept` back into `tensors`, in place, unless `finite` (`[1]`, on the device) holds:
/// a skipped step decided without reading anything back.
fn keep_unless(finite: &Tensor<1, Bool>, tensors: Vec<TensorMut<'_>>, kept: &[Saved]) {
    for (t, old) in tensors.into_iter().zip(kept) {
        write_saved(t, old, Some(finite));
    }
}

/// Writes `saved` into `t`, in place; with `unless`, only where it is false (`[1]`, on the
/// device), `t` keeping its value where it holds.
fn write_saved(t: TensorMut<'_>, saved: &Saved, unless: Option<&Tensor<1, Bool>>) {
    match (t, saved) {
        (TensorMut::Rank4(t), Saved::Rank4(old)) => {
            let value = match unless {
                Some(keep_new) => old.clone().mask_where(keep_new.clone().reshape([1, 1, 1, 1]).expand(t.dims()), t.clone()),
                None => old.clone(),
            };
            write_into(t, value);
        }
        (TensorMut::Rank1(t), Saved::Rank1(old)) => {
            let value = match unless {
                Some(keep_new) => old.clone().mask_where(keep_new.clone().expand(t.dims()), t.clone()),
                None => old.clone(),
            };
            write_into(t, value);
        }
        _ => unreachable!("written back in the order saved"),
    }
}

type Closure = Box<dyn FnMut() -> SegmentOut>;

/// The graphs of a captured segment.
enum Recorded {
    /// One graph (forward + loss + backward, or the whole step), hardware or software.
    One(OneGraph<SegmentOut, Closure>),
    /// Forward and backward graphs with the loss eager between.
    Two(TwoGraphs),
    /// LibreYOLO's split without hardware graphs: the parts run eagerly (software mode).
    SplitSoftware,
}

/// A captured segment and its stable inputs.
pub struct SegmentGraph {
    images: Rc<RefCell<Tensor<4>>>,
    targets: Rc<RefCell<Tensor<3>>>,
    recorded: Recorded,
}

impl SegmentGraph {
    fn is_hardware(&self) -> bool {
        match &self.recorded {
            Recorded::One(g) => g.is_hardware(),
            Recorded::Two(_) => true,
            Recorded::SplitSoftware => false,
        }
    }
}

/// One run of the segment on the current batch.
pub struct SegmentOps<'a> {
    pub spec: &'a SegmentSpec,
    pub device: &'a Device,
    pub images: Tensor<4>,
    pub targets: Tensor<3>,
    pub allow_software: bool,
}

impl SegmentOps<'_> {
    /// Checks a new graph against eager on this batch once, from the state saved before the
    /// capture: the loss (computed before any update) and what the step produces (the gradients,
    /// or for a whole step how far it moved the parameters) of two eager runs and of a replay
    /// ([`agree`]). `references`: the eager runs' figures when the capture's warm-up measured
    /// them ([`super::one_graph`]; one run stands for both); else two run here. The replay's
    /// output is returned: it is this step's result.
    fn check_against_eager(&mut self, g: &mut SegmentGraph, before: &[Saved], references: Option<[(f64, f64); 2]>) -> Result<SegmentOut, String> {
        let [eager, again] = references.unwrap_or_else(|| {
            let eager_run = || {
                let out = self.spec.run(self.images.clone(), self.targets.clone());
                let figures = (total(&out), self.spec.signature(&out, before));
                drop(out);
                self.spec.restore(before);
                figures
            };
            [eager_run(), eager_run()]
        });
        let out = self.replay(g)?;
        let replayed = (total(&out), self.spec.signature(&out, before));
        agree(eager, again, replayed, if self.spec.tail.is_some() { "parameter update" } else { "gradient" })?;
        Ok(out)
    }

    pub fn key(&self) -> ShapeKey {
        let dtype = self.spec.forward.compute.map(|d| format!("{d:?}")).unwrap_or_else(|| "F32".into());
        ShapeKey { dims: self.images.dims().to_vec(), dtype }
    }
}

/// Whether a replay agrees with eager: `eager` and `again` are two eager runs of the same step
/// from the same state, `replayed` the graph's, each as (loss, [`SegmentSpec::signature`]). The
/// tolerances (1e-3 on the loss, 1e-2 on the signature) widen to four times the spread of the
/// two eager runs, so kernels that are not deterministic (atomic split-K reductions in bf16)
/// pass while a graph that reads or writes the wrong buffers does not. Gradients that overflow
/// in both eager runs (fp16 with a loss scale too large for this batch, which the scaler answers
/// by skipping the step) agree with a replay whose gradients overflow too.
pub fn agree(eager: (f64, f64), again: (f64, f64), replayed: (f64, f64), what: &str) -> Result<(), String> {
    let spread = |a: f64, b: f64| (a - b).abs() / a.abs().max(1e-12);
    let tol_loss = 1e-3f64.max(4.0 * spread(eager.0, again.0));
    let tol_sig = 1e-2f64.max(4.0 * spread(eager.1, again.1));
    let overflowed = !eager.1.is_finite() && !again.1.is_finite();
    if !(spread(eager.0, replayed.0) <= tol_loss) {
        Err(format!("the replayed loss {} differs from eager {} on the capture batch (tolerance {tol_loss:.1e}; two eager runs: {} and {})", replayed.0, eager.0, eager.0, again.0))
    } else if overflowed {
        if replayed.1.is_finite() {
            Err(format!("the replayed {what} (sum of squares {:.6e}) is finite where both eager runs overflowed ({} and {})", replayed.1, eager.1, again.1))
        } else {
            Ok(())
        }
    } else if !(spread(eager.1, replayed.1) <= tol_sig) {
        Err(format!(
            "the replayed {what} (sum of squares {:.6e}) differs from eager ({:.6e}) on the capture batch (tolerance {tol_sig:.1e}; a second eager run gave {:.6e})",
            replayed.1, eager.1, again.1
        ))
    } else {
        Ok(())
    }
}

fn total(out: &SegmentOut) -> f64 {
    read_scalar(out.terms.total.clone())
}

/// The first value of `t` on the host (NaN if it cannot be read).
fn read_scalar(t: Tensor<1>) -> f64 {
    t.into_data().convert::<f64>().try_to_vec::<f64>().ok().and_then(|v| v.first().copied()).unwrap_or(f64::NAN)
}

impl GraphOps<SegmentGraph, SegmentOut> for SegmentOps<'_> {
    fn eager(&mut self) -> SegmentOut {
        self.spec.run(self.images.clone(), self.targets.clone())
    }

    fn capture(&mut self, prior_runs: u32) -> Result<(SegmentGraph, Option<SegmentOut>), String> {
        let (images, targets) = (stable_copy(&self.images), stable_copy(&self.targets));
        // The warm-up and capture runs of a whole step update the state: undo them after.
        let saved = self.spec.snapshot();
        let (recorded, references) = if self.spec.split {
            let captured = super::two_graphs::capture(self.spec, self.device, &images.borrow(), &targets.borrow());
            match captured {
                Ok(Some(two)) => (Recorded::Two(two), None),
                Ok(None) => (Recorded::SplitSoftware, None),
                Err(e) => {
                    let _ = self.device.sync();
                    return Err(e);
                }
            }
        } else {
            let (spec, i, t) = (self.spec.clone(), images.clone(), targets.clone());
            let closure: Closure = Box::new(move || spec.run(i.borrow().clone(), t.borrow().clone()));
            let measure = |out: &SegmentOut| (total(out), self.spec.signature(out, &saved));
            let runs = super::one_graph::warmup_runs(prior_runs)?;
            let (graph, figures) = super::one_graph::record(self.device, closure, runs, measure, || self.spec.restore(&saved));
            let references = match figures[..] {
                [.., a, b] => [a, b],
                [a] => [a, a],
                [] => unreachable!("at least one warm-up run"),
            };
            (Recorded::One(graph), Some(references))
        };
        // The check starts from the saved state: the split's warm-up steps updated it, and a
        // software graph's capture run was real. A hardware window ran nothing, and the last
        // warm-up run was undone.
        let untouched = matches!(&recorded, Recorded::One(g) if g.is_hardware());
        if !untouched {
            self.spec.restore(&saved);
        }
        let mut g = SegmentGraph { images, targets, recorded };
        let shared = self.spec.tail.as_ref().and_then(|t| t.shared.take());
        let checked = if let Some(name) = shared {
            Err(format!("the step updates `{name}` while another handle holds its buffer, so the update would not reach the graph"))
        } else if !g.is_hardware() && !self.allow_software {
            Err("the backend recorded no hardware graph (not a CUDA device, or the capture window was refused)".to_string())
        } else {
            self.check_against_eager(&mut g, &saved, references)
        };
        let _ = self.device.sync();
        match checked {
            // The checked replay ran this step from the saved state on this batch: it stands.
            Ok(out) => Ok((g, Some(out))),
            Err(e) => {
                self.spec.restore(&saved);
                Err(e)
            }
        }
    }

    fn replay(&mut self, g: &mut SegmentGraph) -> Result<SegmentOut, String> {
        let hardware = g.is_hardware();
        refresh(&g.images, &self.images, hardware)?;
        refresh(&g.targets, &self.targets, hardware)?;
        match &mut g.recorded {
            // Safety: every buffer the closure touched outlives the graph (the stable inputs
            // are held by the graph's closure and by `g`; the parameters by the trainer, which
            // drops the graphs first); refresh, replay and the reads of the outputs run on this
            // thread.
            Recorded::One(graph) => unsafe { graph.replay() }.cloned(),
            Recorded::Two(two) => two.replay(self.spec, self.device, g.targets.borrow().clone()),
            Recorded::SplitSoftware => Ok(self.spec.run(g.images.borrow().clone(), g.targets.borrow().clone())),
        }
    }
}

impl Trainer<'_> {
    pub(super) fn forward_spec(&self) -> ForwardSpec {
        ForwardSpec {
            compute: self.precision.compute,
            with_aux: self.with_aux,
            replicas: self.replica.devices.clone(),
            sync_bn: self.loaded.manifest.run.sync_bn,
        }
    }

    /// The step as [`SegmentSpec`] runs it; `update`: with the BatchNorm statistics, clip,
    /// optimizer and EMA after the backward.
    fn segment_spec(&self, update: bool) -> SegmentSpec {
        SegmentSpec {
            network: self.model.network.clone(),
            params: self.model.params.clone(),
            forward: self.forward_spec(),
            loss: self.loss.clone(),
            aux_weight: self.aux_weight,
            factor: self.loss_factor(),
            scaler: self.precision.scaler.clone(),
            split: self.split_graphs,
            seam: self.seam,
            reduce: (update && self.replica.world() > 1).then(|| {
                let replica = self.replica.clone();
                Rc::new(move |grads| replica.average_gradients(grads)) as Reduce
            }),
            tail: update.then(|| StepTail {
                optim: self.optim.clone(),
                scalars: self.scalars.clone(),
                ema: self.ema.as_ref().map(|e| (e.clone(), self.ema_scalars.clone())),
                clip_max_norm: self.loaded.manifest.optim.clip_max_norm,
                require_unique: self.graphs.is_some() && std::env::var_os(SOFTWARE_ENV).is_none(),
                shared: Rc::new(Cell::new(None)),
            }),
        }
    }

    /// An eager step's first batch of a new shape: its kernels compiled on every core by a dry
    /// run of the same computation (forward, loss, backward and update run as one segment: the
    /// eager stages call the same functions), the state left as it was. Returns the step's name
    /// and the kernels compiled before it, for [`Self::record_first_run`] once the real step
    /// ran; `None` when the shape was seen or nothing is dry-run.
    pub(super) fn precompile_eager(&mut self, images: &Tensor<4>, targets: &Tensor<3>) -> Option<(String, u64)> {
        let dims = images.dims();
        let (m, compute) = (&self.loaded.manifest, self.precision.compute);
        let (step, dry) = self.precompile.as_mut()?.first_run("eager", dims, || format!("{}-{} eager {dims:?} {compute:?}", m.model.family, m.model.size))?;
        let before = crate::precompile::compiled_so_far();
        if dry {
            self.segment_spec(true).precompile(&self.device, "eager step", images.clone(), targets.clone());
        }
        Some((step, before))
    }

    /// Keeps what a step's first run compiled since `before` (the dry run included).
    pub(super) fn record_first_run(&mut self, (step, before): (String, u64)) {
        if let Some(p) = self.precompile.as_mut() {
            p.record(&step, crate::precompile::compiled_so_far() - before);
        }
    }

    /// The captured segment through the capture manager (capture, replay or eager).
    pub(super) fn run_segment(&mut self, images: Tensor<4>, targets: Tensor<3>) -> SegmentOut {
        let spec = self.segment_spec(self.captures_update);
        let mut ops = SegmentOps { spec: &spec, device: &self.device, images, targets, allow_software: std::env::var_os(SOFTWARE_ENV).is_some() };
        let key = ops.key();
        // The step as the kernel cache sees it: the network, the segment's extent, the input.
        let m = &self.loaded.manifest;
        let first_run = self.precompile.as_mut().and_then(|p| {
            p.first_run("captured", ops.images.dims(), || format!("{}-{} split={} update={} {:?} {}", m.model.family, m.model.size, spec.split, spec.tail.is_some(), key.dims, key.dtype))
        });
        let first_run = first_run.map(|(step, dry)| {
            let before = crate::precompile::compiled_so_far();
            if dry {
                spec.precompile(&self.device, "captured step", ops.images.clone(), ops.targets.clone());
            }
            (step, before)
        });
        let graphs = self.graphs.as_mut().expect("run_segment needs the capture manager");
        let before = graphs.replays();
        let out = graphs.run(&key, &mut ops);
        let replayed = graphs.replays() > before;
        if let Some(first_run) = first_run {
            self.record_first_run(first_run);
        }
        if replayed && let Some(p) = self.profiler.as_mut() {
            p.graph_replayed();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LibreYOLO's split of a YOLOv9-t at 64 px, f32, without an update or a reduce, with the
    /// PGI branch (`aux_weight` 0.25) or without it; two images with one box each.
    fn yolo9t_split(with_aux: bool) -> (SegmentSpec, Tensor<4>, Tensor<3>) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/yolo9t.toml");
        let aux_weight = if with_aux { 0.25 } else { 0.0 };
        let loaded = crate::manifest::load(&path, &["imgsz=64".into(), format!("model.aux_weight={aux_weight}")]).unwrap();
        let device = Device::flex();
        let (network, params) = crate::network::build(&loaded, 80, with_aux, &device).unwrap();
        let loss = super::super::yolo9_loss(&loaded.manifest, 80, &network);
        let spec = SegmentSpec {
            network: Rc::new(network),
            params: Rc::new(RefCell::new(params)),
            forward: ForwardSpec { compute: None, with_aux, replicas: vec![], sync_bn: false },
            loss,
            aux_weight,
            factor: 1.0,
            scaler: None,
            tail: None,
            split: true,
            seam: None,
            reduce: None,
        };
        let images = Tensor::<4>::random([2, 3, 64, 64], burn::tensor::Distribution::Uniform(0.0, 1.0), &device);
        let box_row = [[3.0f32, 0.2, 0.2, 0.7, 0.8]];
        let targets = Tensor::<3>::from_data(burn::tensor::TensorData::new([box_row, box_row].concat().concat().to_vec(), [2, 1, 5]), &device);
        (spec, images, targets)
    }

    /// The segment with the update, LibreYOLO's split (as a data-parallel rank runs it), on a
    /// YOLOv9-t at 64 px, plain SGD at lr 0.1 (no momentum, no decay) and the given `reduce`.
    fn rank_segment(reduce: Option<Reduce>) -> (SegmentSpec, Tensor<4>, Tensor<3>) {
        let (mut spec, images, targets) = yolo9t_split(false);
        let mut sgd = libreyolo_stages::optim::Sgd::new(0.0, false);
        libreyolo_stages::optim::Optimizer::init_state(&mut sgd, &spec.params.borrow());
        spec.tail = Some(StepTail {
            optim: Rc::new(RefCell::new(Box::new(sgd))),
            scalars: Rc::new(RefCell::new(Scalars::new(0.1, 0.0, &images.device()))),
            ema: None,
            clip_max_norm: 0.0,
            require_unique: false,
            shared: Rc::new(Cell::new(None)),
        });
        spec.reduce = reduce;
        (spec, images, targets)
    }

    /// A seam inside the network (the backbone and neck in the graphs, both heads with the
    /// loss between them, PGI on) gives the gradients and BatchNorm statistics of the whole
    /// forward: the same parameters, to float rounding (the heads' backward runs in a graph of
    /// its own, so sums of several branches add in another order).
    #[test]
    fn a_seam_inside_the_network_gives_the_gradients_of_the_whole_forward() {
        let (mut spec, images, targets) = yolo9t_split(true);
        let whole = spec.run(images.clone(), targets.clone());
        let seam = spec.network.layer_index("neck.elan_down2").unwrap();
        // Six activations cross it: three neck outputs into the main head, three backbone
        // outputs into the PGI branch.
        assert_eq!(spec.network.crossing(seam, true).len(), 6);
        spec.seam = Some(seam);
        let cut = spec.run(images, targets);
        assert_eq!(total(&whole), total(&cut));
        let ids = |o: &SegmentOut| o.grads.iter().map(|(id, _)| id.0).collect::<Vec<_>>();
        assert_eq!(ids(&whole), ids(&cut), "the same parameters get gradients, in the same order");
        let max_abs = |t: Tensor<1>| read_scalar(t.abs().max().reshape([1]));
        let worst = whole.grads.iter().zip(&cut.grads).map(|((_, a), (_, b))| max_abs(a.clone().sub(b.clone())) / max_abs(a.clone()).max(1e-12)).fold(0.0, f64::max);
        assert!(worst < 1e-4, "a gradient differs by {worst:e} of its largest value");
        let stats = |o: &SegmentOut| o.stats.iter().map(|s| s.running_mean.0).collect::<Vec<_>>();
        assert_eq!(stats(&whole), stats(&cut), "every BatchNorm's batch statistics, the heads' included");
    }

    /// The trained tensors, flattened and concatenated, on the host.
    fn trained(spec: &SegmentSpec) -> Vec<f32> {
        let params = spec.params.borrow();
        let flat = params.entries().iter().filter(|e| e.role.is_trainable()).filter_map(|e| e.value.flat());
        flat.flat_map(|t| t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()).collect()
    }

    /// A data-parallel rank's update steps with the all-reduced gradients: the reduce runs
    /// between the backward and the update, and the update takes what it returns.
    #[test]
    fn the_captured_update_steps_with_the_reduced_gradients() {
        // A reduce that zeroes every gradient: SGD without momentum or decay then moves nothing.
        let zero: Reduce = Rc::new(|grads: Vec<(ParamId, Tensor<1>)>| grads.into_iter().map(|(id, g)| (id, g.zeros_like())).collect());
        let (spec, images, targets) = rank_segment(Some(zero));
        let before = trained(&spec);
        let out = spec.run(images.clone(), targets.clone());
        assert!(out.grads.is_empty(), "the update consumed the gradients");
        assert_eq!(trained(&spec), before, "the update used the gradients from before the reduce");
        // Without a reduce (one GPU) the same step moves the weights.
        let (spec, _, _) = rank_segment(None);
        let before = trained(&spec);
        spec.run(images, targets);
        let moved = trained(&spec).iter().zip(&before).filter(|(a, b)| a != b).count();
        assert!(moved > before.len() / 2, "only {moved} of {} weights moved", before.len());
    }

    #[test]
    fn a_replay_agrees_within_the_spread_of_eager() {
        // Deterministic kernels: the H200's two-graph gradients 1.6% off fail, 0.5% passes.
        assert!(agree((17.1, 2.385e5), (17.1, 2.385e5), (17.1, 2.424e5), "gradient").unwrap_err().contains("gradient"));
        assert!(agree((17.1, 2.385e5), (17.1, 2.385e5), (17.1, 2.397e5), "gradient").is_ok());
        // Eager runs 1% apart (atomic reductions): 1.6% is within four times that spread.
        assert!(agree((17.1, 2.385e5), (17.1, 2.409e5), (17.1, 2.424e5), "gradient").is_ok());
        // A graph reading never-written memory (the H200's first whole-step capture).
        let err = agree((18215.2, 1.0), (18215.2, 1.0), (17.15, 1.0), "parameter update").unwrap_err();
        assert!(err.contains("replayed loss 17.15"), "{err}");
        // NaN never agrees.
        assert!(agree((17.1, 1.0), (17.1, 1.0), (f64::NAN, 1.0), "gradient").is_err());
        assert!(agree((17.1, 1.0), (17.1, 1.0), (17.1, f64::NAN), "gradient").is_err());
        // fp16 at a loss scale this batch overflows: eager and replay overflow alike (the scaler
        // skips the step in both), which agrees; a finite replay against overflowing eager does not.
        assert!(agree((17.1, f64::INFINITY), (17.1, f64::NAN), (17.1, f64::INFINITY), "gradient").is_ok());
        assert!(agree((17.1, f64::INFINITY), (17.1, f64::INFINITY), (17.1, 2.4e5), "gradient").unwrap_err().contains("finite"));
        // One eager run overflowing and the other not is no overflow: NaN spread, refused.
        assert!(agree((17.1, f64::INFINITY), (17.1, 2.4e5), (17.1, 2.4e5), "gradient").is_err());
    }
}

