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

    /// Whether the convolution runs as one dense convolution per group (see [`ConvShape::apply`]).
    pub fn split_groups(&self) -> bool {
        self.groups > 1 && self.groups != self.c_in
    }

    /// The convolution of `x` by `weight` (and `bias`).
    ///
    /// A grouped (not depthwise) convolution runs as one dense convolution per group,
    /// concatenated: burn-cubecl's implicit-GEMM kernels decline `groups > 1`, and the direct
    /// kernel that accepts it was 17x slower on the H200, its gradients slower still
    /// (docs/history/). Same arithmetic, so the parity with LibreYOLO is unchanged.
    pub(crate) fn apply(&self, x: Tensor<4>, weight: Tensor<4>, bias: Option<Tensor<1>>) -> Tensor<4> {
        if !self.split_groups() {
            let options = ConvOptions::new([self.stride; 2], [self.padding; 2], [1, 1], self.groups);
            return conv2d(x, weight, bias, options);
        }
        let dense = ConvOptions::new([self.stride; 2], [self.padding; 2], [1, 1], 1);
        let xs = x.chunk(self.groups, 1);
        let ws = weight.chunk(self.groups, 0);
        let bs = match bias {
            Some(b) => b.chunk(self.groups, 0).into_iter().map(Some).collect(),
            None => vec![None; self.groups],
        };
        let outs = xs.into_iter().zip(ws).zip(bs).map(|((x, w), b)| conv2d(x, w, b, dense.clone())).collect();
        Tensor::cat(outs, 1)
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

    pub fn shape(&self) -> &ConvShape {
        &self.shape
    }

    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        cx.trace(|| self.shape.traced(x.dims(), false, true, self.act));
        if cx.fusing() {
            let (w, b) = cx.fused_conv(self.weight, &self.replaced(), || self.folded(cx));
            let y = self.shape.apply(x, w, Some(b));
            return if self.act { silu(y) } else { y };
        }
        self.bn.forward(self.shape.apply(x, cx.rank4(self.weight), None), cx, self.act)
    }

    /// The convolution with its BatchNorm folded in, from the stored tensors: weight `w * s`
    /// per output channel, bias `shift` (see [`BatchNorm::fold`]).
    pub fn folded(&self, cx: &Ctx) -> (Tensor<4>, Tensor<1>) {
        let (scale, shift) = self.bn.fold(cx);
        let weight = cx.stored_rank4(self.weight).mul(scale.reshape([self.shape.c_out, 1, 1, 1]));
        (weight, shift)
    }

    /// The stored tensors the folded convolution replaces.
    pub fn replaced(&self) -> Vec<ParamId> {
        std::iter::once(self.weight).chain(self.bn.ids()).collect()
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
        self.shape.apply(x, cx.rank4(self.weight), Some(cx.rank1(self.bias)))
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Distribution, Tensor};

    use super::*;

    /// The per-group split computes what one grouped convolution computes.
    #[test]
    fn grouped_convolution_split_matches_the_grouped_kernel() {
        let device = Device::flex();
        for (k, stride, bias) in [(3, 1, false), (1, 1, true), (3, 2, true)] {
            let shape = ConvShape::new(16, 24, k, stride).groups(4);
            assert!(shape.split_groups());
            let x = Tensor::<4>::random([2, 16, 9, 11], Distribution::Normal(0.0, 1.0), &device);
            let w = Tensor::<4>::random([24, 4, k, k], Distribution::Normal(0.0, 1.0), &device);
            let b = bias.then(|| Tensor::<1>::random([24], Distribution::Normal(0.0, 1.0), &device));
            let options = ConvOptions::new([stride; 2], [shape.padding; 2], [1, 1], 4);
            let grouped = conv2d(x.clone(), w.clone(), b.clone(), options);
            let split = shape.apply(x, w, b);
            assert_eq!(split.dims(), grouped.dims());
            let err: f32 = split.sub(grouped).abs().max().into_scalar();
            assert!(err < 1e-4, "k{k} s{stride}: max |split - grouped| = {err}");
        }
        // Depthwise and dense convolutions keep the single kernel.
        assert!(!ConvShape::new(16, 16, 3, 1).groups(16).split_groups());
        assert!(!ConvShape::new(16, 16, 3, 1).split_groups());
    }
}

/// `Conv` in a topology: `args = { out, k = 1, s = 1, g = 1 }`.
pub static BLOCK: crate::block::BlockKind = crate::block::BlockKind {
    name: "Conv",
    args: &["out", "k", "s", "g"],
    head: false,
    build: |b| {
        let input = b.single()?;
        let (out, k, s, g) = (b.args.usize("out")?, b.args.usize_or("k", 1)?, b.args.usize_or("s", 1)?, b.args.usize_or("g", 1)?);
        let layer = Conv::new(b.params, ConvShape::new(input.channels, out, k, s).groups(g));
        Ok((std::rc::Rc::new(layer), Some(crate::block::Shape { channels: out, stride: input.stride * s })))
    },
};

crate::one_input_layer!(Conv);
