//! ResNetStem: the 7x7 stride-2 convolution, BatchNorm, ReLU and the 3x3 stride-2 max pooling
//! (a quarter of the input's resolution). Keys `conv1.weight` and `bn1.*`: a topology puts the
//! layer at the top level of the state dict with `params = ""`.

use std::rc::Rc;

use burn::tensor::Tensor;
use burn::tensor::activation::relu;
use burn::tensor::module::max_pool2d;
use burn::tensor::ops::MaxPoolOptions;

use super::ConvBn;
use crate::block::{BlockKind, Shape};
use crate::blocks::ConvShape;
use crate::ctx::Ctx;
use crate::topology::TopologyError;

#[derive(Debug, Clone)]
pub struct ResNetStem {
    conv: ConvBn,
}

impl ResNetStem {
    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        max_pool2d(relu(self.conv.forward(x, cx)), MaxPoolOptions::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]))
    }
}

/// `ResNetStem` in a topology: `args = { out = 64 }`.
pub static BLOCK: BlockKind = BlockKind {
    name: "ResNetStem",
    args: &["out"],
    head: false,
    build: |b| {
        let input = b.single()?;
        if input.stride != 1 {
            return Err(TopologyError::new(b.args.layer, Some("from"), format!("`{}` (ResNetStem) reads the image, not a feature map", b.name)));
        }
        let out = b.args.usize_or("out", 64)?;
        let conv = ConvBn::new(b.params, "conv1", "bn1", ConvShape::new(input.channels, out, 7, 2));
        Ok((Rc::new(ResNetStem { conv }), Some(Shape { channels: out, stride: 4 })))
    },
};

crate::one_input_layer!(ResNetStem);
