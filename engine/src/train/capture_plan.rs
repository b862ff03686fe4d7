//! What this build captures of a manifest's plan: LibreYOLO's contract (forward and backward as
//! two graphs, the loss eager between), that contract with the optimizer and EMA captured after
//! the backward, forward + loss + backward as one segment, or the whole step; anything else,
//! and the settings that rule capture out, give the one line
//! `cuda_graph=true ignored (<why>); training runs eager.`

use crate::dag::StepDag;
use crate::device::ResolvedDevice;
use crate::manifest::LoadedManifest;

use super::{accumulation, nominal_batch, segment};

/// What this build captures of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureSupport {
    /// LibreYOLO's contract: the forward and the backward as two graphs, the loss eager.
    TwoGraphs,
    /// LibreYOLO's two graphs, and the update (BatchNorm statistics, gradient clip, optimizer,
    /// EMA) as a third graph after the backward: the manifest marks `backward`, `optimizer` and
    /// `ema` as one captured segment with the loss eager. A data-parallel rank all-reduces its
    /// gradients eagerly between the backward and the update graph.
    TwoGraphsAndUpdate,
    /// forward + loss + backward in one graph.
    Segment,
    /// The whole step, optimizer and EMA included.
    WholeStep,
}

/// Whether this build captures the training step of `dag` on `resolved` for a run over `world`
/// GPUs (`processes`: one process per GPU), or why not (the line logged as
/// `cuda_graph=true ignored (<why>)`).
pub fn capture_support(loaded: &LoadedManifest, dag: &StepDag, resolved: &ResolvedDevice, world: usize, processes: bool) -> Result<CaptureSupport, String> {
    let kind = single_gpu_support(loaded, dag, resolved)?;
    data_parallel_capture(world, processes, loaded.manifest.run.sync_bn, kind)?;
    Ok(kind)
}

/// What one GPU's training would capture.
fn single_gpu_support(loaded: &LoadedManifest, dag: &StepDag, resolved: &ResolvedDevice) -> Result<CaptureSupport, String> {
    let m = &loaded.manifest;
    let software = std::env::var_os(segment::SOFTWARE_ENV).is_some();
    let captured: Vec<Vec<&str>> = dag
        .plan(true)
        .segments
        .iter()
        .filter(|s| s.captured)
        .map(|s| s.stages.iter().map(|&i| dag.stages[i].kind.name).collect())
        .collect();
    let accumulate = accumulation(m.optim.nbs, nominal_batch(m.run.batch));
    if resolved.backend != crate::device::Backend::Cuda && !software {
        return Err("device is not CUDA".to_string());
    }
    let kind = plan_support(&captured, accumulate)?;
    match dag.network_seam() {
        Some(layer) if kind != CaptureSupport::TwoGraphs => Err(format!(
            "the seam inside the network (`until = \"{layer}\"`) runs the layers after it eagerly with the loss, between LibreYOLO's two graphs, so the loss, the optimizer and the EMA stay eager (`stage.loss.capture=false stage.optimizer.capture=false stage.ema.capture=false`); this plan captures the {}",
            match kind {
                CaptureSupport::WholeStep => "whole step",
                CaptureSupport::Segment => "loss with the network",
                _ => "update after the backward",
            }
        )),
        _ => Ok(kind),
    }
}

/// What a plan of captured stage kinds (`captured`, one list a segment) captures, given the
/// micro-batches per optimizer step. fp16's dynamic loss scale is held on the device, so it
/// captures with every plan (a captured update skips a non-finite step there).
fn plan_support(captured: &[Vec<&str>], accumulate: usize) -> Result<CaptureSupport, String> {
    let kind = if whole_step(captured) {
        CaptureSupport::WholeStep
    } else if two_graphs(captured) {
        CaptureSupport::TwoGraphs
    } else if two_graphs_and_update(captured) {
        CaptureSupport::TwoGraphsAndUpdate
    } else if captured == [vec!["network.forward", "loss.yolo9", "network.backward"]] {
        CaptureSupport::Segment
    } else {
        let plan: Vec<String> = captured.iter().map(|s| format!("[{}]", s.join(", "))).collect();
        return Err(format!(
            "the plan captures {}; this build captures the forward and the backward as two graphs (LibreYOLO's contract), those two with the optimizer and the EMA (`stage.optimizer.capture=true stage.ema.capture=true`), forward + loss + backward as one segment (mark the loss stage capture = true: `stage.loss.capture=true`), or the whole step with the optimizer and the EMA",
            if plan.is_empty() { "nothing".into() } else { plan.join(" and ") }
        ));
    };
    if accumulate > 1 {
        Err(format!("gradient accumulation ({accumulate} micro-batches per step) is not captured"))
    } else {
        Ok(kind)
    }
}

