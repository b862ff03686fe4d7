//! ResLayer: one stage of a ResNet-18/34, `n` BasicBlocks (`{i}.conv1`, `{i}.bn1`, `{i}.conv2`,
//! `{i}.bn2`), the first with stride `s` and, where the stride or the width changes, a 1x1
//! projection of its shortcut (`0.downsample.0` conv, `0.downsample.1` BatchNorm).

use std::rc::Rc;

use burn::tensor::Tensor;
use burn::tensor::activation::relu;

use super::ConvBn;
use crate::block::{BlockKind, Shape};
use crate::blocks::ConvShape;
use crate::ctx::Ctx;
use crate::params::Builder;

/// `relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))`, the stride on `conv1`.
#[derive(Debug, Clone)]
pub struct BasicBlock {
    conv1: ConvBn,
    conv2: ConvBn,
    downsample: Option<ConvBn>,
}

impl BasicBlock {
    pub fn new(b: &mut Builder, c_in: usize, c_out: usize, stride: usize) -> Self {
        // In the state dict's order: conv1, bn1, conv2, bn2, downsample.
        let conv1 = ConvBn::new(b, "conv1", "bn1", ConvShape::new(c_in, c_out, 3, stride));
        let conv2 = ConvBn::new(b, "conv2", "bn2", ConvShape::new(c_out, c_out, 3, 1));
        let downsample = (stride != 1 || c_in != c_out).then(|| ConvBn::new(&mut b.pp("downsample"), "0", "1", ConvShape::new(c_in, c_out, 1, stride)));
        Self { conv1, conv2, downsample }
    }

    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        let out = self.conv2.forward(relu(self.conv1.forward(x.clone(), cx)), cx);
        let shortcut = match &self.downsample {
            Some(d) => d.forward(x, cx),
            None => x,
        };
        relu(out.add(shortcut))
    }
}

#[derive(Debug, Clone)]
pub struct ResLayer {
    blocks: Vec<BasicBlock>,
}

impl ResLayer {
    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        self.blocks.iter().fold(x, |x, block| block.forward(x, cx))
    }
}

/// `ResLayer` in a topology: `args = { out, n = 2, s = 1 }`.
pub static BLOCK: BlockKind = BlockKind {
    name: "ResLayer",
    args: &["out", "n", "s"],
    head: false,
    build: |b| {
        let input = b.single()?;
        let (out, n, s) = (b.args.usize("out")?, b.args.usize_or("n", 2)?, b.args.usize_or("s", 1)?);
        let blocks = (0..n).map(|i| BasicBlock::new(&mut b.params.pp(i), if i == 0 { input.channels } else { out }, out, if i == 0 { s } else { 1 })).collect();
        Ok((Rc::new(ResLayer { blocks }), Some(Shape { channels: out, stride: input.stride * s })))
    },
};

crate::one_input_layer!(ResLayer);
