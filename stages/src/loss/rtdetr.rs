//! RT-DETR's loss (LibreYOLO's `RTDETRLoss`: `SetCriterion` with a `HungarianMatcher`), for
//! every output level — the last decoder layer, the other decoder layers, the encoder's chosen
//! queries — each matched to the ground truth on its own:
//!
//! - matching: one-to-one (SciPy's `linear_sum_assignment`, here the `lsap` crate's translation
//!   of it) on the cost `5 * L1 + 2 * focal class cost + 2 * (-GIoU)`, the focal cost with
//!   alpha 0.25, gamma 2;
//! - `vfl`: varifocal BCE over every query and class, targets the matched pairs' IoU at their
//!   class, weights `0.75 * sigmoid(x)^2` off target plus the target; `bbox`: 5 x L1 of the
//!   matched boxes (cx, cy, w, h); `giou`: 2 x (1 - GIoU) of the matched boxes;
//!
//! each summed and divided by the batch's box count (at least 1; under data parallelism the mean
//! over replicas, as LibreYOLO's `all_reduce_avg_scalar_tensor`). The terms a run logs sum each
//! kind over the levels, as LibreYOLO's trainer does (`get_loss_components`).
//!
//! In training the decoder's denoising groups add the same three terms for every decoder layer,
//! their positive queries matched to their boxes by construction, divided by the box count
//! times the number of groups.
//!
//! Unlike the other losses here, matching reads the cost matrices on the host: one read a step
//! for all levels.

use burn::tensor::activation::sigmoid;
use burn::tensor::{Device, IndexingUpdateOp, Int, Tensor, TensorData};

use super::detr_boxes::{giou_matrix, giou_paired, iou_paired, xyxy};
use super::{bce, normaliser};
pub use libreyolo_families::rtdetr::DetrTargets;
use libreyolo_families::rtdetr::positive_matches;

/// One output level: boxes `(B, Q, 4)` (cx, cy, w, h) after the sigmoid and logits `(B, Q, nc)`.
#[derive(Debug, Clone)]
pub struct Level {
    pub boxes: Tensor<3>,
    pub logits: Tensor<3>,
}

impl Level {
    /// Every decoder layer's boxes `(L, B, Q, 4)` and logits `(L, B, Q, nc)` as levels, layer
    /// by layer.
    pub fn per_layer(boxes: &Tensor<4>, logits: &Tensor<4>) -> Vec<Level> {
        let [l, b, q, nc] = logits.dims();
        (0..l)
            .map(|i| Level {
                boxes: boxes.clone().slice_dim(0, i..i + 1).reshape([b, q, 4]),
                logits: logits.clone().slice_dim(0, i..i + 1).reshape([b, q, nc]),
            })
            .collect()
    }

    /// A decoder's levels in LibreYOLO's order: the last layer, the others, then the encoder's
    /// chosen queries (`(1, B, Q, 4)` boxes and `(1, B, Q, nc)` logits).
    pub fn in_order(boxes: &Tensor<4>, logits: &Tensor<4>, enc_boxes: &Tensor<4>, enc_logits: &Tensor<4>) -> Vec<Level> {
        let mut levels = Self::per_layer(boxes, logits);
        levels.rotate_right(1);
        levels.extend(Self::per_layer(enc_boxes, enc_logits));
        levels
    }
}

/// Per image, the matched `(query, target)` pairs, by query.
pub type Matches = Vec<Vec<(usize, usize)>>;

/// Every decoder layer's outputs for the denoising queries, `groups` groups of them.
#[derive(Debug, Clone)]
pub struct DenoisingLevels {
    pub levels: Vec<Level>,
    pub groups: usize,
}

impl DenoisingLevels {
    /// The denoising slots' outputs of every layer (`(L, B, S, 4)` boxes, `(L, B, S, nc)`
    /// logits), the first `queries` of each image's slots real, the rest padding.
    pub fn of(boxes: &Tensor<4>, logits: &Tensor<4>, layout: &DenoisingLayout) -> Self {
        let real = |t: &Tensor<4>| t.clone().slice_dim(2, 0..layout.queries);
        Self { levels: Level::per_layer(&real(boxes), &real(logits)), groups: layout.groups }
    }
}

/// How a batch's denoising queries are laid out, for the loss: `queries` real queries an image
/// (before the padding slots) in `groups` groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DenoisingLayout {
    pub queries: usize,
    pub groups: usize,
}

impl crate::stage::HostValue for DenoisingLayout {
    const TY: &'static str = "a denoising layout";
}

