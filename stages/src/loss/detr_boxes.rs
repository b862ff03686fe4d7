//! Box arithmetic of the DETR losses (LibreYOLO's `models/rtdetr/box_ops.py`): (cx, cy, w, h)
//! to corners, and the IoU and generalized IoU of boxes pairwise (every box with every other,
//! the matching's cost) or paired (row i with row i, the loss of matched pairs).

use burn::tensor::Tensor;

/// `box_ops`' guard on its divisions: `inter / (union + 1e-6)`, `(enclosing - union) /
/// (enclosing + 1e-6)`. Small boxes feel it (a box of area 0.01 of the image moves its IoU by
/// 1e-4 of itself), so it is kept exactly.
const EPS: f64 = 1e-6;

/// `(N, 4)` (cx, cy, w, h) -> (x1, y1, x2, y2).
pub fn xyxy(b: Tensor<2>) -> Tensor<2> {
    let (c, s) = (b.clone().slice_dim(1, 0..2), b.slice_dim(1, 2..4).mul_scalar(0.5));
    Tensor::cat(vec![c.clone().sub(s.clone()), c.add(s)], 1)
}

/// Corners of `(N, 4)` boxes as four `(N, 1)` columns.
fn corners(b: Tensor<2>) -> [Tensor<2>; 4] {
    [0, 1, 2, 3].map(|i| b.clone().slice_dim(1, i..i + 1))
}

/// IoU and the union of corner boxes `a` and `b` of one broadcast shape, with the enclosing
/// box's area: `box_iou`'s and `generalized_box_iou`'s arithmetic.
fn iou_parts<const D: usize>(a: [Tensor<D>; 4], b: [Tensor<D>; 4]) -> (Tensor<D>, Tensor<D>, Tensor<D>) {
    let [ax1, ay1, ax2, ay2] = a;
    let [bx1, by1, bx2, by2] = b;
    let area_a = ax2.clone().sub(ax1.clone()).mul(ay2.clone().sub(ay1.clone()));
    let area_b = bx2.clone().sub(bx1.clone()).mul(by2.clone().sub(by1.clone()));
    let iw = ax2.clone().min_pair(bx2.clone()).sub(ax1.clone().max_pair(bx1.clone())).clamp_min(0.0);
    let ih = ay2.clone().min_pair(by2.clone()).sub(ay1.clone().max_pair(by1.clone())).clamp_min(0.0);
    let inter = iw.mul(ih);
    let union = area_a.add(area_b).sub(inter.clone());
    let ew = ax2.max_pair(bx2).sub(ax1.min_pair(bx1)).clamp_min(0.0);
    let eh = ay2.max_pair(by2).sub(ay1.min_pair(by1)).clamp_min(0.0);
    (inter.div(union.clone().add_scalar(EPS)), union, ew.mul(eh))
}

/// `generalized_box_iou(a, b)` of corner boxes `(N, 4)` and `(M, 4)`: `(N, M)`.
pub fn giou_matrix(a: Tensor<2>, b: Tensor<2>) -> Tensor<2> {
    let (n, m) = (a.dims()[0], b.dims()[0]);
    let a = corners(a).map(|t| t.expand([n, m]));
    let b = corners(b).map(|t| t.reshape([1, m]).expand([n, m]));
    let (iou, union, enclosing) = iou_parts(a, b);
    iou.sub(enclosing.clone().sub(union).div(enclosing.add_scalar(EPS)))
}

/// IoU of corner boxes row by row (`diag(box_iou(a, b))`): `(N, 1)`.
pub fn iou_paired(a: Tensor<2>, b: Tensor<2>) -> Tensor<2> {
    iou_parts(corners(a), corners(b)).0
}

/// Generalized IoU row by row (`diag(generalized_box_iou(a, b))`): `(N, 1)`.
pub fn giou_paired(a: Tensor<2>, b: Tensor<2>) -> Tensor<2> {
    let (iou, union, enclosing) = iou_parts(corners(a), corners(b));
    iou.sub(enclosing.clone().sub(union).div(enclosing.add_scalar(EPS)))
}
