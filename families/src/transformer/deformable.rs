//! Multi-scale deformable attention (Deformable DETR, as RT-DETR's decoder has it): each query
//! samples `points` locations per head and level around its reference box, bilinearly, and sums
//! them weighted by a softmax over levels x points.
//!
//! The sampling is `F.grid_sample(bilinear, zeros, align_corners=False)` written as four
//! gathers per level: the corner rows of the value map, weighted by the bilinear weights and
//! zeroed outside the map. Autodiff then gives the value its scattered gradient and the
//! locations theirs through the weights, as grid_sample's backward does.

use burn::tensor::activation::softmax;
use burn::tensor::{FloatDType, Tensor};

use super::Linear;
use crate::ctx::{Ctx, TracedOp};
use crate::params::{Builder, Init};

#[derive(Debug, Clone)]
pub struct MSDeformableAttention {
    sampling_offsets: Linear,
    attention_weights: Linear,
    value_proj: Linear,
    output_proj: Linear,
    dim: usize,
    heads: usize,
    levels: usize,
    points: usize,
}

impl MSDeformableAttention {
    /// Keys `sampling_offsets`, `attention_weights`, `value_proj`, `output_proj`, with
    /// Deformable DETR's init: offsets start on a circle of directions, one per head, at
    /// distances 1..points; uniform attention; Xavier projections with zero biases.
    pub fn new(b: &mut Builder, dim: usize, heads: usize, levels: usize, points: usize) -> Self {
        let mut directions = Vec::with_capacity(heads * levels * points * 2);
        for head in 0..heads {
            let theta = head as f32 * (2.0 * std::f32::consts::PI / heads as f32);
            let (x, y) = (theta.cos(), theta.sin());
            let norm = x.abs().max(y.abs());
            for _ in 0..levels {
                for p in 0..points {
                    directions.extend([x / norm * (p + 1) as f32, y / norm * (p + 1) as f32]);
                }
            }
        }
        let sampling_offsets = Linear::with_bias(&mut b.pp("sampling_offsets"), dim, Init::Zeros, directions);
        let attention_weights = Linear::init(&mut b.pp("attention_weights"), dim, heads * levels * points, Init::Zeros, 0.0);
        let value_proj = Linear::init(&mut b.pp("value_proj"), dim, dim, Init::Xavier, 0.0);
        let output_proj = Linear::init(&mut b.pp("output_proj"), dim, dim, Init::Xavier, 0.0);
        Self { sampling_offsets, attention_weights, value_proj, output_proj, dim, heads, levels, points }
    }