/// The matching costs' weights and the focal cost's settings.
const COST_CLASS: f64 = 2.0;
const COST_BBOX: f64 = 5.0;
const COST_GIOU: f64 = 2.0;
const FOCAL_ALPHA: f64 = 0.25;
/// VFL's weight of the negatives, and both focusing exponents.
const VFL_ALPHA: f64 = 0.75;
const GAMMA: f64 = 2.0;
/// The terms' weights.
const WEIGHT_BBOX: f64 = 5.0;
const WEIGHT_GIOU: f64 = 2.0;

/// The loss and what it is made of (0-dim values as shape `[1]`).
#[derive(Debug, Clone)]
pub struct DetrTerms {
    pub total: Tensor<1>,
    /// Each kind summed over the levels, weighted: `vfl`, `bbox`, `giou`.
    pub vfl: Tensor<1>,
    pub bbox: Tensor<1>,
    pub giou: Tensor<1>,
    /// Each level's `(vfl, bbox, giou)`, in the order of the levels given, then the denoising
    /// levels'.
    pub levels: Vec<[Tensor<1>; 3]>,
    pub matches: Vec<Matches>,
}

impl DetrTerms {
    pub fn named(&self) -> crate::stage::LossTerms {
        crate::stage::LossTerms { total: self.total.clone(), parts: vec![("vfl", self.vfl.clone()), ("bbox", self.bbox.clone()), ("giou", self.giou.clone())] }
    }
}

/// The matching cost of every query of every image with every box of the batch, `(B*Q, T)`:
/// LibreYOLO's `compute_cost_matrix`.
fn cost_matrix(level: &Level, labels: &Tensor<1, Int>, boxes: &Tensor<2>) -> Tensor<2> {
    let [b, q, nc] = level.logits.dims();
    let p = sigmoid(level.logits.clone().reshape([b * q, nc])).select(1, labels.clone());
    let neg = p.clone().powf_scalar(GAMMA).mul(p.clone().neg().add_scalar(1.0 + 1e-8).log().neg()).mul_scalar(1.0 - FOCAL_ALPHA);
    let pos = p.clone().neg().add_scalar(1.0).powf_scalar(GAMMA).mul(p.add_scalar(1e-8).log().neg()).mul_scalar(FOCAL_ALPHA);
    let out = level.boxes.clone().reshape([b * q, 4]);
    let t = boxes.dims()[0];
    let l1 = out.clone().reshape([b * q, 1, 4]).sub(boxes.clone().reshape([1, t, 4])).abs().sum_dim(2).reshape([b * q, t]);
    let giou = giou_matrix(xyxy(out), xyxy(boxes.clone()));
    l1.mul_scalar(COST_BBOX).add(pos.sub(neg).mul_scalar(COST_CLASS)).add(giou.neg().mul_scalar(COST_GIOU))
}

/// Every level matched: the cost matrices read in one transfer, then one assignment per image
/// and level.
pub fn match_levels(levels: &[Level], targets: &DetrTargets, device: &Device) -> Vec<Matches> {
    let t = targets.count();
    let [b, q, _] = levels[0].logits.dims();
    if t == 0 {
        return vec![vec![vec![]; b]; levels.len()];
    }
    let labels: Vec<i64> = targets.labels.iter().flatten().map(|&l| l as i64).collect();
    let labels = Tensor::<1, Int>::from_data(TensorData::new(labels, [t]), device);
    let boxes: Vec<f32> = targets.boxes.iter().flatten().flatten().copied().collect();
    let boxes = Tensor::<2>::from_data(TensorData::new(boxes, [t, 4]), device);
    let costs = Tensor::cat(levels.iter().map(|l| cost_matrix(l, &labels, &boxes)).collect(), 0);
    let costs: Vec<f32> = costs.into_data().convert::<f32>().try_into_vec::<f32>().expect("f32 costs");
    (0..levels.len())
        .map(|level| {
            let mut first = 0;
            (0..b)
                .map(|image| {
                    let n = targets.labels[image].len();
                    let rows = (0..q).map(|query| (level * b + image) * q + query);
                    let cost: Vec<f64> = rows.flat_map(|r| costs[r * t + first..r * t + first + n].iter().map(|&c| c as f64)).collect();
                    first += n;
                    let (queries, boxes) = lsap::solve(q, n, &cost, false).expect("a finite cost matrix has an assignment");
                    queries.into_iter().zip(boxes).collect()
                })
                .collect()
        })
        .collect()
}

/// RT-DETR's loss (its classes are the logits' width).
#[derive(Debug, Clone, Copy, Default)]
pub struct RtDetrLoss;

