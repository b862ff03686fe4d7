//! UIR: timm's universal inverted residual ('uir', MobileNetV4's UIB): an optional depthwise
//! `a`x`a` convolution and BatchNorm (`dw_start`), a 1x1 expansion to `make_divisible(in * e)`
//! channels with BatchNorm and ReLU (`pw_exp`), an optional depthwise `k`x`k` convolution with
//! BatchNorm and ReLU (`dw_mid`), a 1x1 projection with BatchNorm (`pw_proj`), and the shortcut
//! when the shape is kept. The stride is `dw_mid`'s, or `dw_start`'s when there is no `dw_mid`.

use std::rc::Rc;

use burn::tensor::Tensor;
use burn::tensor::activation::relu;

use super::make_divisible;
use crate::block::{BlockKind, Shape};
use crate::blocks::ConvShape;
use crate::ctx::Ctx;
use crate::params::Builder;
use crate::resnet::ConvBn;
use crate::topology::TopologyError;

#[derive(Debug, Clone)]
pub struct Uir {
    dw_start: Option<ConvBn>,
    pw_exp: ConvBn,
    dw_mid: Option<ConvBn>,
    pw_proj: ConvBn,
    skip: bool,
}

/// A `ConvNormAct` of the block: keys `{name}.conv.weight`, `{name}.bn.*`.
fn conv_norm(b: &mut Builder, name: &str, shape: ConvShape) -> ConvBn {
    ConvBn::new(&mut b.pp(name), "conv", "bn", shape)
}

impl Uir {
    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        let mut y = x.clone();
        if let Some(dw) = &self.dw_start {
            y = dw.forward(y, cx);
        }
        y = relu(self.pw_exp.forward(y, cx));
        if let Some(dw) = &self.dw_mid {
            y = relu(dw.forward(y, cx));
        }
        y = self.pw_proj.forward(y, cx);
        if self.skip { y.add(x) } else { y }
    }
}

/// `UIR` in a topology: `args = { out, a, k, s = 1, e }` (`a`, `k`: the start and middle
/// depthwise kernels, absent for none; `e`: the expansion ratio).
pub static BLOCK: BlockKind = BlockKind {
    name: "UIR",
    args: &["out", "a", "k", "s", "e"],
    head: false,
    build: |b| {
        let input = b.single()?;
        let (out, a, k, s, e) = (b.args.usize("out")?, b.args.usize_or("a", 0)?, b.args.usize_or("k", 0)?, b.args.usize_or("s", 1)?, b.args.usize("e")?);
        if a == 0 && k == 0 && s != 1 {
            return Err(TopologyError::new(b.args.layer, Some("args"), format!("`{}` (UIR): a stride needs a depthwise convolution (`a` or `k`)", b.name)));
        }
        let c_in = input.channels;
        let mid = make_divisible((c_in * e) as f64);
        // In the state dict's order: dw_start, pw_exp, dw_mid, pw_proj.
        let dw_start = (a > 0).then(|| conv_norm(b.params, "dw_start", ConvShape::new(c_in, c_in, a, if k > 0 { 1 } else { s }).groups(c_in)));
        let pw_exp = conv_norm(b.params, "pw_exp", ConvShape::new(c_in, mid, 1, 1));
        let dw_mid = (k > 0).then(|| conv_norm(b.params, "dw_mid", ConvShape::new(mid, mid, k, s).groups(mid)));
        let pw_proj = conv_norm(b.params, "pw_proj", ConvShape::new(mid, out, 1, 1));
        let skip = c_in == out && s == 1;
        Ok((Rc::new(Uir { dw_start, pw_exp, dw_mid, pw_proj, skip }), Some(Shape { channels: out, stride: input.stride * s })))
    },
};

crate::one_input_layer!(Uir);
