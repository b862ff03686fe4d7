//! `nn.MultiheadAttention(batch_first=True)`: the query, key and value projections as one
//! `in_proj_weight` `(3C, C)` and `in_proj_bias`, scaled dot-product attention per head, and
//! `out_proj`. Keys as PyTorch names them, so DETR state dicts load as they are.

use burn::tensor::activation::softmax;
use burn::tensor::{Bool, Tensor};

use super::Linear;
use crate::ctx::Ctx;
use crate::params::{Builder, Init, ParamId, Role};

#[derive(Debug, Clone)]
pub struct MultiheadAttention {
    in_weight: ParamId,
    in_bias: ParamId,
    out: Linear,
    dim: usize,
    heads: usize,
}

impl MultiheadAttention {
    /// PyTorch's init: `in_proj_weight` Xavier-uniform, both biases zero, `out_proj.weight`
    /// `nn.Linear`'s default.
    pub fn new(b: &mut Builder, dim: usize, heads: usize) -> Self {
        assert!(dim.is_multiple_of(heads), "attention width {dim} is not a multiple of {heads} heads");
        let in_weight = b.matrix("in_proj_weight", 3 * dim, dim, Init::Xavier);
        let in_bias = b.constant("in_proj_bias", Role::Bias, 3 * dim, 0.0);
        // PyTorch's default weight and a zero bias (`nn.MultiheadAttention`'s `out_proj`)
        let out = Linear::init(&mut b.pp("out_proj"), dim, dim, Init::Torch, 0.0);
        Self { in_weight, in_bias, out, dim, heads }
    }

    /// Attention of `query` `(B, Nq, C)` over `key` and `value` `(B, Nk, C)`; `mask` `(Nq, Nk)`:
    /// true where a query may not attend (PyTorch's boolean `attn_mask`).
    pub fn forward(&self, query: Tensor<3>, key: Tensor<3>, value: Tensor<3>, mask: Option<Tensor<2, Bool>>, cx: &Ctx) -> Tensor<3> {
        let (c, h) = (self.dim, self.heads);
        let hd = c / h;
        let [b, nq, _] = query.dims();
        let nk = key.dims()[1];
        let (w, bias) = (cx.rank2(self.in_weight), cx.rank1(self.in_bias));
        let project = |x: Tensor<3>, part: usize, n: usize| {
            let wp = w.clone().slice([part * c..(part + 1) * c, 0..c]);
            let bp = bias.clone().slice_dim(0, part * c..(part + 1) * c);
            let y = x.reshape([b * n, c]).matmul(wp.transpose()).add(bp.unsqueeze::<2>());
            y.reshape([b, n, h, hd]).swap_dims(1, 2) // (B, H, N, hd)
        };
        // q scaled before the product, as F.multi_head_attention_forward does
        let q = project(query, 0, nq).mul_scalar(1.0 / (hd as f64).sqrt());
        let k = project(key, 1, nk);
        let v = project(value, 2, nk);
        let mut scores = q.matmul(k.swap_dims(2, 3)); // (B, H, Nq, Nk)
        if let Some(mask) = mask {
            let mask = mask.reshape([1, 1, nq, nk]).expand([b, h, nq, nk]);
            scores = scores.mask_fill(mask, f32::NEG_INFINITY);
        }
        let attn = softmax(scores, 3);
        let out = attn.matmul(v).swap_dims(1, 2).reshape([b, nq, c]);
        self.out.forward(out, cx)
    }
}