impl RtDetrLoss {
    /// `levels`: the last decoder layer's outputs first, then the others and the encoder's, in
    /// f32; `denoising`: the denoising queries' outputs, when the decoder had them; `targets`
    /// the batch's boxes. `group`: the data-parallel replicas, if any.
    pub fn compute(&self, levels: &[Level], denoising: Option<&DenoisingLevels>, targets: &DetrTargets, group: Option<&[Device]>) -> DetrTerms {
        let device = levels[0].logits.device();
        let matches = match_levels(levels, targets, &device);
        let count = Tensor::<1>::from_data(TensorData::new(vec![targets.count() as f32], [1]), &device);
        let num_boxes = normaliser(count, group);
        let mut per_level: Vec<[Tensor<1>; 3]> = levels.iter().zip(&matches).map(|(l, m)| self.level_terms(l, targets, m, &num_boxes)).collect();
        if let Some(dn) = denoising {
            let counts: Vec<usize> = targets.labels.iter().map(Vec::len).collect();
            let m = positive_matches(&counts, dn.groups, targets.max_per_image());
            let num_boxes = num_boxes.clone().mul_scalar(dn.groups as f64);
            per_level.extend(dn.levels.iter().map(|l| self.level_terms(l, targets, &m, &num_boxes)));
        }
        let sum = |k: usize| per_level.iter().map(|t| t[k].clone()).reduce(|a, b| a.add(b)).expect("one level at least");
        let (vfl, bbox, giou) = (sum(0), sum(1), sum(2));
        DetrTerms { total: vfl.clone().add(bbox.clone()).add(giou.clone()), vfl, bbox, giou, levels: per_level, matches }
    }

    /// One level's `[vfl, bbox, giou]`, weighted, divided by `num_boxes`.
    fn level_terms(&self, level: &Level, targets: &DetrTargets, matches: &Matches, num_boxes: &Tensor<1>) -> [Tensor<1>; 3] {
        let [b, q, nc] = level.logits.dims();
        let device = level.logits.device();
        let (mut rows, mut classes, mut truth) = (vec![], vec![], vec![]);
        for (image, pairs) in matches.iter().enumerate() {
            for &(query, target) in pairs {
                let row = (image * q + query) as i64;
                rows.push(row);
                classes.push(row * nc as i64 + targets.labels[image][target] as i64);
                truth.extend(targets.boxes[image][target]);
            }
        }
        let n = rows.len();
        let logits = level.logits.clone().reshape([b * q * nc]);
        let zero = || level.boxes.clone().sum().mul_scalar(0.0);
        if n == 0 {
            let none = Tensor::<1>::zeros([b * q * nc], &device);
            let vfl = self.varifocal(logits, none.clone(), none).div(num_boxes.clone());
            return [vfl, zero(), zero()];
        }
        let rows = Tensor::<1, Int>::from_data(TensorData::new(rows, [n]), &device);
        let classes = Tensor::<1, Int>::from_data(TensorData::new(classes, [n]), &device);
        let truth = Tensor::<2>::from_data(TensorData::new(truth, [n, 4]), &device);
        let matched = level.boxes.clone().reshape([b * q, 4]).select(0, rows);
        let (a, t) = (xyxy(matched.clone()), xyxy(truth.clone()));
        let iou = iou_paired(a.clone(), t.clone()).detach().reshape([n]);
        let place = |values: Tensor<1>| Tensor::<1>::zeros([b * q * nc], &device).select_assign(0, classes.clone(), values, IndexingUpdateOp::Add);
        let vfl = self.varifocal(logits, place(Tensor::ones([n], &device)), place(iou)).div(num_boxes.clone());
        let l1 = matched.sub(truth).abs().sum().mul_scalar(WEIGHT_BBOX).div(num_boxes.clone());
        let giou = giou_paired(a, t).neg().add_scalar(1.0).sum().mul_scalar(WEIGHT_GIOU).div(num_boxes.clone());
        [vfl, l1, giou]
    }

    /// Varifocal BCE summed over every query and class: `target` the matched (query, class)
    /// cells, `score` their IoU there.
    fn varifocal(&self, logits: Tensor<1>, target: Tensor<1>, score: Tensor<1>) -> Tensor<1> {
        let p = sigmoid(logits.clone()).detach();
        let weight = p.powf_scalar(GAMMA).mul_scalar(VFL_ALPHA).mul(target.neg().add_scalar(1.0)).add(score.clone());
        bce(logits, score).mul(weight).sum()
    }
}
