//! PResNet-vd, RT-DETR's ResNet backbone (LibreYOLO's `models/rtdetr/backbone.py`): a stem of
//! three 3x3 convolutions and max pooling, then stages of BasicBlocks whose first block's
//! shortcut is average-pooled before its 1x1 projection when it halves the resolution (the
//! "d" variant). Every BatchNorm keeps PyTorch's defaults, every activation is ReLU.

use std::rc::Rc;

use burn::tensor::Tensor;
use burn::tensor::activation::relu;
use burn::tensor::module::{avg_pool2d, max_pool2d};
use burn::tensor::ops::{AvgPoolOptions, MaxPoolOptions};

use super::conv_norm::{Act, ConvNorm};
use crate::block::{BlockKind, Shape};
use crate::blocks::ConvShape;
use crate::ctx::Ctx;
use crate::params::Builder;
use crate::topology::TopologyError;

/// `conv1.conv1_1..3` (3x3, the first stride 2, widths out/2, out/2, out) and 3x3 max pooling.
#[derive(Debug, Clone)]
pub struct PResNetStem {
    convs: [ConvNorm; 3],
}

impl PResNetStem {
    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        let x = self.convs.iter().fold(x, |x, conv| conv.forward(x, cx));
        max_pool2d(x, MaxPoolOptions::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]))
    }
}

/// `PResNetStem` in a topology: `args = { out = 64 }`.
pub static STEM: BlockKind = BlockKind {
    name: "PResNetStem",
    args: &["out"],
    head: false,
    build: |b| {
        let input = b.single()?;
        if input.stride != 1 {
            return Err(TopologyError::new(b.args.layer, Some("from"), format!("`{}` (PResNetStem) reads the image, not a feature map", b.name)));
        }
        let out = b.args.usize_or("out", 64)?;
        let half = out / 2;
        let shapes = [ConvShape::new(input.channels, half, 3, 2), ConvShape::new(half, half, 3, 1), ConvShape::new(half, out, 3, 1)];
        let convs = [0, 1, 2].map(|i| ConvNorm::new(&mut b.params.pp(format!("conv1_{}", i + 1)), shapes[i], Act::Relu));
        Ok((Rc::new(PResNetStem { convs }), Some(Shape { channels: out, stride: 4 })))
    },
};

crate::one_input_layer!(PResNetStem);

/// The shortcut of a stage's first block.
#[derive(Debug, Clone)]
enum Short {
    Identity,
    /// `short.*`: a 1x1 projection at stride 1.
    Project(ConvNorm),
    /// `short.conv.*` after `short.pool`: 2x2 average pooling (ceil mode), then the projection.
    PoolProject(ConvNorm),
}

/// `relu(branch2b(branch2a(x)) + short(x))`, the stride on `branch2a`.
#[derive(Debug, Clone)]
pub struct BasicBlock {
    short: Short,
    branch2a: ConvNorm,
    branch2b: ConvNorm,
}

impl BasicBlock {
    /// `first`: a stage's first block, which always projects its shortcut (PResNet's
    /// `shortcut=False`). Keys in the state dict's order: short, branch2a, branch2b.
    pub fn new(b: &mut Builder, c_in: usize, c_out: usize, stride: usize, first: bool) -> Self {
        let short = match (first, stride) {
            (false, _) => Short::Identity,
            (true, 1) => Short::Project(ConvNorm::new(&mut b.pp("short"), ConvShape::new(c_in, c_out, 1, 1), Act::None)),
            (true, _) => Short::PoolProject(ConvNorm::new(&mut b.pp("short").pp("conv"), ConvShape::new(c_in, c_out, 1, 1), Act::None)),
        };
        let branch2a = ConvNorm::new(&mut b.pp("branch2a"), ConvShape::new(c_in, c_out, 3, stride), Act::Relu);
        let branch2b = ConvNorm::new(&mut b.pp("branch2b"), ConvShape::new(c_out, c_out, 3, 1), Act::None);
        Self { short, branch2a, branch2b }
    }

    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        let short = match &self.short {
            Short::Identity => x.clone(),
            Short::Project(conv) => conv.forward(x.clone(), cx),
            Short::PoolProject(conv) => conv.forward(avg_pool2d(x.clone(), AvgPoolOptions::new([2, 2]).with_stride([2, 2]).with_ceil_mode(true)), cx),
        };
        relu(self.branch2b.forward(self.branch2a.forward(x, cx), cx).add(short))
    }
}

#[derive(Debug, Clone)]
pub struct PResNetStage {
    blocks: Vec<BasicBlock>,
}

impl PResNetStage {
    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        self.blocks.iter().fold(x, |x, block| block.forward(x, cx))
    }
}

/// `PResNetStage` in a topology (`res_layers.{i}`): `args = { out, n = 2, s = 1 }`, keys
/// `blocks.{j}.*`.
pub static STAGE: BlockKind = BlockKind {
    name: "PResNetStage",
    args: &["out", "n", "s"],
    head: false,
    build: |b| {
        let input = b.single()?;
        let (out, n, s) = (b.args.usize("out")?, b.args.usize_or("n", 2)?, b.args.usize_or("s", 1)?);
        let mut blocks_b = b.params.pp("blocks");
        let blocks = (0..n)
            .map(|j| {
                let c_in = if j == 0 { input.channels } else { out };
                BasicBlock::new(&mut blocks_b.pp(j), c_in, out, if j == 0 { s } else { 1 }, j == 0)
            })
            .collect();
        Ok((Rc::new(PResNetStage { blocks }), Some(Shape { channels: out, stride: input.stride * s })))
    },
};

crate::one_input_layer!(PResNetStage);
