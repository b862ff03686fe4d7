//! CSPRepLayer, the hybrid encoder's fusion block: two 1x1 SiLU branches, one through `n`
//! RepVGG blocks, summed, then a 1x1 SiLU projection when the hidden width differs.
//!
//! ```text
//! x -> conv1 (1x1) -> bottlenecks: n x RepVgg -> x1
//! x -> conv2 (1x1)                             -> x2
//! conv3 (1x1) (x1 + x2)            hidden = int(out * expansion)
//! RepVgg: silu(conv1 (3x3, BN) (x) + conv2 (1x1, BN) (x))
//! ```

use std::rc::Rc;

use burn::tensor::Tensor;
use burn::tensor::activation::silu;

use super::conv_norm::{Act, ConvNorm};
use crate::block::{BlockKind, Shape};
use crate::blocks::ConvShape;
use crate::ctx::Ctx;
use crate::params::Builder;
use crate::topology::TopologyError;

#[derive(Debug, Clone)]
struct RepVgg {
    conv1: ConvNorm,
    conv2: ConvNorm,
}

impl RepVgg {
    fn new(b: &mut Builder, c: usize) -> Self {
        let conv1 = ConvNorm::new(&mut b.pp("conv1"), ConvShape::new(c, c, 3, 1), Act::None);
        let conv2 = ConvNorm::new(&mut b.pp("conv2"), ConvShape::new(c, c, 1, 1), Act::None);
        Self { conv1, conv2 }
    }

    fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        silu(self.conv1.forward(x.clone(), cx).add(self.conv2.forward(x, cx)))
    }
}

#[derive(Debug, Clone)]
pub struct CSPRepLayer {
    conv1: ConvNorm,
    conv2: ConvNorm,
    bottlenecks: Vec<RepVgg>,
    conv3: Option<ConvNorm>,
}

impl CSPRepLayer {
    /// Keys `conv1`, `conv2`, `bottlenecks.{i}.conv1/conv2`, `conv3` (when hidden != out).
    pub fn new(b: &mut Builder, c_in: usize, c_out: usize, n: usize, hidden: usize) -> Self {
        let conv1 = ConvNorm::new(&mut b.pp("conv1"), ConvShape::new(c_in, hidden, 1, 1), Act::Silu);
        let conv2 = ConvNorm::new(&mut b.pp("conv2"), ConvShape::new(c_in, hidden, 1, 1), Act::Silu);
        let mut blocks = b.pp("bottlenecks");
        let bottlenecks = (0..n).map(|i| RepVgg::new(&mut blocks.pp(i), hidden)).collect();
        let conv3 = (hidden != c_out).then(|| ConvNorm::new(&mut b.pp("conv3"), ConvShape::new(hidden, c_out, 1, 1), Act::Silu));
        Self { conv1, conv2, bottlenecks, conv3 }
    }

    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        let x1 = self.bottlenecks.iter().fold(self.conv1.forward(x.clone(), cx), |y, m| m.forward(y, cx));
        let y = x1.add(self.conv2.forward(x, cx));
        match &self.conv3 {
            Some(conv3) => conv3.forward(y, cx),
            None => y,
        }
    }
}

/// `CSPRepLayer` in a topology: `args = { out, n = 3, expansion_pct = 100 }` (RT-DETR-r18's
/// encoder: expansion 0.5, `expansion_pct = 50`).
pub static BLOCK: BlockKind = BlockKind {
    name: "CSPRepLayer",
    args: &["out", "n", "expansion_pct"],
    head: false,
    build: |b| {
        let input = b.single()?;
        let (out, n, pct) = (b.args.usize("out")?, b.args.usize_or("n", 3)?, b.args.usize_or("expansion_pct", 100)?);
        let hidden = out * pct / 100;
        if hidden == 0 {
            return Err(TopologyError::new(b.args.layer, Some("args.expansion_pct"), format!("`{}`: {pct}% of {out} channels is no channel", b.name)));
        }
        let layer = CSPRepLayer::new(b.params, input.channels, out, n, hidden);
        Ok((Rc::new(layer), Some(Shape { channels: out, stride: input.stride })))
    },
};

crate::one_input_layer!(CSPRepLayer);
