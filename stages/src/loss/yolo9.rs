//! The YOLOv9 detection loss (LibreYOLO's `YOLO9Loss`): task-aligned assignment, then
//! `total = box_gain * box + dfl_gain * dfl + cls_gain * cls` with
//!
//! - cls: BCE-with-logits against the soft targets, summed over all anchors and classes;
//! - box: `(1 - CIoU)` of positive anchors (in stride units), weighted by the anchor's target score;
//! - dfl: cross-entropy of the two bins around each side's target distance (clamped to
//!   `reg_max - 1.01`), averaged over the 4 sides, weighted like box;
//!
//! each divided by `cls_norm = max(sum of soft targets, 1)` (under data parallelism, the sum over
//! every replica's batch, divided by the number of replicas). Positives are selected by masks,
//! not by indexing, so no value is read back and no shape depends on the data.

use burn::tensor::activation::{log_softmax, softmax};
use burn::tensor::{Device, Int, Tensor};

use super::anchors::Anchors;
use super::assigner::{AssignerConfig, Assignment, assign};
use super::ciou::{Boxes, ciou};

/// Gains and assigner settings (`[loss]` of the manifest).
#[derive(Debug, Clone, Copy)]
pub struct Yolo9Loss {
    pub nc: usize,
    pub reg_max: usize,
    pub box_gain: f64,
    pub dfl_gain: f64,
    pub cls_gain: f64,
    pub assigner: AssignerConfig,
}

/// The `[loss]` section of a YOLOv9 manifest: LibreYOLO's gains and assigner settings.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Yolo9Settings {
    pub box_gain: f64,
    pub dfl_gain: f64,
    pub cls_gain: f64,
    /// Candidates per ground truth in the task-aligned assigner.
    pub topk: usize,
    /// Exponent of the class score in the alignment metric.
    pub alpha: f64,
    /// Exponent of the IoU in the alignment metric.
    pub beta: f64,
}

impl Default for Yolo9Settings {
    /// LibreYOLO 1.6's `YOLO9Config`.
    fn default() -> Self {
        Self { box_gain: 7.5, dfl_gain: 1.5, cls_gain: 0.5, topk: 10, alpha: 0.5, beta: 6.0 }
    }
}

impl Yolo9Loss {
    /// The loss of `settings` for `nc` classes and a head with `reg_max` bins a side.
    pub fn new(settings: Yolo9Settings, nc: usize, reg_max: usize) -> Self {
        let Yolo9Settings { box_gain, dfl_gain, cls_gain, topk, alpha, beta } = settings;
        Self { nc, reg_max, box_gain, dfl_gain, cls_gain, assigner: AssignerConfig { topk, alpha, beta, reg_max } }
    }

    /// LibreYOLO 1.6's loss for `nc` classes (`reg_max` 16): what its parity fixtures were made with.
    pub fn libreyolo_default(nc: usize) -> Self {
        Self::new(Yolo9Settings::default(), nc, 16)
    }
}

impl Yolo9Terms {
    /// The weighted parts under LibreYOLO's names (`box_loss`, `dfl_loss`, `cls_loss`).
    pub fn named(&self) -> crate::stage::LossTerms {
        crate::stage::LossTerms {
            total: self.total.clone(),
            parts: vec![("box", self.box_loss.clone()), ("dfl", self.dfl_loss.clone()), ("cls", self.cls_loss.clone())],
        }
    }
}

/// The loss and its parts, all on the device (0-dim values as shape `[1]`).
#[derive(Debug, Clone)]
pub struct Yolo9Terms {
    pub total: Tensor<1>,
    /// Weighted terms (`box_gain * box`, ...), LibreYOLO's `box_loss` / `dfl_loss` / `cls_loss`.
    pub box_loss: Tensor<1>,
    pub dfl_loss: Tensor<1>,
    pub cls_loss: Tensor<1>,
    /// Positive anchors per image (LibreYOLO's `num_fg`).
    pub num_fg: Tensor<1>,
    /// The divisor of all three terms.
    pub cls_norm: Tensor<1>,
    pub assignment: Assignment,
}

impl Yolo9Loss {
    /// `maps`: raw head maps `(B, 4*reg_max + nc, H_i, W_i)` at `strides`; `targets`:
    /// `(B, M, 5)` rows `[cls, x1, y1, x2, y2]` normalised to [0, 1], padding rows with class -1.
    pub fn compute(&self, maps: &[Tensor<4>], strides: &[usize], targets: Tensor<3>) -> Yolo9Terms {
        self.compute_over(maps, strides, targets, None)
    }

