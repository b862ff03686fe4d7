//! Complete IoU (CIoU) of box pairs, with LibreYOLO's eps 1e-7 and its aspect-ratio weight
//! `alpha` held constant (no gradient), as `torch.no_grad()` does there.

use std::f64::consts::PI;

use burn::tensor::Tensor;

const EPS: f64 = 1e-7;

/// Boxes as four same-shaped coordinate tensors (xyxy); shapes broadcast against each other.
#[derive(Debug, Clone)]
pub struct Boxes<const D: usize> {
    pub x1: Tensor<D>,
    pub y1: Tensor<D>,
    pub x2: Tensor<D>,
    pub y2: Tensor<D>,
}

impl<const D: usize> Boxes<D> {
    /// Splits a `(..., 4)` tensor into coordinates of rank `D` (the last axis dropped).
    pub fn from_last_axis<const E: usize>(t: Tensor<E>) -> Self {
        let mut parts = t.chunk(4, E - 1).into_iter().map(|p| p.squeeze_dim::<D>(E - 1));
        let mut next = || parts.next().expect("four coordinates");
        Self { x1: next(), y1: next(), x2: next(), y2: next() }
    }

    pub fn width(&self) -> Tensor<D> {
        self.x2.clone().sub(self.x1.clone())
    }

    pub fn height(&self) -> Tensor<D> {
        self.y2.clone().sub(self.y1.clone())
    }
}

/// `CIoU(a, b)`, broadcast over the shapes of `a` and `b`.
pub fn ciou<const D: usize>(a: &Boxes<D>, b: &Boxes<D>) -> Tensor<D> {
    let inter_w = a.x2.clone().min_pair(b.x2.clone()).sub(a.x1.clone().max_pair(b.x1.clone())).clamp_min(0.0);
    let inter_h = a.y2.clone().min_pair(b.y2.clone()).sub(a.y1.clone().max_pair(b.y1.clone())).clamp_min(0.0);
    let inter = inter_w.mul(inter_h);
    let area_a = a.width().mul(a.height());
    let area_b = b.width().mul(b.height());
    let union = area_a.add(area_b).sub(inter.clone());
    let iou = inter.div(union.add_scalar(EPS));

    let half = |p: Tensor<D>, q: Tensor<D>| p.add(q).div_scalar(2.0);
    let dx = half(a.x2.clone(), a.x1.clone()).sub(half(b.x2.clone(), b.x1.clone()));
    let dy = half(a.y2.clone(), a.y1.clone()).sub(half(b.y2.clone(), b.y1.clone()));
    let centre_dist = dx.square().add(dy.square());
    let cw = a.x2.clone().max_pair(b.x2.clone()).sub(a.x1.clone().min_pair(b.x1.clone()));
    let ch = a.y2.clone().max_pair(b.y2.clone()).sub(a.y1.clone().min_pair(b.y1.clone()));
    let diag = cw.square().add(ch.square()).add_scalar(EPS);
    let diou = iou.clone().sub(centre_dist.div(diag));

    let arctan = a.width().div(a.height().add_scalar(EPS)).atan().sub(b.width().div(b.height().add_scalar(EPS)).atan());
    let v = arctan.square().mul_scalar(4.0 / (PI * PI));
    let alpha = v.clone().div(v.clone().sub(iou).add_scalar(1.0 + EPS)).detach();
    diou.sub(alpha.mul(v))
}
