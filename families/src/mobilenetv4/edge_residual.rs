//! EdgeResidual: timm's 'er' block (FusedIB, MobileNetV4-m/l's first stage): a `k`x`k`
//! convolution with stride `s` expanding to `make_divisible(in * e)` channels, BatchNorm and ReLU
//! (`conv_exp`, `bn1`), a 1x1 projection with BatchNorm (`conv_pwl`, `bn2`), and the shortcut
//! when the shape is kept.

use std::rc::Rc;

use burn::tensor::Tensor;
use burn::tensor::activation::relu;

use super::make_divisible;
use crate::block::{BlockKind, Shape};
use crate::blocks::ConvShape;
use crate::ctx::Ctx;
use crate::resnet::ConvBn;

#[derive(Debug, Clone)]
pub struct EdgeResidual {
    exp: ConvBn,
    pwl: ConvBn,
    skip: bool,
}

impl EdgeResidual {
    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        let y = self.pwl.forward(relu(self.exp.forward(x.clone(), cx)), cx);
        if self.skip { y.add(x) } else { y }
    }
}

/// `EdgeResidual` in a topology: `args = { out, k = 3, s = 1, e }`.
pub static BLOCK: BlockKind = BlockKind {
    name: "EdgeResidual",
    args: &["out", "k", "s", "e"],
    head: false,
    build: |b| {
        let input = b.single()?;
        let (out, k, s, e) = (b.args.usize("out")?, b.args.usize_or("k", 3)?, b.args.usize_or("s", 1)?, b.args.usize("e")?);
        let mid = make_divisible((input.channels * e) as f64);
        // In the state dict's order: conv_exp, bn1, conv_pwl, bn2.
        let exp = ConvBn::new(b.params, "conv_exp", "bn1", ConvShape::new(input.channels, mid, k, s));
        let pwl = ConvBn::new(b.params, "conv_pwl", "bn2", ConvShape::new(mid, out, 1, 1));
        let skip = input.channels == out && s == 1;
        Ok((Rc::new(EdgeResidual { exp, pwl, skip }), Some(Shape { channels: out, stride: input.stride * s })))
    },
};

crate::one_input_layer!(EdgeResidual);