    /// [`compute`](Self::compute) on one replica of a data-parallel run over `group`: the
    /// normaliser is LibreYOLO's under DDP, the global sum of soft targets (clamped to 1) over
    /// the number of replicas, so that averaging the replicas' gradients gives the gradient of
    /// the whole batch's loss.
    pub fn compute_over(&self, maps: &[Tensor<4>], strides: &[usize], targets: Tensor<3>, group: Option<&[Device]>) -> Yolo9Terms {
        let device = maps[0].device();
        let b = maps[0].dims()[0];
        let sizes: Vec<(usize, usize)> = maps.iter().map(|m| (m.dims()[2], m.dims()[3])).collect();
        let (height, width) = (sizes[0].0 * strides[0], sizes[0].1 * strides[0]);
        let anchors = Anchors::new(&sizes, strides, &device);
        let a = anchors.count;
        let r = self.reg_max;

        // Predictions per anchor: class logits (B, A, nc), bin logits (B, A, 4, r), boxes.
        let (mut cls, mut bins) = (vec![], vec![]);
        for map in maps {
            let [_, c, h, w] = map.dims();
            let flat = map.clone().reshape([b, c, h * w]);
            let parts = flat.split_with_sizes(vec![4 * r, self.nc], 1);
            cls.push(parts[1].clone().swap_dims(1, 2));
            bins.push(parts[0].clone().reshape([b, 4, r, h * w]).permute([0, 3, 1, 2]));
        }
        let pred_cls = Tensor::cat(cls, 1); // (B, A, nc)
        let pred_bins = Tensor::cat(bins, 1); // (B, A, 4, r)
        let project = Tensor::<1, Int>::arange(0..r as i64, &device).float().reshape([1, 1, 1, r]);
        let dist = softmax(pred_bins.clone(), 3).mul(project).sum_dim(3).reshape([b, a, 4]);
        let ltrb = dist.mul(anchors.strides.clone());
        let lt = ltrb.clone().narrow(2, 0, 2);
        let rb = ltrb.narrow(2, 2, 2);
        let pred_boxes = Tensor::cat(vec![anchors.points.clone().sub(lt), anchors.points.clone().add(rb)], 2); // (B, A, 4) px

        // Assignment on detached predictions, targets in pixels.
        let scale = Tensor::<1>::from_floats([1.0, width as f32, height as f32, width as f32, height as f32], &device).reshape([1, 1, 5]);
        let targets_px = targets.mul(scale);
        let assignment = assign(self.assigner, &anchors, targets_px, pred_cls.clone().detach(), pred_boxes.clone().detach());

        let positive = assignment.positive.clone(); // (B, A)
        let scores = assignment.scores.clone(); // (B, A, nc)
        let cls_norm = super::normaliser(scores.clone().sum(), group); // [1]
        let box_norm = scores.clone().sum_dim(2).reshape([b, a]); // zero where not positive

        // cls: BCE with logits against the soft targets, summed.
        let bce = super::bce(pred_cls, scores);
        let cls_loss = bce.sum().div(cls_norm.clone());

        // box: 1 - CIoU in stride units. Anchors that are not positive compare a unit box
        // with itself (CIoU 1, zero loss and gradient) so that nothing there can be NaN.
        let stride = anchors.strides.clone(); // (1, A, 1)
        let keep = positive.clone().reshape([b, a, 1]);
        let pred_norm = pred_boxes.div(stride.clone());
        let unit = Tensor::<1>::from_floats([0.0, 0.0, 1.0, 1.0], &device).reshape([1, 1, 4]);
        let target_norm = assignment.boxes.clone().div(stride.clone()).mul(keep.clone()).add(unit.clone().mul(keep.clone().neg().add_scalar(1.0)));
        let pred_safe = pred_norm.mul(keep.clone()).add(unit.mul(keep.clone().neg().add_scalar(1.0)));
        let iou = ciou(&Boxes::<2>::from_last_axis(pred_safe), &Boxes::<2>::from_last_axis(target_norm.clone())); // (B, A)
        let box_loss = iou.neg().add_scalar(1.0).mul(box_norm.clone()).sum().div(cls_norm.clone());

        // dfl: target distances in stride units, clamped to [0, reg_max - 1.01].
        let centre = anchors.points.clone().div(stride); // (1, A, 2)
        let target_lt = target_norm.clone().narrow(2, 0, 2);
        let target_rb = target_norm.narrow(2, 2, 2);
        let target_dist = Tensor::cat(vec![centre.clone().sub(target_lt), target_rb.sub(centre)], 2).clamp(0.0, r as f64 - 1.01); // (B, A, 4)
        let left = target_dist.clone().floor();
        let weight_left = left.clone().add_scalar(1.0).sub(target_dist.clone());
        let weight_right = target_dist.sub(left.clone());
        let log_probs = log_softmax(pred_bins, 3); // (B, A, 4, r)
        let left_index = left.clone().int().reshape([b, a, 4, 1]);
        let right_index = left.add_scalar(1.0).int().reshape([b, a, 4, 1]);
        let ce_left = log_probs.clone().gather(3, left_index).reshape([b, a, 4]).neg();
        let ce_right = log_probs.gather(3, right_index).reshape([b, a, 4]).neg();
        let per_side = ce_left.mul(weight_left).add(ce_right.mul(weight_right));
        let dfl_loss = per_side.mean_dim(2).reshape([b, a]).mul(box_norm).sum().div(cls_norm.clone());

        let box_loss = box_loss.mul_scalar(self.box_gain);
        let dfl_loss = dfl_loss.mul_scalar(self.dfl_gain);
        let cls_loss = cls_loss.mul_scalar(self.cls_gain);
        let total = box_loss.clone().add(dfl_loss.clone()).add(cls_loss.clone());
        let num_fg = positive.sum().div_scalar(b as f64);
        Yolo9Terms { total, box_loss, dfl_loss, cls_loss, num_fg, cls_norm, assignment }
    }
}
