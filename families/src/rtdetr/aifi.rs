//! AIFI, the hybrid encoder's attention on its top level: the map's tokens through transformer
//! encoder layers (post-norm, GELU feed-forward) with a 2D sine-cosine position embedding added
//! to the queries and keys, then back to a map.

use std::rc::Rc;

use burn::tensor::activation::gelu;
use burn::tensor::{Tensor, TensorData};

use crate::block::BlockKind;
use crate::ctx::Ctx;
use crate::params::Builder;
use crate::topology::TopologyError;
use crate::transformer::{LayerNorm, Linear, MultiheadAttention, map, tokens};

/// `nn.TransformerEncoderLayer`-style, post-norm: keys `self_attn`, `linear1`, `linear2`,
/// `norm1`, `norm2`.
#[derive(Debug, Clone)]
struct EncoderLayer {
    self_attn: MultiheadAttention,
    linear1: Linear,
    linear2: Linear,
    norm1: LayerNorm,
    norm2: LayerNorm,
}

impl EncoderLayer {
    fn new(b: &mut Builder, dim: usize, heads: usize, ffn: usize) -> Self {
        Self {
            self_attn: MultiheadAttention::new(&mut b.pp("self_attn"), dim, heads),
            linear1: Linear::new(&mut b.pp("linear1"), dim, ffn),
            linear2: Linear::new(&mut b.pp("linear2"), ffn, dim),
            norm1: LayerNorm::new(&mut b.pp("norm1"), dim),
            norm2: LayerNorm::new(&mut b.pp("norm2"), dim),
        }
    }

    fn forward(&self, src: Tensor<3>, pos: Tensor<3>, cx: &Ctx) -> Tensor<3> {
        let q = src.clone().add(pos);
        let attended = self.self_attn.forward(q.clone(), q, src.clone(), None, cx);
        let src = self.norm1.forward(src.add(attended), cx);
        let ffn = self.linear2.forward(gelu(self.linear1.forward(src.clone(), cx)), cx);
        self.norm2.forward(src.add(ffn), cx)
    }
}

#[derive(Debug, Clone)]
pub struct Aifi {
    layers: Vec<EncoderLayer>,
    dim: usize,
    temperature: f32,
}

impl Aifi {
    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        let [_, _, h, w] = x.dims();
        let pos = Tensor::<3>::from_data(TensorData::new(sincos(w, h, self.dim, self.temperature), [1, h * w, self.dim]), &x.device())
            .cast(burn::tensor::FloatDType::from(x.dtype()));
        let out = self.layers.iter().fold(tokens(x), |src, layer| layer.forward(src, pos.clone(), cx));
        map(out, h, w)
    }
}

/// `HybridEncoder.build_2d_sincos_position_embedding(w, h, dim, temperature)`, row by row: the
/// embedding of token `k` is `[sin(a*o), cos(a*o), sin(b*o), cos(b*o)]` with `a = k / h`,
/// `b = k % h` and `o = 1 / temperature^(i / (dim/4))`. (Its meshgrid is indexed `ij` over
/// (w, h) while the tokens are row-major, so on a square map `a` is the row; kept as it is,
/// since trained weights depend on it.)
pub fn sincos(w: usize, h: usize, dim: usize, temperature: f32) -> Vec<f32> {
    let quarter = dim / 4;
    let omega: Vec<f32> = (0..quarter).map(|i| 1.0 / temperature.powf(i as f32 / quarter as f32)).collect();
    let mut out = Vec::with_capacity(w * h * dim);
    for k in 0..w * h {
        let (a, b) = ((k / h) as f32, (k % h) as f32);
        out.extend(omega.iter().map(|o| (a * o).sin()));
        out.extend(omega.iter().map(|o| (a * o).cos()));
        out.extend(omega.iter().map(|o| (b * o).sin()));
        out.extend(omega.iter().map(|o| (b * o).cos()));
    }
    out
}

/// `AIFI` in a topology (the hybrid encoder's `encoder.{i}`): `args = { heads = 8, ffn = 1024,
/// layers = 1 }`, keys `layers.{j}.*`.
pub static BLOCK: BlockKind = BlockKind {
    name: "AIFI",
    args: &["heads", "ffn", "layers"],
    head: false,
    build: |b| {
        let input = b.single()?;
        let (heads, ffn, n) = (b.args.usize_or("heads", 8)?, b.args.usize_or("ffn", 1024)?, b.args.usize_or("layers", 1)?);
        let dim = input.channels;
        if !dim.is_multiple_of(4) || !dim.is_multiple_of(heads) {
            return Err(TopologyError::new(
                b.args.layer,
                Some("args.heads"),
                format!("`{}`: {dim} channels must divide by 4 (the position embedding) and by {heads} heads", b.name),
            ));
        }
        let mut layers_b = b.params.pp("layers");
        let layers = (0..n).map(|j| EncoderLayer::new(&mut layers_b.pp(j), dim, heads, ffn)).collect();
        Ok((Rc::new(Aifi { layers, dim, temperature: 10000.0 }), Some(input)))
    },
};

crate::one_input_layer!(Aifi);