/// The capture manager for the training step and what it captures, or one line (from rank 0,
/// `main`) saying why not and `None` (the step runs eager).
pub(super) fn capture_manager(
    loaded: &LoadedManifest,
    dag: &StepDag,
    resolved: &ResolvedDevice,
    (world, processes, main): (usize, bool, bool),
) -> Option<(crate::capture::CaptureManager<segment::SegmentGraph>, CaptureSupport)> {
    let m = &loaded.manifest;
    match capture_support(loaded, dag, resolved, world, processes) {
        Err(r) => {
            if main {
                tracing::warn!("cuda_graph=true ignored ({r}); training runs eager.");
            }
            None
        }
        Ok(kind) => {
            let what = match (kind, dag.network_seam()) {
                (CaptureSupport::TwoGraphs, Some(layer)) => format!("training forward and backward up to `{layer}` (the layers after it and the loss eager)"),
                (CaptureSupport::WholeStep, _) => "training step".into(),
                (CaptureSupport::Segment, _) => "training forward/loss/backward".into(),
                (CaptureSupport::TwoGraphs, _) => "training forward and backward (loss eager)".into(),
                (CaptureSupport::TwoGraphsAndUpdate, _) => "training forward, backward and update (loss eager)".into(),
            };
            Some((crate::capture::CaptureManager::new(&what, m.capture.threshold, m.capture.max_graphs as usize), kind))
        }
    }
}

/// Whether a data-parallel rank may capture (`Ok`), or why it trains eager. Only LibreYOLO's
/// contract (with or without the update graph) qualifies: each graph holds one rank's own work,
/// and every collective (the loss's normaliser, the gradient all-reduce) runs eager between the
/// graphs. The whole step
/// and the one-segment plan would hold the loss's all-reduce, SyncBatchNorm holds one in the
/// forward (NCCL inside a graph is not done yet), and replica threads of one process would
/// capture concurrently in one CUDA context, which stream capture does not allow.
pub fn data_parallel_capture(world: usize, processes: bool, sync_bn: bool, kind: CaptureSupport) -> Result<(), String> {
    if world <= 1 {
        Ok(())
    } else if !matches!(kind, CaptureSupport::TwoGraphs | CaptureSupport::TwoGraphsAndUpdate) {
        Err(format!(
            "with {world} GPUs only LibreYOLO's two graphs (and the update after them) are captured, the collectives eager between them; this plan captures the {}",
            match kind {
                CaptureSupport::WholeStep => "whole step",
                _ => "forward, loss and backward as one graph",
            }
        ))
    } else if sync_bn {
        Err(format!("SyncBatchNorm all-reduces inside the forward; with {world} GPUs capture needs `sync_bn=false`"))
    } else if !processes {
        Err(format!("{world} GPUs driven by one process capture concurrently in one CUDA context; launch one process per GPU (RANK / WORLD_SIZE) to capture"))
    } else {
        Ok(())
    }
}

/// Whether the plan is LibreYOLO's contract: the forward and the backward captured, each alone.
pub(crate) fn two_graphs(captured: &[Vec<&str>]) -> bool {
    captured == [vec!["network.forward"], vec!["network.backward"]]
}

/// Whether the plan is LibreYOLO's contract with the update captured too: the forward alone,
/// then the backward with (optionally the gradient clip,) the optimizer and optionally the EMA.
pub(crate) fn two_graphs_and_update(captured: &[Vec<&str>]) -> bool {
    let [forward, rest] = captured else { return false };
    let rest: Vec<&str> = rest.iter().copied().filter(|k| *k != "grad.clip" && *k != "schedule").collect();
    forward == &["network.forward"] && (rest == ["network.backward", "optimizer", "ema"] || rest == ["network.backward", "optimizer"])
}

