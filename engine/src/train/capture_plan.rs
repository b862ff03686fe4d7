//! What this build captures of a manifest's plan: LibreYOLO's contract (forward and backward as
//! two graphs, the loss eager between), forward + loss + backward as one segment, or the whole
//! step; anything else, and the settings that rule capture out, give the one line
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
    /// forward + loss + backward in one graph.
    Segment,
    /// The whole step, optimizer and EMA included.
    WholeStep,
}

/// Whether this build captures the training step of `dag` on `resolved`, or why not (the
/// line logged as `cuda_graph=true ignored (<why>)`).
pub fn capture_support(loaded: &LoadedManifest, dag: &StepDag, resolved: &ResolvedDevice) -> Result<CaptureSupport, String> {
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
    let fp16_scaling = m.precision.amp && m.precision.dtype == crate::manifest::AmpDtype::Fp16 && resolved.backend == crate::device::Backend::Cuda;
    if resolved.backend != crate::device::Backend::Cuda && !software {
        Err("device is not CUDA".to_string())
    } else if resolved.ids.len() > 1 {
        Err(format!("training on {} GPUs runs eager (LibreYOLO disables cuda_graph under DDP too)", resolved.ids.len()))
    } else if !(captured == [vec!["network.forward", "loss.yolo9", "network.backward"]] || two_graphs(&captured) || whole_step(&captured)) {
        let plan: Vec<String> = captured.iter().map(|s| format!("[{}]", s.join(", "))).collect();
        Err(format!(
            "the plan captures {}; this build captures the forward and the backward as two graphs (LibreYOLO's contract), forward + loss + backward as one segment (mark the loss stage capture = true: `stage.loss.capture=true`), or the whole step with the optimizer and the EMA",
            if plan.is_empty() { "nothing".into() } else { plan.join(" and ") }
        ))
    } else if accumulate > 1 {
        Err(format!("gradient accumulation ({accumulate} micro-batches per step) is not captured"))
    } else if fp16_scaling {
        Err("fp16 dynamic loss scaling reads the gradients on the host; use bf16".to_string())
    } else if whole_step(&captured) {
        Ok(CaptureSupport::WholeStep)
    } else if two_graphs(&captured) {
        Ok(CaptureSupport::TwoGraphs)
    } else {
        Ok(CaptureSupport::Segment)
    }
}

/// The capture manager for the training step and what it captures, or one line saying why not
/// and `None` (the step runs eager).
pub(super) fn capture_manager(loaded: &LoadedManifest, dag: &StepDag, resolved: &ResolvedDevice) -> Option<(crate::capture::CaptureManager<segment::SegmentGraph>, CaptureSupport)> {
    let m = &loaded.manifest;
    match capture_support(loaded, dag, resolved) {
        Err(r) => {
            tracing::warn!("cuda_graph=true ignored ({r}); training runs eager.");
            None
        }
        Ok(kind) => {
            let what = match kind {
                CaptureSupport::WholeStep => "training step",
                CaptureSupport::Segment => "training forward/loss/backward",
                CaptureSupport::TwoGraphs => "training forward and backward (loss eager)",
            };
            Some((crate::capture::CaptureManager::new(what, m.capture.threshold, m.capture.max_graphs as usize), kind))
        }
    }
}

/// Whether the plan is LibreYOLO's contract: the forward and the backward captured, each alone.
pub(crate) fn two_graphs(captured: &[Vec<&str>]) -> bool {
    captured == [vec!["network.forward"], vec!["network.backward"]]
}

/// Whether one captured segment holds the whole step: forward, loss, backward, optionally the
/// gradient clip, the optimizer and the EMA.
pub(crate) fn whole_step(captured: &[Vec<&str>]) -> bool {
    let [segment] = captured else { return false };
    let core: Vec<&str> = segment.iter().copied().filter(|k| *k != "grad.clip" && *k != "schedule").collect();
    core == ["network.forward", "loss.yolo9", "network.backward", "optimizer", "ema"] || core == ["network.forward", "loss.yolo9", "network.backward", "optimizer"]
}
