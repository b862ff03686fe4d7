//! Downsampling blocks: AConv (YOLOv9-t/s/m) and ADown (YOLOv9-c).

use burn::tensor::Tensor;
use burn::tensor::module::{avg_pool2d, max_pool2d};
use burn::tensor::ops::{AvgPoolOptions, MaxPoolOptions};

use super::conv::{Conv, ConvShape};
use crate::ctx::{Ctx, TracedOp};
use crate::params::Builder;

/// 2x2 average pool with stride 1 (PyTorch `avg_pool2d(x, 2, 1, 0)`): a smoothing step
/// before the strided conv.
fn smooth(x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
    cx.trace(|| TracedOp::AvgPool { input: x.dims(), k: 2, stride: 1, padding: 0 });
    avg_pool2d(x, AvgPoolOptions::new([2, 2]).with_stride([1, 1]).with_count_include_pad(true))
}

/// `avg_pool(2, s1)` then a 3x3 stride-2 Conv.
#[derive(Debug, Clone)]
pub struct AConv {
    cv: Conv,
}

impl AConv {
    pub fn new(b: &mut Builder, c_in: usize, c_out: usize) -> Self {
        Self { cv: Conv::new(&mut b.pp("cv"), ConvShape::new(c_in, c_out, 3, 2).padding(1)) }
    }

    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        self.cv.forward(smooth(x, cx), cx)
    }
}

/// Two paths after the smoothing pool: half the channels through a 3x3 stride-2 Conv, the
/// other half through a 3x3 stride-2 max pool and a 1x1 Conv.
#[derive(Debug, Clone)]
pub struct ADown {
    cv1: Conv,
    cv2: Conv,
}

impl ADown {
    pub fn new(b: &mut Builder, c_in: usize, c_out: usize) -> Self {
        let half = c_out / 2;
        Self {
            cv1: Conv::new(&mut b.pp("cv1"), ConvShape::new(c_in / 2, half, 3, 2).padding(1)),
            cv2: Conv::new(&mut b.pp("cv2"), ConvShape::new(c_in / 2, half, 1, 1).padding(0)),
        }
    }

    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        let halves = smooth(x, cx).chunk(2, 1);
        let a = self.cv1.forward(halves[0].clone(), cx);
        cx.trace(|| TracedOp::MaxPool { input: halves[1].dims(), k: 3, stride: 2, padding: 1 });
        let pooled = max_pool2d(halves[1].clone(), MaxPoolOptions::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]));
        cx.cat(vec![a, self.cv2.forward(pooled, cx)])
    }
}

/// A downsampling block in a topology (`args = { out }`): its output has twice the stride.
macro_rules! downsample_block {
    ($static:ident, $name:literal, $ty:ident) => {
        pub static $static: crate::block::BlockKind = crate::block::BlockKind {
            name: $name,
            args: &["out"],
            head: false,
            build: |b| {
                let input = b.single()?;
                let out = b.args.usize("out")?;
                Ok((std::rc::Rc::new($ty::new(b.params, input.channels, out)), Some(crate::block::Shape { channels: out, stride: input.stride * 2 })))
            },
        };

        crate::one_input_layer!($ty);
    };
}

downsample_block!(ACONV, "AConv", AConv);
downsample_block!(ADOWN, "ADown", ADown);
