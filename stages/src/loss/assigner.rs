//! Task-aligned assignment (TAL) of ground-truth boxes to anchors, as YOLOv9 (LibreYOLO's
//! `BoxMatcher`) does it, on fixed-size padded targets and without any host read:
//!
//! 1. candidates: anchor centres inside the box whose farthest side is within `reg_max - 1.01`
//!    strides;
//! 2. alignment `CIoU(gt, pred).clamp(0, 1)^beta * sigmoid(cls[gt])^alpha`;
//! 3. the top-k candidates per ground truth (exactly k, as `torch.topk`: a tie at the k-th
//!    value does not add anchors; positive alignment only);
//! 4. a ground truth with no anchor but a positive best alignment gets that anchor;
//! 5. an anchor claimed by several ground truths keeps the one of highest IoU;
//! 6. soft class target `onehot * align / max_align(gt) * max_iou(gt)`.
//!
//! Data-dependent selections (`mask_select`, `nonzero`) are replaced by masks, so every shape
//! is fixed by (batch, target rows, anchors).

use burn::tensor::activation::sigmoid;
use burn::tensor::{IndexingUpdateOp, Int, Tensor};

use super::anchors::Anchors;
use super::ciou::{Boxes, ciou};

/// Settings of the assigner (LibreYOLO: top-k 10, alpha 0.5, beta 6.0).
#[derive(Debug, Clone, Copy)]
pub struct AssignerConfig {
    pub topk: usize,
    /// Exponent of the class score.
    pub alpha: f64,
    /// Exponent of the IoU.
    pub beta: f64,
    pub reg_max: usize,
}

/// The assignment, one row per anchor.
#[derive(Debug, Clone)]
pub struct Assignment {
    /// `(B, A)`: 1.0 for positive anchors.
    pub positive: Tensor<2>,
    /// `(B, A)`: index of the assigned target row (meaningful where positive).
    pub gt_index: Tensor<2, Int>,
    /// `(B, A, 4)`: assigned box, xyxy pixels (meaningful where positive).
    pub boxes: Tensor<3>,
    /// `(B, A, nc)`: soft class targets (zero where not positive).
    pub scores: Tensor<3>,
}

