//! SimOTA, YOLOX's assignment of ground truths to anchors (LibreYOLO's `get_assignments` and
//! `simota_matching`), on fixed-size padded targets and without any host read:
//!
//! 1. geometry: an anchor centre `(x + 0.5, y + 0.5) * stride` within `center_radius` strides of
//!    a ground truth's centre (strictly) is in its centre region; the candidates are the anchors
//!    in some ground truth's region;
//! 2. pairwise IoU of each ground truth with each candidate's predicted box, and the cost
//!    `BCE(sqrt(sigmoid(cls) * sigmoid(obj)), onehot) + 3 * -ln(IoU + 1e-8) + 1e6 * outside`;
//! 3. `dynamic_k = max(floor(sum of the ground truth's `candidates` largest IoUs), 1)`, and the
//!    ground truth takes its `dynamic_k` cheapest candidates;
//! 4. an anchor taken by several ground truths keeps the cheapest.
//!
//! LibreYOLO loops over images and selects the candidates by indexing (a host read each). Here
//! every image's candidates are a mask over all anchors, the padding rows of the targets are
//! masked out, and "the `dynamic_k` cheapest" is the rank of each of the `candidates` cheapest
//! below `dynamic_k` (`dynamic_k` never exceeds `candidates`), so every shape is fixed by
//! (batch, target rows, anchors).

use burn::tensor::activation::sigmoid;
use burn::tensor::{IndexingUpdateOp, Int, Tensor};

/// A cost no candidate reaches: the anchors outside every centre region and the padding rows.
const FAR: f64 = 1e10;

/// Settings of the assigner (LibreYOLO: radius 1.5 strides, 10 candidates for dynamic_k).
#[derive(Debug, Clone, Copy)]
pub struct SimOtaConfig {
    pub center_radius: f64,
    pub candidates: usize,
}

/// Ground truths in pixels, `(B, M)` each: centre, size, class, and 1.0 for real rows.
#[derive(Debug, Clone)]
pub struct Truths {
    pub cx: Tensor<2>,
    pub cy: Tensor<2>,
    pub w: Tensor<2>,
    pub h: Tensor<2>,
    pub class: Tensor<2>,
    pub valid: Tensor<2>,
}

/// Anchors and predicted boxes: the cell `(gx, gy)` and stride `s` of each anchor, `(1, A)`;
/// the predicted centre and size in pixels, `(B, A)`.
#[derive(Debug, Clone)]
pub struct Predicted {
    pub gx: Tensor<2>,
    pub gy: Tensor<2>,
    pub stride: Tensor<2>,
    pub cx: Tensor<2>,
    pub cy: Tensor<2>,
    pub w: Tensor<2>,
    pub h: Tensor<2>,
}

/// The assignment, one row per anchor.
#[derive(Debug, Clone)]
pub struct Matching {
    /// `(B, A)`: 1.0 for foreground anchors.
    pub fg: Tensor<2>,
    /// `(B, A)`: the ground-truth row of each anchor (meaningful where foreground).
    pub gt_index: Tensor<2, Int>,
    /// `(B, A)`: IoU of the anchor's box with its ground truth (zero where background).
    pub iou: Tensor<2>,
    /// `(B, M)`: the anchors each ground truth asked for (zero for padding rows).
    pub dynamic_k: Tensor<2>,
}

/// IoU of boxes given by centre and size, broadcast, `eps` added to the union (LibreYOLO's
/// `bboxes_iou(xyxy=False)` has none, its `IoULoss` 1e-16).
pub fn iou_cxcywh<const D: usize>(a: [&Tensor<D>; 4], b: [&Tensor<D>; 4], eps: f64) -> Tensor<D> {
    let [acx, acy, aw, ah] = a;
    let [bcx, bcy, bw, bh] = b;
    let lo = |c: &Tensor<D>, s: &Tensor<D>| c.clone().sub(s.clone().div_scalar(2.0));
    let hi = |c: &Tensor<D>, s: &Tensor<D>| c.clone().add(s.clone().div_scalar(2.0));
    let l = lo(acx, aw).max_pair(lo(bcx, bw));
    let t = lo(acy, ah).max_pair(lo(bcy, bh));
    let r = hi(acx, aw).min_pair(hi(bcx, bw));
    let btm = hi(acy, ah).min_pair(hi(bcy, bh));
    let overlap = l.clone().lower(r.clone()).bool_and(t.clone().lower(btm.clone())).float();
    let inter = r.sub(l).mul(btm.sub(t)).mul(overlap);
    let union = aw.clone().mul(ah.clone()).add(bw.clone().mul(bh.clone())).sub(inter.clone());
    inter.div(union.add_scalar(eps))
}

