//! LibreYOLO's capture contract (`cuda_graph=True`): the network forward and the backward as
//! two CUDA graphs with the loss eager between them (reference section b, burn-0.22.md 4.6).
//!
//! The forward graph writes the head maps (and the BatchNorm batch statistics) into the
//! buffers of its capture run. The loss runs eagerly on those maps, as leaves of a graph of its
//! own, and its gradient with respect to each map is written in place into a stable upstream
//! buffer. The backward graph, recorded from the capture run's autodiff tape, reads the saved
//! activations and the upstream buffers and writes the parameter gradients. With a seam inside
//! the network (the forward stage's `until`), the forward graph ends at that layer and writes
//! the activations that cross it; the eager part runs the layers after it (e.g. the heads) from
//! them, then the loss, and the backward graph starts from their gradients. Optimizer, EMA and
//! schedule stay eager, like the reference — or, when the manifest captures them with the
//! backward, the update (BatchNorm statistics, clip, optimizer, EMA) is a third graph reading
//! the backward graph's gradient buffers. A data-parallel rank all-reduces those buffers in
//! place between the two, eagerly: the collective stays outside the graphs.
//!
//! Without hardware graphs (burn's software mode, `LIBREYOLO_CAPTURE_SOFTWARE` on the CPU) the
//! same three parts run one after the other on every step, so the tests check the split and the
//! in-place upstream buffers against eager.

use burn::backend::{Backend, BackendGraph, Dispatch};
use burn::tensor::{Device, Tensor};
use libreyolo_families::{BatchStats, Ctx, HeadMaps, ParamId};
use libreyolo_stages::loss::LossTerms;

use super::segment::{SegmentOut, SegmentSpec};
use super::step::{compute_input, forward, loss, scaled_total, train_ctx};
use crate::capture::{fresh_copy, write_into};

/// The maps of a forward as one list: the main head's, then the auxiliary head's.
fn all_maps(maps: &HeadMaps) -> Vec<Tensor<4>> {
    maps.main.iter().chain(maps.aux.iter().flatten()).cloned().collect()
}

/// What the forward graph computes and the eager part between the graphs reads: the head maps
/// (LibreYOLO's contract), or with a seam inside the network (`until`) the activations that
/// cross it.
fn forward_part(spec: &SegmentSpec, images: Tensor<4>) -> (Ctx, Vec<Tensor<4>>) {
    let Some(seam) = spec.seam else {
        let (cx, maps) = forward(&spec.network, &spec.params.borrow(), &spec.forward, images);
        return (cx, all_maps(&maps));
    };
    let cx = train_ctx(&spec.params.borrow(), &spec.forward);
    let crossing = spec.network.forward_until(seam, compute_input(images, &spec.forward), &cx, spec.forward.with_aux);
    (cx, crossing)
}

/// The eager part between the graphs.
struct Middle {
    terms: LossTerms,
    /// The loss gradient with respect to each output of the forward graph.
    upstream: Vec<Tensor<4>>,
    /// With a seam: the gradients and BatchNorm statistics of the layers after it.
    grads: Vec<(ParamId, Tensor<1>)>,
    stats: Vec<BatchStats>,
}

/// The eager part on the forward graph's `outputs`, taken as leaves of a graph of its own:
/// with a seam, the layers after it; then the loss, and its backward to the outputs.
fn middle(spec: &SegmentSpec, outputs: &[Tensor<4>], targets: Tensor<3>) -> Middle {
    let leaves: Vec<Tensor<4>> = outputs.iter().map(|m| m.clone().inner().autodiff().require_grad()).collect();
    let (maps, cx) = match spec.seam {
        None => {
            let n = spec.network.head().strides.len();
            let aux = (leaves.len() > n).then(|| leaves[n..].to_vec());
            (HeadMaps { main: leaves[..n].to_vec(), aux }, None)
        }
        Some(seam) => {
            let cx = train_ctx(&spec.params.borrow(), &spec.forward);
            let maps = spec.network.forward_from(seam, leaves.clone(), &cx, spec.forward.with_aux);
            (maps, Some(cx))
        }
    };
    let strides = spec.network.head().strides.clone();
    let terms = loss(&spec.loss, spec.aux_weight, &strides, maps, targets, spec.forward.group());
    let grads = scaled_total(&terms.total, spec.factor, spec.scaler.as_ref()).backward();
    let upstream = leaves.iter().map(|l| l.grad(&grads).expect("every output of the forward graph reaches the loss").inner()).collect();
    let (grads, stats) = match cx {
        Some(cx) => (cx.gradients(&grads), cx.take_batch_stats()),
        None => (vec![], vec![]),
    };
    Middle { terms, upstream, grads, stats }
}

