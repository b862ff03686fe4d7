//! Detection and classification losses. Every loss here but RT-DETR's is sync-free: it only
//! launches tensor operations on fixed-size inputs and never reads a value back to the host, so
//! it can run inside a CUDA graph and leaves reading its terms for logging to the caller.
//! RT-DETR's Hungarian matching reads its cost matrices on the host (`rtdetr`).

use burn::tensor::activation::log_sigmoid;
use burn::tensor::distributed::{ReduceOperation, all_reduce};
use burn::tensor::{Device, Tensor};

pub mod anchors;
pub mod assigner;
pub mod ciou;
pub mod cross_entropy;
pub mod detr_boxes;
pub mod rtdetr;
pub mod simota;
pub mod yolo9;
pub mod yolox;

pub use cross_entropy::cross_entropy;
pub use rtdetr::{DetrTargets, DetrTerms, RtDetrLoss};
pub use yolo9::{Yolo9Loss, Yolo9Settings, Yolo9Terms};
pub use yolox::{YoloxLoss, YoloxSettings, YoloxTerms};

/// BCE with logits, elementwise: `max(x,0) - x*t + log(1 + exp(-|x|))`, written
/// `-(t ln s(x) + (1 - t) ln s(-x))`.
pub(crate) fn bce<const D: usize>(x: Tensor<D>, t: Tensor<D>) -> Tensor<D> {
    log_sigmoid(x.clone()).mul(t.clone()).add(log_sigmoid(x.neg()).mul(t.neg().add_scalar(1.0))).neg()
}

/// A loss's normaliser from this replica's `count`: `max(count, 1)` alone; over a data-parallel
/// `group`, LibreYOLO's `all_reduce_avg_scalar` — the global count clamped to 1, over the number
/// of replicas — so that averaging the replicas' gradients gives the whole batch's.
pub(crate) fn normaliser(count: Tensor<1>, group: Option<&[Device]>) -> Tensor<1> {
    match group {
        Some(devices) if devices.len() > 1 => {
            let world = devices.len() as f64;
            all_reduce(count, ReduceOperation::Mean, devices.to_vec()).resolve().clamp_min(1.0 / world)
        }
        _ => count.clamp_min(1.0),
    }
}
