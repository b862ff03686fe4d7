//! One RT-DETR decoder layer: self-attention among the queries, deformable cross-attention into
//! the encoder's maps around each query's reference box, a ReLU feed-forward; each followed by
//! its residual and a LayerNorm (post-norm). Keys `self_attn`, `norm1`, `cross_attn`, `norm2`,
//! `linear1`, `linear2`, `norm3`, in the state dict's order.

use burn::tensor::activation::relu;
use burn::tensor::{Bool, Tensor};

use crate::ctx::Ctx;
use crate::params::Builder;
use crate::transformer::{LayerNorm, Linear, MSDeformableAttention, MultiheadAttention};

/// What every decoder layer reads besides its queries.
pub struct Memory<'a> {
    /// The encoder's maps as tokens, level after level, `(B, S, C)`.
    pub tokens: Tensor<3>,
    /// Each level's `(h, w)`.
    pub shapes: &'a [(usize, usize)],
    /// Which queries may not attend to which (training's denoising groups), `(Q, Q)`.
    pub mask: Option<Tensor<2, Bool>>,
}

#[derive(Debug, Clone)]
pub struct DecoderLayer {
    self_attn: MultiheadAttention,
    norm1: LayerNorm,
    cross_attn: MSDeformableAttention,
    norm2: LayerNorm,
    linear1: Linear,
    linear2: Linear,
    norm3: LayerNorm,
}

impl DecoderLayer {
    pub fn new(b: &mut Builder, dim: usize, heads: usize, ffn: usize, levels: usize, points: usize) -> Self {
        Self {
            self_attn: MultiheadAttention::new(&mut b.pp("self_attn"), dim, heads),
            norm1: LayerNorm::new(&mut b.pp("norm1"), dim),
            cross_attn: MSDeformableAttention::new(&mut b.pp("cross_attn"), dim, heads, levels, points),
            norm2: LayerNorm::new(&mut b.pp("norm2"), dim),
            linear1: Linear::new(&mut b.pp("linear1"), dim, ffn),
            linear2: Linear::new(&mut b.pp("linear2"), ffn, dim),
            norm3: LayerNorm::new(&mut b.pp("norm3"), dim),
        }
    }

    /// `target` `(B, Q, C)`, `boxes` the reference boxes `(B, Q, 4)`, `pos` their embedding.
    pub fn forward(&self, target: Tensor<3>, boxes: Tensor<3>, pos: Tensor<3>, memory: &Memory, cx: &Ctx) -> Tensor<3> {
        let q = target.clone().add(pos.clone());
        let attended = self.self_attn.forward(q.clone(), q, target.clone(), memory.mask.clone(), cx);
        let target = self.norm1.forward(target.add(attended), cx);
        let sampled = self.cross_attn.forward(target.clone().add(pos), boxes, memory.tokens.clone(), memory.shapes, cx);
        let target = self.norm2.forward(target.add(sampled), cx);
        let ffn = self.linear2.forward(relu(self.linear1.forward(target.clone(), cx)), cx);
        // the clamp keeps an f16 residual finite, as RT-DETR's decoder does
        self.norm3.forward(target.add(ffn).clamp(-65504.0, 65504.0), cx)
    }
}