/// Both parts' gradients in the store's order.
fn joined(mut a: Vec<(ParamId, Tensor<1>)>, b: Vec<(ParamId, Tensor<1>)>) -> Vec<(ParamId, Tensor<1>)> {
    if !b.is_empty() {
        a.extend(b);
        a.sort_by_key(|(id, _)| id.0);
    }
    a
}

/// The parameter gradients of a forward whose outputs have the loss gradients `upstream`: the
/// backward of `sum(output * upstream)` over every output.
fn backward_from(outputs: &[Tensor<4>], upstream: &[Tensor<4>], cx: &Ctx) -> Vec<(ParamId, Tensor<1>)> {
    let total = outputs
        .iter()
        .cloned()
        .zip(upstream)
        .map(|(m, u)| m.mul(u.clone().autodiff()).sum())
        .reduce(|a, b| a.add(b))
        .expect("the head has maps");
    cx.gradients(&total.backward())
}

/// The three parts eagerly: forward, loss, backward (the update, when captured, is the caller's:
/// [`SegmentSpec::run_drained`]). With `drain` (the capture's warm-up) the
/// device is drained between them as the graph windows drain it, so the lazy fusion backend
/// builds the same fused kernels in the warm-up as in the windows (a kernel first built or
/// autotuned inside a window fails it).
pub fn run_split(spec: &SegmentSpec, images: Tensor<4>, targets: Tensor<3>, drain: bool) -> SegmentOut {
    let device = images.device();
    let drained = || {
        if drain {
            let _ = device.sync();
        }
    };
    let (cx, outputs) = forward_part(spec, images);
    let mut stats = cx.take_batch_stats();
    drained();
    let m = middle(spec, &outputs, targets);
    drained();
    let grads = joined(backward_from(&outputs, &m.upstream, &cx), m.grads);
    stats.extend(m.stats);
    SegmentOut { terms: m.terms, grads, stats }
}

/// The two hardware graphs and every buffer they read or write.
pub struct TwoGraphs {
    forward: BackendGraph<Dispatch>,
    backward: BackendGraph<Dispatch>,
    /// The capture run's outputs (head maps, or the activations crossing a seam): rewritten by
    /// every forward replay, read by the eager part.
    outputs: Vec<Tensor<4>>,
    /// dL/dmap, written in place before every backward replay.
    upstream: Vec<Tensor<4>>,
    /// The backward graph's outputs.
    grads: Vec<(ParamId, Tensor<1>)>,
    /// The forward graph's BatchNorm batch statistics.
    stats: Vec<BatchStats>,
    /// The update graph, reading `grads` and `stats`, when the update is captured.
    update: Option<BackendGraph<Dispatch>>,
}

fn failed(what: &str) -> impl Fn(burn::backend::ExecutionError) -> String + '_ {
    move |e| format!("{what}: {e:?}")
}

