//! Convolutions: LibreYOLO's `Conv` (Conv2d without bias, BatchNorm, SiLU) and a plain
//! `Conv2d` with bias (the last layer of each detection tower).

use burn::tensor::Tensor;
use burn::tensor::activation::silu;
use burn::tensor::module::conv2d;
use burn::tensor::ops::{ConvOptions, PadMode};

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

    /// How the convolution runs (see [`Grouping`]).
    pub fn grouping(&self) -> Grouping {
        if self.groups == 1 || self.groups == self.c_in {
            Grouping::Single
        } else if self.groups <= BLOCK_DIAGONAL_MAX_GROUPS && block_diagonal_chosen() {
            Grouping::BlockDiagonal
        } else {
            Grouping::PerGroup
        }
    }

    /// The convolution of `x` by `weight` (and `bias`), run as [`ConvShape::grouping`] says. Same
    /// arithmetic every way (the zero blocks add exact zeros), so the parity with LibreYOLO is
    /// unchanged.
    pub(crate) fn apply(&self, x: Tensor<4>, weight: Tensor<4>, bias: Option<Tensor<1>>) -> Tensor<4> {
        self.apply_as(self.grouping(), x, weight, bias)
    }

    /// The convolution run as `grouping` says (a grouped one as either dense form).
    fn apply_as(&self, grouping: Grouping, x: Tensor<4>, weight: Tensor<4>, bias: Option<Tensor<1>>) -> Tensor<4> {
        let dense = ConvOptions::new([self.stride; 2], [self.padding; 2], [1, 1], 1);
        match grouping {
            Grouping::Single => {
                let options = ConvOptions::new([self.stride; 2], [self.padding; 2], [1, 1], self.groups);
                conv2d(x, weight, bias, options)
            }
            Grouping::BlockDiagonal => conv2d(x, block_diagonal(weight, self.groups), bias, dense),
            Grouping::PerGroup => {
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
    }
}

/// How a convolution runs. burn-cubecl's implicit-GEMM kernels decline `groups > 1` except
/// depthwise, and the direct kernel that accepts it was 17x slower on the H200, its gradients
/// slower still (docs/history/), so a grouped (not depthwise) convolution runs as dense ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grouping {
    /// One convolution kernel: dense or depthwise.
    Single,
    /// One dense convolution by the block-diagonal weight (each group's filters over its own
    /// input channels, zeros elsewhere): `groups` times the multiply-adds of the grouped
    /// convolution, but one convolution a direction on the whole input and output. Per group,
    /// each of YOLOv9's 12 box-tower convolutions of 4 groups slices its input, pads each slice's
    /// gradient back to full size, adds them, and concatenates the outputs. Chosen with
    /// `LIBREYOLO_GROUPED_CONV=block_diagonal` until the GPU step measures it faster.
    BlockDiagonal,
    /// One dense convolution per group on its slice of the input, the outputs concatenated (the
    /// default; always for more than [`BLOCK_DIAGONAL_MAX_GROUPS`] groups, where the
    /// block-diagonal weight would multiply the work by too much).
    PerGroup,
}

/// Most groups a convolution runs [`Grouping::BlockDiagonal`] with.
pub const BLOCK_DIAGONAL_MAX_GROUPS: usize = 4;

/// Environment variable: `block_diagonal` runs grouped convolutions of at most
/// [`BLOCK_DIAGONAL_MAX_GROUPS`] groups block-diagonal; unset (or `per_group`), per group.
pub const GROUPED_CONV_ENV: &str = "LIBREYOLO_GROUPED_CONV";

fn block_diagonal_chosen() -> bool {
    static CHOSEN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CHOSEN.get_or_init(|| std::env::var(GROUPED_CONV_ENV).is_ok_and(|v| v == "block_diagonal"))
}

