//! RT-DETR's convolutions: `ConvNormLayer` (Conv2d without bias, a PyTorch-default BatchNorm,
//! then ReLU, SiLU or nothing; keys `conv.weight`, `norm.*`) and the hybrid encoder's input
//! projection (the same without activation, as `nn.Sequential`: keys `0.weight`, `1.*`).

use std::rc::Rc;

use burn::tensor::Tensor;
use burn::tensor::activation::relu;

use crate::block::{BlockKind, Shape};
use crate::blocks::{BatchNorm, ConvShape};
use crate::ctx::Ctx;
use crate::params::{Builder, ParamId};

/// The activation after a [`ConvNorm`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    None,
    Relu,
    Silu,
}

#[derive(Debug, Clone)]
pub struct ConvNorm {
    weight: ParamId,
    norm: BatchNorm,
    shape: ConvShape,
    act: Act,
}

impl ConvNorm {
    /// Keys `conv.weight` and `norm.*` under `b`.
    pub fn new(b: &mut Builder, shape: ConvShape, act: Act) -> Self {
        Self::named(b, "conv", "norm", shape, act)
    }

    /// Keys `{conv}.weight` and `{norm}.*` under `b`.
    pub fn named(b: &mut Builder, conv: &str, norm: &str, shape: ConvShape, act: Act) -> Self {
        let weight = b.pp(conv).conv_weight(shape.c_out, shape.c_in, shape.k);
        Self { weight, norm: BatchNorm::torch(&mut b.pp(norm), shape.c_out), shape, act }
    }

    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        let y = self.shape.apply(x, cx.rank4(self.weight), None);
        match self.act {
            Act::Silu => self.norm.forward(y, cx, true),
            Act::Relu => relu(self.norm.forward(y, cx, false)),
            Act::None => self.norm.forward(y, cx, false),
        }
    }
}

/// `ConvNorm` in a topology: `args = { out, k = 1, s = 1, silu = false }` (the hybrid encoder's
/// lateral and downsampling convolutions are SiLU ones).
pub static BLOCK: BlockKind = BlockKind {
    name: "ConvNorm",
    args: &["out", "k", "s", "silu"],
    head: false,
    build: |b| {
        let input = b.single()?;
        let (out, k, s) = (b.args.usize("out")?, b.args.usize_or("k", 1)?, b.args.usize_or("s", 1)?);
        let act = if b.args.bool_or("silu", false)? { Act::Silu } else { Act::None };
        let layer = ConvNorm::new(b.params, ConvShape::new(input.channels, out, k, s), act);
        Ok((Rc::new(layer), Some(Shape { channels: out, stride: input.stride * s })))
    },
};

crate::one_input_layer!(ConvNorm);

/// `Projection` in a topology: the hybrid encoder's `input_proj.{i}`, a 1x1 Conv2d and a
/// BatchNorm (`args = { out }`).
pub static PROJECTION: BlockKind = BlockKind {
    name: "Projection",
    args: &["out"],
    head: false,
    build: |b| {
        let input = b.single()?;
        let out = b.args.usize("out")?;
        let layer = ConvNorm::named(b.params, "0", "1", ConvShape::new(input.channels, out, 1, 1), Act::None);
        Ok((Rc::new(layer), Some(Shape { channels: out, stride: input.stride })))
    },
};