    /// `query` `(B, Q, C)`, `boxes` the reference boxes `(B, Q, 4)` (cx, cy, w, h in [0, 1]),
    /// `memory` `(B, S, C)`: the levels' tokens one after another, `shapes` their `(h, w)`.
    pub fn forward(&self, query: Tensor<3>, boxes: Tensor<3>, memory: Tensor<3>, shapes: &[(usize, usize)], cx: &Ctx) -> Tensor<3> {
        let (c, nh, nl, np) = (self.dim, self.heads, self.levels, self.points);
        assert_eq!(shapes.len(), nl, "deformable attention over {nl} levels got {} maps", shapes.len());
        let hd = c / nh;
        let [b, nq, _] = query.dims();
        let s = memory.dims()[1];
        // (B*H, S, hd): each head's values
        let value = self.value_proj.forward(memory, cx).reshape([b, s, nh, hd]).swap_dims(1, 2).reshape([b * nh, s, hd]);
        // where to sample, in f32 whatever the compute dtype: (B, Q, H, L*P, 2)
        let offsets = self.sampling_offsets.forward(query.clone(), cx).cast(FloatDType::F32).reshape([b, nq, nh, nl * np, 2]);
        let boxes = boxes.cast(FloatDType::F32).reshape([b, nq, 1, 1, 4]);
        let (centre, size) = (boxes.clone().slice_dim(4, 0..2), boxes.slice_dim(4, 2..4));
        let locations = centre.add(offsets.div_scalar(np as f64).mul(size).mul_scalar(0.5));
        let weights = softmax(self.attention_weights.forward(query, cx).reshape([b, nq, nh, nl * np]), 3);

        let mut out: Option<Tensor<3>> = None;
        let mut start = 0;
        for (level, &(h, w)) in shapes.iter().enumerate() {
            let points = level * np..(level + 1) * np;
            // (B, Q, H, P, 2) -> (B*H, Q*P, 2)
            let loc = locations.clone().slice_dim(3, points.clone()).permute([0, 2, 1, 3, 4]).reshape([b * nh, nq * np, 2]);
            let v = value.clone().slice_dim(1, start..start + h * w);
            cx.trace(|| TracedOp::GatherRows { input: v.dims(), rows: nq * np });
            let sampled = bilinear(v, loc, h, w);
            let a = weights.clone().slice_dim(3, points).permute([0, 2, 1, 3]).reshape([b * nh, nq * np, 1]);
            let level_out = sampled.mul(a.cast(FloatDType::from(value.dtype()))).reshape([b * nh, nq, np, hd]).sum_dim(2).reshape([b * nh, nq, hd]);
            out = Some(match out {
                Some(o) => o.add(level_out),
                None => level_out,
            });
            start += h * w;
        }
        let out = out.expect("at least one level").reshape([b, nh, nq, hd]).swap_dims(1, 2).reshape([b, nq, c]);
        self.output_proj.forward(out, cx)
    }
}

/// `grid_sample(value as (N, hd, h, w), 2 * loc - 1, bilinear, zeros, align_corners=False)`,
/// laid out `(N, L, hd)` for `loc` `(N, L, 2)` in [0, 1] (x, y).
fn bilinear(value: Tensor<3>, loc: Tensor<3>, h: usize, w: usize) -> Tensor<3> {
    let [n, l, _] = loc.dims();
    let hd = value.dims()[2];
    // grid_sample's unnormalisation of g = 2 * loc - 1: ((g + 1) * size - 1) / 2
    let pixel = |coord: Tensor<3>, size: usize| coord.mul_scalar(2.0).sub_scalar(1.0).add_scalar(1.0).mul_scalar(size as f64).sub_scalar(1.0).div_scalar(2.0);
    let x = pixel(loc.clone().slice_dim(2, 0..1), w);
    let y = pixel(loc.slice_dim(2, 1..2), h);
    let (x0, y0) = (x.clone().detach().floor(), y.clone().detach().floor());
    let (fx, fy) = (x.sub(x0.clone()), y.sub(y0.clone()));
    let dtype = value.dtype();
    let mut out: Option<Tensor<3>> = None;
    for (dx, dy) in [(0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (1.0, 1.0)] {
        let (cx, cy) = (x0.clone().add_scalar(dx), y0.clone().add_scalar(dy));
        let inside = cx
            .clone()
            .greater_equal_elem(0.0)
            .bool_and(cx.clone().lower_equal_elem((w - 1) as f32))
            .bool_and(cy.clone().greater_equal_elem(0.0))
            .bool_and(cy.clone().lower_equal_elem((h - 1) as f32));
        let wx = if dx == 0.0 { fx.clone().neg().add_scalar(1.0) } else { fx.clone() };
        let wy = if dy == 0.0 { fy.clone().neg().add_scalar(1.0) } else { fy.clone() };
        let weight = wx.mul(wy).mul(inside.float());
        let index = cy.clamp(0.0, (h - 1) as f32).mul_scalar(w as f64).add(cx.clamp(0.0, (w - 1) as f32)).int();
        let corner = value.clone().gather(1, index.repeat_dim(2, hd)).mul(weight.cast(FloatDType::from(dtype)));
        out = Some(match out {
            Some(o) => o.add(corner),
            None => corner,
        });
    }
    let out = out.expect("four corners");
    debug_assert_eq!(out.dims(), [n, l, hd]);
    out
}
