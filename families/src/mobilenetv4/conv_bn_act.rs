//! ConvBnAct: timm's 'cn' block, a `k`x`k` convolution with stride `s`, BatchNorm and ReLU (keys
//! `conv.weight`, `bn1.*`).

use std::rc::Rc;

use burn::tensor::Tensor;
use burn::tensor::activation::relu;

use crate::block::{BlockKind, Shape};
use crate::blocks::ConvShape;
use crate::ctx::Ctx;
use crate::resnet::ConvBn;

#[derive(Debug, Clone)]
pub struct ConvBnAct {
    conv: ConvBn,
}

impl ConvBnAct {
    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        relu(self.conv.forward(x, cx))
    }
}

/// `ConvBnAct` in a topology: `args = { out, k = 3, s = 1 }`.
pub static BLOCK: BlockKind = BlockKind {
    name: "ConvBnAct",
    args: &["out", "k", "s"],
    head: false,
    build: |b| {
        let input = b.single()?;
        let (out, k, s) = (b.args.usize("out")?, b.args.usize_or("k", 3)?, b.args.usize_or("s", 1)?);
        let conv = ConvBn::new(b.params, "conv", "bn1", ConvShape::new(input.channels, out, k, s));
        Ok((Rc::new(ConvBnAct { conv }), Some(Shape { channels: out, stride: input.stride * s })))
    },
};

crate::one_input_layer!(ConvBnAct);
