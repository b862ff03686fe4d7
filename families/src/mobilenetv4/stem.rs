//! MNv4Stem: the 3x3 stride-2 convolution, BatchNorm and ReLU (keys `conv_stem.weight`,
//! `bn1.*`; a topology puts the layer at the top level of the state dict with `params = ""`).

use std::rc::Rc;

use burn::tensor::Tensor;
use burn::tensor::activation::relu;

use crate::block::{BlockKind, Shape};
use crate::blocks::ConvShape;
use crate::ctx::Ctx;
use crate::resnet::ConvBn;
use crate::topology::TopologyError;

#[derive(Debug, Clone)]
pub struct MNv4Stem {
    conv: ConvBn,
}

impl MNv4Stem {
    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        relu(self.conv.forward(x, cx))
    }
}

/// `MNv4Stem` in a topology: `args = { out = 32 }`.
pub static BLOCK: BlockKind = BlockKind {
    name: "MNv4Stem",
    args: &["out"],
    head: false,
    build: |b| {
        let input = b.single()?;
        if input.stride != 1 {
            return Err(TopologyError::new(b.args.layer, Some("from"), format!("`{}` (MNv4Stem) reads the image, not a feature map", b.name)));
        }
        let out = b.args.usize_or("out", 32)?;
        let conv = ConvBn::new(b.params, "conv_stem", "bn1", ConvShape::new(input.channels, out, 3, 2));
        Ok((Rc::new(MNv4Stem { conv }), Some(Shape { channels: out, stride: 2 })))
    },
};

crate::one_input_layer!(MNv4Stem);
