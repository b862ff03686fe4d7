//! YOLOX's CSPLayer: two 1x1 branches, one through `n` bottlenecks, concatenated and fused.
//!
//! ```text
//! x -> conv1 (1x1, hidden) -> m: n x Bottleneck(hidden) -> x1
//! x -> conv2 (1x1, hidden)                               -> x2
//! concat(x1, x2) -> conv3 (1x1, out)        hidden = out * expansion (0.5)
//! Bottleneck: y = conv2 (3x3) (conv1 (1x1) (x)), + x when `shortcut` (and widths agree)
//! ```

use burn::tensor::Tensor;

use crate::blocks::{Conv, ConvShape};
use crate::ctx::Ctx;
use crate::params::Builder;

#[derive(Debug, Clone)]
struct Bottleneck {
    conv1: Conv,
    conv2: Conv,
    add: bool,
}

impl Bottleneck {
    fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        let y = self.conv2.forward(self.conv1.forward(x.clone(), cx), cx);
        if self.add { y.add(x) } else { y }
    }
}

#[derive(Debug, Clone)]
pub struct CSPLayer {
    conv1: Conv,
    conv2: Conv,
    conv3: Conv,
    m: Vec<Bottleneck>,
}

impl CSPLayer {
    /// Keys `conv1..3.*` and `m.{i}.conv1/conv2.*`.
    pub fn new(b: &mut Builder, c_in: usize, c_out: usize, n: usize, shortcut: bool) -> Self {
        let hidden = c_out / 2; // int(out * 0.5)
        // conv1..3 before the bottlenecks: LibreYOLO's registration (state_dict) order.
        let conv1 = Conv::new(&mut b.pp("conv1"), ConvShape::new(c_in, hidden, 1, 1));
        let conv2 = Conv::new(&mut b.pp("conv2"), ConvShape::new(c_in, hidden, 1, 1));
        let conv3 = Conv::new(&mut b.pp("conv3"), ConvShape::new(2 * hidden, c_out, 1, 1));
        let m = (0..n)
            .map(|i| {
                let mut blocks = b.pp("m");
                let mut b = blocks.pp(i);
                Bottleneck {
                    conv1: Conv::new(&mut b.pp("conv1"), ConvShape::new(hidden, hidden, 1, 1)),
                    conv2: Conv::new(&mut b.pp("conv2"), ConvShape::new(hidden, hidden, 3, 1)),
                    add: shortcut,
                }
            })
            .collect();
        Self { conv1, conv2, conv3, m }
    }

    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        let x1 = self.m.iter().fold(self.conv1.forward(x.clone(), cx), |y, m| m.forward(y, cx));
        let x2 = self.conv2.forward(x, cx);
        self.conv3.forward(cx.cat(vec![x1, x2]), cx)
    }
}

/// `CSPLayer` in a topology: `args = { out, n = 1, shortcut = true }`.
pub static BLOCK: crate::block::BlockKind = crate::block::BlockKind {
    name: "CSPLayer",
    args: &["out", "n", "shortcut"],
    head: false,
    build: |b| {
        let input = b.single()?;
        let (out, n, shortcut) = (b.args.usize("out")?, b.args.usize_or("n", 1)?, b.args.bool_or("shortcut", true)?);
        let layer = CSPLayer::new(b.params, input.channels, out, n, shortcut);
        Ok((std::rc::Rc::new(layer), Some(crate::block::Shape { channels: out, stride: input.stride })))
    },
};

crate::one_input_layer!(CSPLayer);