/// Assigns `targets` `(B, M, 5)` rows `[cls, x1, y1, x2, y2]` in pixels (padding rows have
/// class -1 and a zero box) to anchors, given detached predictions: class logits `(B, A, nc)`
/// and boxes `(B, A, 4)` xyxy pixels.
pub fn assign(cfg: AssignerConfig, anchors: &Anchors, targets: Tensor<3>, pred_cls: Tensor<3>, pred_boxes: Tensor<3>) -> Assignment {
    let [b, m, _] = targets.dims();
    let [_, a, nc] = pred_cls.dims();
    let device = targets.device();
    let parts = targets.split_with_sizes(vec![1, 4], 2);
    let gt_cls = parts[0].clone().clamp_min(0.0); // (B, M, 1)
    let gt_boxes = parts[1].clone(); // (B, M, 4)

    // 1. Candidate anchors: (B, M, A).
    let gt = Boxes::<2>::from_last_axis(gt_boxes.clone()); // each (B, M)
    let gt4 = Boxes::<3> {
        x1: gt.x1.clone().unsqueeze_dim::<3>(2),
        y1: gt.y1.clone().unsqueeze_dim::<3>(2),
        x2: gt.x2.clone().unsqueeze_dim::<3>(2),
        y2: gt.y2.clone().unsqueeze_dim::<3>(2),
    }; // each (B, M, 1)
    let points = anchors.points.clone(); // (1, A, 2)
    let ax = points.clone().narrow(2, 0, 1).reshape([1, 1, a]);
    let ay = points.narrow(2, 1, 1).reshape([1, 1, a]);
    let stride = anchors.strides.clone().reshape([1, 1, a]);
    let left = ax.clone().sub(gt4.x1.clone()).div(stride.clone());
    let top = ay.clone().sub(gt4.y1.clone()).div(stride.clone());
    let right = gt4.x2.clone().sub(ax).div(stride.clone());
    let bottom = gt4.y2.clone().sub(ay).div(stride);
    let nearest = left.clone().min_pair(top.clone()).min_pair(right.clone()).min_pair(bottom.clone());
    let farthest = left.max_pair(top).max_pair(right).max_pair(bottom);
    let limit = cfg.reg_max as f64 - 1.01;
    let in_grid = nearest.greater_equal_elem(0.0).bool_and(farthest.lower_equal_elem(limit)).float();

    // 2. Alignment metric: (B, M, A).
    let pred = Boxes::<2>::from_last_axis(pred_boxes); // each (B, A)
    let pred3 = Boxes::<3> {
        x1: pred.x1.unsqueeze_dim::<3>(1),
        y1: pred.y1.unsqueeze_dim::<3>(1),
        x2: pred.x2.unsqueeze_dim::<3>(1),
        y2: pred.y2.unsqueeze_dim::<3>(1),
    }; // each (B, 1, A)
    let iou = ciou(&gt4, &pred3).clamp(0.0, 1.0);
    let class_index = gt_cls.clone().int().expand([b, m, a]);
    let cls_prob = sigmoid(pred_cls).swap_dims(1, 2).gather(1, class_index); // (B, M, A)
    let align = iou.clone().powf_scalar(cfg.beta).mul(cls_prob.powf_scalar(cfg.alpha));

    // 3. Top-k candidates per ground truth.
    //    The mask is scattered from the top-k indices, not `>= k-th value`: with ties (bf16
    //    logits make equal class scores common early in training) a threshold keeps more than k.
    let candidates = in_grid.mul(align.clone());
    let k = cfg.topk.min(a);
    // `argtopk`, not `topk_with_indices`: the autodiff backend runs the latter through the
    // default sort, which reads the tensor on the host (fatal inside a CUDA graph).
    let top = candidates.clone().argtopk(k, 2); // (B, M, k), distinct per row
    let in_top = Tensor::<3>::zeros([b, m, a], &device).scatter(2, top, Tensor::ones([b, m, k], &device), IndexingUpdateOp::Add);
    let mut chosen = in_top.mul(candidates.greater_elem(0.0).float());

    // 4. A ground truth without anchors but with a positive best alignment gets its best
    //    anchor, even outside the candidate grid.
    let (best_align, best_anchor) = align.clone().max_dim_with_indices(2); // (B, M, 1)
    let anchor_ids = Tensor::<1, Int>::arange(0..a as i64, &device).reshape([1, 1, a]);
    let best_anchor_mask = anchor_ids.expand([b, m, a]).equal(best_anchor.expand([b, m, a])).float(); // (B, M, A)
    let without = chosen.clone().sum_dim(2).equal_elem(0.0).bool_and(best_align.greater_elem(0.0)).float(); // (B, M, 1)
    chosen = best_anchor_mask.mul(without.clone()).add(chosen.mul(without.neg().add_scalar(1.0)));

    // 5. Anchors claimed by several ground truths keep the one of highest IoU.
    let claims = chosen.clone().sum_dim(1); // (B, 1, A)
    let duplicate = claims.greater_elem(1.0).float();
    let best_gt = chosen.clone().mul(iou.clone()).argmax(1); // (B, 1, A)
    let gt_ids = Tensor::<1, Int>::arange(0..m as i64, &device).reshape([1, m, 1]);
    let best_gt_mask = gt_ids.clone().expand([b, m, a]).equal(best_gt.expand([b, m, a])).float(); // (B, M, A)
    chosen = best_gt_mask.mul(duplicate.clone()).add(chosen.mul(duplicate.neg().add_scalar(1.0)));

    // Each positive anchor now has exactly one ground truth.
    let positive = chosen.clone().sum_dim(1).greater_elem(0.0).float().reshape([b, a]);
    let gt_index = chosen.clone().mul(gt_ids.float()).sum_dim(1).reshape([b, a]).int();

    // 6. Targets per anchor.
    let box_index = gt_index.clone().reshape([b, a, 1]).expand([b, a, 4]);
    let boxes = gt_boxes.gather(1, box_index);
    let anchor_cls = gt_cls.gather(1, gt_index.clone().reshape([b, a, 1])); // (B, A, 1)
    let class_ids = Tensor::<1, Int>::arange(0..nc as i64, &device).float().reshape([1, 1, nc]);
    let onehot = class_ids.expand([b, a, nc]).equal(anchor_cls.expand([b, a, nc])).float(); // (B, A, nc)
    let chosen_align = align.mul(chosen.clone());
    let chosen_iou = iou.mul(chosen.clone());
    let max_align = chosen_align.clone().max_dim(2); // (B, M, 1)
    let max_iou = chosen_iou.max_dim(2); // (B, M, 1)
    let normalized = chosen_align.div(max_align.add_scalar(1e-9)).mul(max_iou); // zero where not chosen
    let weight = normalized.mul(chosen).sum_dim(1).reshape([b, a, 1]);
    let scores = onehot.mul(weight).mul(positive.clone().reshape([b, a, 1]));
    Assignment { positive, gt_index, boxes, scores }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Tensor, TensorData};

    use super::*;

    /// One ground truth over twelve anchors whose alignments all tie: `torch.topk(10)` keeps
    /// ten of them, and so must the assignment (a `>= k-th value` threshold kept all twelve).
    #[test]
    fn tied_alignments_keep_exactly_top_k_anchors() {
        let device = Device::flex();
        let a = 12;
        // Anchors on one row (centres x = 4 + 8i, y = 4), all inside the box; identical
        // predicted boxes and class logits make every alignment equal.
        let anchors = Anchors::new(&[(1, a)], &[8], &device);
        let targets = Tensor::<3>::from_data(TensorData::new(vec![0.0f32, 0.0, 0.0, 96.0, 40.0], [1, 1, 5]), &device);
        let pred_cls = Tensor::<3>::zeros([1, a, 2], &device);
        let pred_boxes = Tensor::<3>::from_data(TensorData::new([2.0f32, 2.0, 90.0, 38.0].repeat(a), [1, a, 4]), &device);
        let cfg = AssignerConfig { topk: 10, alpha: 0.5, beta: 6.0, reg_max: 16 };
        let out = assign(cfg, &anchors, targets, pred_cls, pred_boxes);
        let positives: f32 = out.positive.sum().into_scalar();
        assert_eq!(positives, 10.0, "ties at the 10th alignment must not add anchors");
    }
}
