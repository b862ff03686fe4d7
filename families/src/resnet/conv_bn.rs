//! Conv2d (no bias) then a PyTorch-default BatchNorm, under the two names a torchvision-style
//! network gives them (`conv1` / `bn1`, or `downsample.0` / `downsample.1`); the activation is
//! the caller's.

use burn::tensor::Tensor;

use crate::blocks::{BatchNorm, ConvShape};
use crate::ctx::Ctx;
use crate::params::{Builder, ParamId};

#[derive(Debug, Clone)]
pub struct ConvBn {
    weight: ParamId,
    bn: BatchNorm,
    shape: ConvShape,
}

impl ConvBn {
    /// Keys `{conv}.weight` and `{bn}.*` under `b`.
    pub fn new(b: &mut Builder, conv: &str, bn: &str, shape: ConvShape) -> Self {
        let weight = b.pp(conv).conv_weight(shape.c_out, shape.c_in / shape.groups, shape.k);
        Self { weight, bn: BatchNorm::torch(&mut b.pp(bn), shape.c_out), shape }
    }

    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        self.bn.forward(self.shape.apply(x, cx.rank4(self.weight), None), cx, false)
    }
}