/// Whether one captured segment holds the whole step: forward, loss, backward, optionally the
/// gradient clip, the optimizer and the EMA.
pub(crate) fn whole_step(captured: &[Vec<&str>]) -> bool {
    let [segment] = captured else { return false };
    let core: Vec<&str> = segment.iter().copied().filter(|k| *k != "grad.clip" && *k != "schedule").collect();
    core == ["network.forward", "loss.yolo9", "network.backward", "optimizer", "ema"] || core == ["network.forward", "loss.yolo9", "network.backward", "optimizer"]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A data-parallel rank captures LibreYOLO's two graphs when each graph holds only its own
    /// work; every other configuration trains eager with the reason.
    #[test]
    fn data_parallel_ranks_capture_only_the_two_graphs_without_collectives_inside() {
        use CaptureSupport::*;
        for kind in [TwoGraphs, TwoGraphsAndUpdate, Segment, WholeStep] {
            assert_eq!(data_parallel_capture(1, false, true, kind), Ok(()), "one GPU: nothing to rule out");
        }
        assert_eq!(data_parallel_capture(2, true, false, TwoGraphs), Ok(()));
        assert_eq!(data_parallel_capture(2, true, false, TwoGraphsAndUpdate), Ok(()));
        assert!(data_parallel_capture(2, true, true, TwoGraphsAndUpdate).unwrap_err().contains("sync_bn=false"));
        let why = |world, processes, sync_bn, kind| data_parallel_capture(world, processes, sync_bn, kind).unwrap_err();
        assert!(why(2, true, false, WholeStep).contains("only LibreYOLO's two graphs"), "{}", why(2, true, false, WholeStep));
        assert!(why(4, true, false, Segment).contains("one graph"));
        assert!(why(2, true, true, TwoGraphs).contains("sync_bn=false"));
        assert!(why(2, false, false, TwoGraphs).contains("one process per GPU"));
    }

    /// Every plan captures one micro-batch a step; accumulation is never captured.
    #[test]
    fn every_plan_captures_without_accumulation() {
        let two = [vec!["network.forward"], vec!["network.backward"]];
        let update = [vec!["network.forward"], vec!["network.backward", "optimizer", "ema"]];
        let whole = [vec!["network.forward", "loss.yolo9", "network.backward", "optimizer", "ema"]];
        let segment = [vec!["network.forward", "loss.yolo9", "network.backward"]];
        assert_eq!(plan_support(&two, 1), Ok(CaptureSupport::TwoGraphs));
        assert_eq!(plan_support(&update, 1), Ok(CaptureSupport::TwoGraphsAndUpdate));
        assert_eq!(plan_support(&whole, 1), Ok(CaptureSupport::WholeStep));
        assert_eq!(plan_support(&segment, 1), Ok(CaptureSupport::Segment));
        assert!(plan_support(&two, 4).unwrap_err().contains("accumulation (4 micro-batches"));
        assert!(plan_support(&[vec!["network.backward"]], 1).unwrap_err().contains("the plan captures [network.backward]"));
    }

    /// The plans each kind stands for, as the manifest's capture marks give them.
    #[test]
    fn the_update_graph_plan_is_the_two_graphs_with_the_optimizer_and_ema_after_the_backward() {
        assert!(two_graphs_and_update(&[vec!["network.forward"], vec!["network.backward", "optimizer", "ema"]]));
        assert!(two_graphs_and_update(&[vec!["network.forward"], vec!["network.backward", "grad.clip", "optimizer"]]));
        assert!(!two_graphs_and_update(&[vec!["network.forward"], vec!["network.backward"]]), "that is the plain contract");
        assert!(two_graphs(&[vec!["network.forward"], vec!["network.backward"]]));
        assert!(!two_graphs_and_update(&[vec!["network.forward"], vec!["network.backward", "ema"]]), "an EMA without the optimizer");
        assert!(!whole_step(&[vec!["network.forward"], vec!["network.backward", "optimizer", "ema"]]));
    }
}