/// Assigns `truths` to anchors given detached class and objectness logits, `(B, A, nc)` and
/// `(B, A, 1)`.
pub fn assign(cfg: SimOtaConfig, truths: &Truths, pred: &Predicted, cls: Tensor<3>, obj: Tensor<3>) -> Matching {
    let [b, m] = truths.cx.dims();
    let [_, a, _] = cls.dims();
    let device = cls.device();
    let col = |t: &Tensor<2>| t.clone().reshape([b, m, 1]); // a ground truth per row
    let row = |t: &Tensor<2>| t.clone().unsqueeze_dim::<3>(1); // an anchor per column
    let valid = col(&truths.valid);

    // 1. Centre regions, (B, M, A), and the candidates, (B, 1, A).
    let reach = row(&pred.stride).mul_scalar(cfg.center_radius);
    let ax = row(&pred.gx).add_scalar(0.5).mul(row(&pred.stride));
    let ay = row(&pred.gy).add_scalar(0.5).mul(row(&pred.stride));
    let (gcx, gcy) = (col(&truths.cx), col(&truths.cy));
    // LibreYOLO's `c_l = x - (cx - r) > 0` and `c_r = (cx + r) - x > 0`, in its order of operations.
    let inside = |x: &Tensor<3>, centre: &Tensor<3>| {
        let after_left = x.clone().sub(centre.clone().sub(reach.clone())).greater_elem(0.0);
        after_left.bool_and(centre.clone().add(reach.clone()).sub(x.clone()).greater_elem(0.0))
    };
    let in_center = inside(&ax, &gcx).bool_and(inside(&ay, &gcy)).float().mul(valid.clone());
    let candidate = in_center.clone().max_dim(1); // (B, 1, A)
    // (B, M, A): the pairs LibreYOLO computes a cost for. The others are masked by selection,
    // not multiplied by 0: a padding row against a vanishing predicted box is 0/0.
    let outside_pairs = candidate.clone().mul(valid.clone()).lower_elem(0.5);

    // 2. IoU and cost.
    let iou = iou_cxcywh([&gcx, &gcy, &col(&truths.w), &col(&truths.h)], [&row(&pred.cx), &row(&pred.cy), &row(&pred.w), &row(&pred.h)], 0.0)
        .mask_fill(outside_pairs.clone(), 0.0);
    let p = sigmoid(cls).mul(sigmoid(obj)).sqrt(); // (B, A, nc)
    let neg_log = |t: Tensor<3>| t.log().clamp_min(-100.0).neg(); // F.binary_cross_entropy's clamp
    let miss = neg_log(p.clone().neg().add_scalar(1.0)); // -ln(1 - p)
    let hit = neg_log(p);
    let class = truths.class.clone().int().reshape([b, m, 1]).expand([b, m, a]);
    let at_class = |t: Tensor<3>| t.swap_dims(1, 2).gather(1, class.clone()); // (B, M, A)
    let cls_cost = miss.clone().sum_dim(2).reshape([b, 1, a]).sub(at_class(miss)).add(at_class(hit));
    let cost = cls_cost
        .add(iou.clone().add_scalar(1e-8).log().neg().mul_scalar(3.0))
        .add(in_center.neg().add_scalar(1.0).mul_scalar(1e6))
        .mask_fill(outside_pairs, FAR);

    // 3. dynamic_k and the cheapest candidates.
    let k = cfg.candidates.min(a);
    let top_iou = iou.clone().gather(2, iou.clone().argtopk(k, 2)).sum_dim(2); // (B, M, 1)
    let dynamic_k = top_iou.floor().clamp_min(1.0).mul(valid.clone());
    let cheapest = cost.clone().neg().argtopk(k, 2); // (B, M, k), in no particular order
    let c = cost.clone().gather(2, cheapest.clone());
    // Rank among the k: cheaper ones, then equal ones earlier in the list.
    let cj = c.clone().reshape([b, m, k, 1]);
    let ci = c.clone().reshape([b, m, 1, k]);
    let earlier = Tensor::<1, Int>::arange(0..(k * k) as i64, &device).reshape([k, k]);
    let earlier = earlier.clone().remainder_scalar(k as i64).lower(earlier.div_scalar(k as i64)).float().reshape([1, 1, k, k]);
    let rank = ci.clone().lower(cj.clone()).float().add(ci.equal(cj).float().mul(earlier)).sum_dim(3).reshape([b, m, k]);
    let keep = rank.lower(dynamic_k.clone()).bool_and(c.lower_elem(FAR / 2.0)).float();
    let mut matching = Tensor::<3>::zeros([b, m, a], &device).scatter(2, cheapest, keep, IndexingUpdateOp::Add);

    // 4. Anchors taken by several ground truths keep the cheapest.
    let takers = matching.clone().sum_dim(1); // (B, 1, A)
    let several = takers.clone().greater_elem(1.0).float();
    let gt_ids = Tensor::<1, Int>::arange(0..m as i64, &device).reshape([1, m, 1]);
    let cheapest_gt = gt_ids.clone().expand([b, m, a]).equal(cost.argmin(1).expand([b, m, a])).float();
    matching = cheapest_gt.mul(several.clone()).add(matching.mul(several.neg().add_scalar(1.0)));

    let fg = takers.greater_elem(0.0).float().reshape([b, a]);
    let gt_index = matching.clone().mul(gt_ids.float()).sum_dim(1).reshape([b, a]).int();
    let iou = matching.mul(iou).sum_dim(1).reshape([b, a]);
    Matching { fg, gt_index, iou, dynamic_k: dynamic_k.reshape([b, m]) }
}
