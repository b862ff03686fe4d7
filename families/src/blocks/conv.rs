//! Convolutions: LibreYOLO's `Conv` (Conv2d without bias, BatchNorm, SiLU) and a plain
//! `Conv2d` with bias (the last layer of each detection tower).

use burn::tensor::Tensor;
use burn::tensor::activation::silu;
use burn::tensor::module::conv2d;
use burn::tensor::ops::ConvOptions;

use super::batch_norm::BatchNorm;
use crate::ctx::{Ctx, TracedOp};
use crate::params::{Builder, ParamId};

/// Shape of a convolution.
#[derive(Debug, Clone, Copy)]
pub struct ConvShape {
    pub c_in: usize,
    pub c_out: usize,
    pub k: usize,
    pub stride: usize,
    pub padding: usize,
    pub groups: usize,
}

impl ConvShape {
    /// A `k`x`k` convolution with "same" padding (`(k - 1) / 2`), stride `s`.
    pub fn new(c_in: usize, c_out: usize, k: usize, stride: usize) -> Self {
        Self { c_in, c_out, k, stride, padding: (k - 1) / 2, groups: 1 }
    }

    pub fn groups(mut self, groups: usize) -> Self {
        self.groups = groups;
        self
    }

    pub fn padding(mut self, padding: usize) -> Self {
        self.padding = padding;
        self
    }

    fn traced(&self, input: [usize; 4], bias: bool, bn: bool, act: bool) -> TracedOp {
        TracedOp::Conv { input, c_out: self.c_out, k: self.k, stride: self.stride, padding: self.padding, groups: self.groups, bias, bn, act }
    }

    fn options(&self) -> ConvOptions<2> {
        ConvOptions::new([self.stride; 2], [self.padding; 2], [1, 1], self.groups)
    }
}

/// Conv2d (no bias) -> BatchNorm -> SiLU (or no activation).
#[derive(Debug, Clone)]
pub struct Conv {
    weight: ParamId,
    bn: BatchNorm,
    shape: ConvShape,
    act: bool,
}

impl Conv {
    /// Conv-BN-SiLU under `b` (keys `conv.weight`, `bn.*`).
    pub fn new(b: &mut Builder, shape: ConvShape) -> Self {
        Self::with_activation(b, shape, true)
    }

    pub fn with_activation(b: &mut Builder, shape: ConvShape, act: bool) -> Self {
        let weight = b.pp("conv").conv_weight(shape.c_out, shape.c_in / shape.groups, shape.k);
        let bn = BatchNorm::new(&mut b.pp("bn"), shape.c_out);
        Self { weight, bn, shape, act }
    }

    pub fn c_out(&self) -> usize {
        self.shape.c_out
    }

    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        cx.trace(|| self.shape.traced(x.dims(), false, true, self.act));
        let y = self.bn.forward(conv2d(x, cx.rank4(self.weight), None, self.shape.options()), cx);
        if self.act { silu(y) } else { y }
    }
}

/// A plain Conv2d with bias.
#[derive(Debug, Clone)]
pub struct Conv2d {
    weight: ParamId,
    bias: ParamId,
    shape: ConvShape,
}

impl Conv2d {
    /// Keys `weight` and `bias` directly under `b`.
    pub fn new(b: &mut Builder, shape: ConvShape) -> Self {
        let fan_in = shape.c_in / shape.groups * shape.k * shape.k;
        let weight = b.conv_weight(shape.c_out, shape.c_in / shape.groups, shape.k);
        let bias = b.conv_bias(shape.c_out, fan_in);
        Self { weight, bias, shape }
    }

    /// Keys `weight` and `bias` under `b`, with every bias set to `bias` (a detection prior).
    pub fn with_bias(b: &mut Builder, shape: ConvShape, bias: f32) -> Self {
        let weight = b.conv_weight(shape.c_out, shape.c_in / shape.groups, shape.k);
        let bias = b.constant("bias", crate::params::Role::Bias, shape.c_out, bias);
        Self { weight, bias, shape }
    }

    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        cx.trace(|| self.shape.traced(x.dims(), true, false, false));
        conv2d(x, cx.rank4(self.weight), Some(cx.rank1(self.bias)), self.shape.options())
    }
}