/// `[c_out, c_in / groups, k, k]` grouped weights as the `[c_out, c_in, k, k]` dense weight of the
/// same convolution: group r's filters padded with zeros to the input channels of the other
/// groups. Its gradient is the dense weight gradient's diagonal blocks (a slice each).
fn block_diagonal(weight: Tensor<4>, groups: usize) -> Tensor<4> {
    let per_group = weight.dims()[1];
    let blocks = weight
        .chunk(groups, 0)
        .into_iter()
        .enumerate()
        .map(|(r, w)| w.pad([(0, 0), (r * per_group, (groups - 1 - r) * per_group), (0, 0), (0, 0)], PadMode::Constant(0.0)))
        .collect();
    Tensor::cat(blocks, 0)
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

    fn max_diff<const D: usize>(a: &Tensor<D>, b: &Tensor<D>) -> f32 {
        a.clone().sub(b.clone()).abs().max().into_scalar()
    }

    /// Both dense forms compute what one grouped convolution computes: outputs, and the input's,
    /// weight's and bias's gradients.
    #[test]
    fn grouped_convolution_forms_match_the_grouped_kernel() {
        let device = Device::flex();
        for (groups, k, stride, bias) in [(4, 3, 1, false), (4, 1, 1, true), (4, 3, 2, true), (8, 3, 1, true)] {
            let shape = ConvShape::new(16, 24, k, stride).groups(groups);
            let x = Tensor::<4>::random([2, 16, 9, 11], Distribution::Normal(0.0, 1.0), &device);
            let w = Tensor::<4>::random([24, 16 / groups, k, k], Distribution::Normal(0.0, 1.0), &device);
            let b = bias.then(|| Tensor::<1>::random([24], Distribution::Normal(0.0, 1.0), &device));
            let options = ConvOptions::new([stride; 2], [shape.padding; 2], [1, 1], groups);
            // A fixed, non-uniform objective, so each output's gradient differs.
            let objective = Tensor::<4>::random(conv2d(x.clone(), w.clone(), b.clone(), options.clone()).dims(), Distribution::Normal(0.0, 1.0), &device);
            let run = |form: Option<Grouping>| {
                let (x, w) = (x.clone().autodiff().require_grad(), w.clone().autodiff().require_grad());
                let b = b.clone().map(|b| b.autodiff().require_grad());
                let y = match form {
                    Some(g) => shape.apply_as(g, x.clone(), w.clone(), b.clone()),
                    None => conv2d(x.clone(), w.clone(), b.clone(), options.clone()),
                };
                let grads = y.clone().mul(objective.clone()).sum().backward();
                let g = |t: &Tensor<4>| t.grad(&grads).expect("reaches the objective");
                (y.inner(), g(&x), g(&w), b.map(|b| b.grad(&grads).expect("reaches the objective")))
            };
            let grouped = run(None);
            for form in [Grouping::BlockDiagonal, Grouping::PerGroup] {
                let dense = run(Some(form));
                let label = format!("{form:?}, groups {groups} k{k} s{stride}");
                assert!(max_diff(&dense.0, &grouped.0) < 1e-4, "{label}: outputs");
                assert!(max_diff(&dense.1, &grouped.1) < 1e-4, "{label}: input gradients");
                assert!(max_diff(&dense.2, &grouped.2) < 1e-4, "{label}: weight gradients");
                if let (Some(d), Some(g)) = (&dense.3, &grouped.3) {
                    assert!(max_diff(d, g) < 1e-4, "{label}: bias gradients");
                }
            }
        }
        assert_ne!(ConvShape::new(16, 24, 3, 1).groups(8).grouping(), Grouping::BlockDiagonal, "more than 4 groups run per group");
        // Depthwise and dense convolutions keep the single kernel.
        assert_eq!(ConvShape::new(16, 16, 3, 1).groups(16).grouping(), Grouping::Single);
        assert_eq!(ConvShape::new(16, 16, 3, 1).grouping(), Grouping::Single);
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
