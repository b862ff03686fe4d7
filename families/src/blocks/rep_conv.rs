//! RepConvN: a 3x3 and a 1x1 Conv-BN in parallel, summed, then SiLU (training form; the
//! identity branch is off, as in YOLOv9). Fuses into one 3x3 conv for inference.

use burn::tensor::Tensor;
use burn::tensor::activation::silu;

use super::conv::{Conv, ConvShape};
use crate::ctx::{Ctx, TracedOp};
use crate::params::Builder;

#[derive(Debug, Clone)]
pub struct RepConvN {
    conv1: Conv,
    conv2: Conv,
}

impl RepConvN {
    pub fn new(b: &mut Builder, c_in: usize, c_out: usize) -> Self {
        Self {
            conv1: Conv::with_activation(&mut b.pp("conv1"), ConvShape::new(c_in, c_out, 3, 1), false),
            conv2: Conv::with_activation(&mut b.pp("conv2"), ConvShape::new(c_in, c_out, 1, 1), false),
        }
    }

    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        let y = self.conv1.forward(x.clone(), cx).add(self.conv2.forward(x, cx));
        cx.trace(|| TracedOp::Silu { input: y.dims() });
        silu(y)
    }
}