/// Records the two graphs on `device` reading the stable `images` and `targets`; `Ok(None)`
/// when the backend has no hardware graphs.
pub fn capture(spec: &SegmentSpec, device: &Device, images: &Tensor<4>, targets: &Tensor<3>) -> Result<Option<TwoGraphs>, String> {
    let d = device.as_dispatch();
    // `update`: with the update captured, a warm-up step runs it too (its kernels built before a
    // window; the caller undoes the warm-up's updates) — but never while the forward window's
    // context holds the parameters: an update of a shared parameter lands in a new buffer, and
    // the forward graph would go on reading the old one (seen on the H200: the replayed loss
    // 1.3% off eager at the capture check, and an illegal address in a data-parallel rank).
    let eager_step = |update: bool| {
        let out = if update { spec.run_drained(images.clone(), targets.clone(), true) } else { run_split(spec, images.clone(), targets.clone(), true) };
        let _ = device.sync();
        drop(out);
    };
    Dispatch::graph_prepare(d).map_err(failed("preparing the forward graph"))?;
    // Warm-up: kernels compiled and the allocation pools at their steady state before a window
    // opens (burn-0.22.md 4.2); kept alive until the sync, or fusion would skip them.
    for _ in 0..3 {
        eager_step(true);
    }
    if Dispatch::graph_start_capture(d).is_err() {
        return Ok(None);
    }
    let (cx, outputs) = forward_part(spec, images.clone());
    let forward_graph = Dispatch::graph_stop_capture(d).map_err(failed("recording the forward graph"))?;
    let stats = cx.take_batch_stats();
    let stable: Vec<Tensor<4>> = middle(spec, &outputs, targets.clone()).upstream.iter().map(fresh_copy).collect();
    // The forward graph's pages are now reserved to it: one more eager step lets the pools
    // grow for the backward's temporaries outside a window (burn-0.22.md 4.6).
    eager_step(false);
    Dispatch::graph_prepare(d).map_err(failed("preparing the backward graph"))?;
    Dispatch::graph_start_capture(d).map_err(failed("opening the backward window"))?;
    let grads = backward_from(&outputs, &stable, &cx);
    let backward_graph = Dispatch::graph_stop_capture(d).map_err(failed("recording the backward graph"))?;
    // The outputs are kept without their autodiff tape, and the context goes: both hold handles
    // on the parameters, which an update graph needs uniquely owned to write them in place.
    drop(cx);
    let outputs: Vec<Tensor<4>> = outputs.into_iter().map(Tensor::inner).collect();
    let update = match &spec.tail {
        None => None,
        Some(tail) => {
            // The same warm-up again for the update's temporaries (the backward graph's pages are
            // now reserved too), then the update recorded reading the backward's gradients.
            eager_step(true);
            // Only the recorded update's ownership check counts (the warm-up steps ran it too).
            tail.shared.take();
            Dispatch::graph_prepare(d).map_err(failed("preparing the update graph"))?;
            Dispatch::graph_start_capture(d).map_err(failed("opening the update window"))?;
            spec.update(tail, grads.clone(), &stats);
            Some(Dispatch::graph_stop_capture(d).map_err(failed("recording the update graph"))?)
        }
    };
    Ok(Some(TwoGraphs { forward: forward_graph, backward: backward_graph, outputs, upstream: stable, grads, stats, update }))
}

impl TwoGraphs {
    /// Forward graph, eager loss, upstream gradients written in place, backward graph; the
    /// stable images and targets are refreshed by the caller.
    pub fn replay(&mut self, spec: &SegmentSpec, device: &Device, targets: Tensor<3>) -> Result<SegmentOut, String> {
        let d = device.as_dispatch();
        // Safety: every buffer the graphs touch is held by `self` (outputs, upstream, gradients,
        // statistics), by the caller (the stable inputs) or by the trainer (the parameters,
        // which outlive the graphs); the refreshes, the loss and the reads run on this thread,
        // the stream the graphs were captured on.
        unsafe { Dispatch::graph_replay(d, &self.forward) }.map_err(failed("replaying the forward graph"))?;
        let m = middle(spec, &self.outputs, targets);
        let terms = m.terms;
        for (stable, new) in self.upstream.iter_mut().zip(m.upstream) {
            if !stable.can_mut() {
                return Err("an upstream-gradient buffer is shared, so an in-place write would not reach the graph".into());
            }
            write_into(stable, new);
        }
        unsafe { Dispatch::graph_replay(d, &self.backward) }.map_err(failed("replaying the backward graph"))?;
        let Some(update) = &self.update else {
            let mut stats = self.stats.clone();
            stats.extend(m.stats);
            return Ok(SegmentOut { terms, grads: joined(self.grads.clone(), m.grads), stats });
        };
        // A seam with the update captured is refused by the capture plan: the eager layers'
        // gradients and statistics are new buffers each step, which the update graph would not read.
        debug_assert!(m.grads.is_empty() && m.stats.is_empty());
        if let Some(reduce) = &spec.reduce {
            // Each gradient, uniquely owned here, is all-reduced in its own buffer: the one the
            // update graph reads.
            if let Some((id, _)) = self.grads.iter().find(|(_, g)| !g.can_mut()) {
                return Err(format!("the gradient of parameter {id:?} is shared, so its all-reduce would not reach the update graph"));
            }
            self.grads = reduce(std::mem::take(&mut self.grads));
        }
        unsafe { Dispatch::graph_replay(d, update) }.map_err(failed("replaying the update graph"))?;
        Ok(SegmentOut { terms, grads: vec![], stats: self.stats.clone() })
    }
}
