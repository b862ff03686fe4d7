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
        if cx.fusing() {
            // One 3x3 convolution: both branches folded, the 1x1 kernel at the 3x3's centre.
            let replaced: Vec<_> = self.conv1.replaced().into_iter().chain(self.conv2.replaced()).collect();
            let key = replaced[0];
            let (w, b) = cx.fused_conv(key, &replaced, || {
                let (w3, b3) = self.conv1.folded(cx);
                let (w1, b1) = self.conv2.folded(cx);
                let [c_out, c_in, _, _] = w1.dims();
                let centre = Tensor::<4>::zeros([c_out, c_in, 3, 3], &w1.device()).slice_assign([0..c_out, 0..c_in, 1..2, 1..2], w1);
                (w3.add(centre), b3.add(b1))
            });
            let y = self.conv1.shape().apply(x, w, Some(b));
            cx.trace(|| TracedOp::Silu { input: y.dims() });
            return silu(y);
        }
        let y = self.conv1.forward(x.clone(), cx).add(self.conv2.forward(x, cx));
        cx.trace(|| TracedOp::Silu { input: y.dims() });
        silu(y)
    }
}
