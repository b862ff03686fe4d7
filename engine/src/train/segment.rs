//! The captured segment of the training step: network forward, the sync-free loss and the
//! backward in one graph (the manifest marks `forward`, `loss` and `backward` capture = true).
//! The graph reads stable input buffers (refreshed in place before each replay) and the
//! parameters' own buffers (the optimizer, EMA and BatchNorm updates write them in place,
//! eager, after the replay); it returns the loss terms, the gradients and the BatchNorm batch
//! statistics, which are folded in eagerly, so the capture's warm-up runs change nothing.

use std::cell::RefCell;
use std::rc::Rc;

use burn::tensor::{Device, Graph, Tensor, s};
use libreyolo_families::{BatchStats, Network, ParamId, ParamStore};
use libreyolo_stages::loss::{LossTerms, Yolo9Loss};

use super::Trainer;
use super::step::{ForwardSpec, backward, forward, loss};
use crate::capture::{GraphOps, ShapeKey};

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

/// Everything the segment reads besides its inputs.
#[derive(Clone)]
pub struct SegmentSpec {
    pub network: Rc<Network>,
    pub params: Rc<RefCell<ParamStore>>,
    pub forward: ForwardSpec,
    pub loss: Yolo9Loss,
    pub aux_weight: f64,
    /// Factor of the loss before backward (1 when capturing: no accumulation, no fp16 scale).
    pub factor: f64,
}

impl SegmentSpec {
    /// forward -> loss -> backward on `images` and `targets`.
    pub fn run(&self, images: Tensor<4>, targets: Tensor<3>) -> SegmentOut {
        let params = self.params.borrow();
        let (cx, maps) = forward(&self.network, &params, &self.forward, images);
        let strides = self.network.head().strides.clone();
        let terms = loss(&self.loss, self.aux_weight, &strides, maps, targets);
        let grads = backward(&terms.total, self.factor, &cx);
        SegmentOut { terms, grads, stats: cx.take_batch_stats() }
    }
}

type Closure = Box<dyn FnMut() -> SegmentOut>;

/// A captured segment and its stable inputs.
pub struct SegmentGraph {
    images: Rc<RefCell<Tensor<4>>>,
    targets: Rc<RefCell<Tensor<3>>>,
    graph: Graph<SegmentOut, Closure>,
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
    pub fn key(&self) -> ShapeKey {
        let dtype = self.spec.forward.compute.map(|d| format!("{d:?}")).unwrap_or_else(|| "F32".into());
        ShapeKey { dims: self.images.dims().to_vec(), dtype }
    }
}

fn refresh<const D: usize>(stable: &RefCell<Tensor<D>>, new: &Tensor<D>, hardware: bool) -> Result<(), String> {
    let mut t = stable.borrow_mut();
    if hardware && !t.can_mut() {
        return Err("a stable input buffer is shared, so an in-place refresh would not reach the graph".into());
    }
    let ranges: [std::ops::Range<usize>; D] = std::array::from_fn(|i| 0..new.dims()[i]);
    t.inplace(|t| t.slice_assign(ranges, new.clone()));
    Ok(())
}

fn total(out: &SegmentOut) -> f64 {
    out.terms.total.clone().into_data().convert::<f64>().try_to_vec::<f64>().ok().and_then(|v| v.first().copied()).unwrap_or(f64::NAN)
}

impl GraphOps<SegmentGraph, SegmentOut> for SegmentOps<'_> {
    fn eager(&mut self) -> SegmentOut {
        self.spec.run(self.images.clone(), self.targets.clone())
    }

    fn capture(&mut self) -> Result<SegmentGraph, String> {
        // Stable inputs of our own (fresh, uniquely owned buffers) that the closure borrows.
        let images = Rc::new(RefCell::new(Tensor::<4>::zeros(self.images.dims(), self.device)));
        let targets = Rc::new(RefCell::new(Tensor::<3>::zeros(self.targets.dims(), self.device)));
        images.borrow_mut().inplace(|t| t.slice_assign(s![.., .., .., ..], self.images.clone()));
        targets.borrow_mut().inplace(|t| t.slice_assign(s![.., .., ..], self.targets.clone()));
        let (spec, i, t) = (self.spec.clone(), images.clone(), targets.clone());
        let closure: Closure = Box::new(move || spec.run(i.borrow().clone(), t.borrow().clone()));
        let graph = burn::tensor::capture(self.device, closure);
        if !graph.is_hardware() && !self.allow_software {
            return Err("the backend recorded no hardware graph (not a CUDA device, or the capture window was refused)".into());
        }
        let mut g = SegmentGraph { images, targets, graph };
        // Check the graph against eager on this batch once (the segment has no side effects).
        let eager = total(&self.eager());
        let replayed = total(&self.replay(&mut g)?);
        if !((eager - replayed).abs() <= 1e-3 * eager.abs().max(1e-6)) {
            return Err(format!("the replayed loss {replayed} differs from eager {eager} on the capture batch"));
        }
        Ok(g)
    }

    fn replay(&mut self, g: &mut SegmentGraph) -> Result<SegmentOut, String> {
        let hardware = g.graph.is_hardware();
        refresh(&g.images, &self.images, hardware)?;
        refresh(&g.targets, &self.targets, hardware)?;
        // Safety: every buffer the closure touched outlives the graph (the stable inputs are
        // held by the graph's closure and by `g`; the parameters by the trainer, which drops
        // the graphs first); refresh, replay and the reads of the outputs run on this thread.
        Ok(unsafe { g.graph.replay() }.clone())
    }
}

impl Trainer<'_> {
    pub(super) fn forward_spec(&self) -> ForwardSpec {
        ForwardSpec { compute: self.precision.compute, with_aux: self.with_aux }
    }

    /// The captured segment through the capture manager (capture, replay or eager).
    pub(super) fn run_segment(&mut self, images: Tensor<4>, targets: Tensor<3>) -> SegmentOut {
        let spec = SegmentSpec {
            network: self.model.network.clone(),
            params: self.model.params.clone(),
            forward: self.forward_spec(),
            loss: self.loss.clone(),
            aux_weight: self.aux_weight,
            factor: self.loss_factor(),
        };
        let mut ops = SegmentOps { spec: &spec, device: &self.device, images, targets, allow_software: std::env::var_os(SOFTWARE_ENV).is_some() };
        let key = ops.key();
        self.graphs.as_mut().expect("run_segment needs the capture manager").run(&key, &mut ops)
    }
}
