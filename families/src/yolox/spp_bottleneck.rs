//! YOLOX's SPPBottleneck: max pools of several sizes side by side (SPPELAN chains them).
//!
//! ```text
//! x -> conv1 (1x1, in/2) -> y;  concat(y, pool5(y), pool9(y), pool13(y)) -> conv2 (1x1, out)
//! ```

use burn::tensor::Tensor;
use burn::tensor::module::max_pool2d;
use burn::tensor::ops::MaxPoolOptions;

use crate::blocks::{Conv, ConvShape};
use crate::ctx::{Ctx, TracedOp};
use crate::params::Builder;

#[derive(Debug, Clone)]
pub struct SPPBottleneck {
    conv1: Conv,
    conv2: Conv,
    kernels: Vec<usize>,
}

impl SPPBottleneck {
    /// Keys `conv1.*`, `conv2.*`.
    pub fn new(b: &mut Builder, c_in: usize, c_out: usize, kernels: Vec<usize>) -> Self {
        let hidden = c_in / 2;
        Self {
            conv1: Conv::new(&mut b.pp("conv1"), ConvShape::new(c_in, hidden, 1, 1)),
            conv2: Conv::new(&mut b.pp("conv2"), ConvShape::new(hidden * (kernels.len() + 1), c_out, 1, 1)),
            kernels,
        }
    }

    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        let y = self.conv1.forward(x, cx);
        let pooled = self.kernels.iter().map(|&k| {
            cx.trace(|| TracedOp::MaxPool { input: y.dims(), k, stride: 1, padding: k / 2 });
            max_pool2d(y.clone(), MaxPoolOptions::new([k, k]).with_stride([1, 1]).with_padding([k / 2, k / 2]))
        });
        let all = std::iter::once(y.clone()).chain(pooled).collect();
        self.conv2.forward(cx.cat(all), cx)
    }
}

/// `SPPBottleneck` in a topology: `args = { out, kernels = [5, 9, 13] }` (odd sizes).
pub static BLOCK: crate::block::BlockKind = crate::block::BlockKind {
    name: "SPPBottleneck",
    args: &["out", "kernels"],
    head: false,
    build: |b| {
        let input = b.single()?;
        let (out, kernels) = (b.args.usize("out")?, b.args.usizes_or("kernels", &[5, 9, 13])?);
        if let Some(k) = kernels.iter().find(|k| k.is_multiple_of(2)) {
            return Err(crate::topology::TopologyError::new(b.args.layer, Some("args.kernels"), format!("pool size {k} is even; the map would change size")));
        }
        Ok((std::rc::Rc::new(SPPBottleneck::new(b.params, input.channels, out, kernels)), Some(crate::block::Shape { channels: out, stride: input.stride })))
    },
};

crate::one_input_layer!(SPPBottleneck);
