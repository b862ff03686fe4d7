//! SPPELAN: spatial pyramid pooling as three chained 5x5 max pools.
//!
//! ```text
//! x -> cv1 (1x1, hidden) -> y0 -> pool -> y1 -> pool -> y2 -> pool -> y3
//! concat(y0, y1, y2, y3) -> cv5 (1x1, out)
//! ```

use burn::tensor::Tensor;
use burn::tensor::module::max_pool2d;
use burn::tensor::ops::MaxPoolOptions;

use super::conv::{Conv, ConvShape};
use crate::ctx::{Ctx, TracedOp};
use crate::params::Builder;

#[derive(Debug, Clone)]
pub struct SPPELAN {
    cv1: Conv,
    cv5: Conv,
}

impl SPPELAN {
    pub fn new(b: &mut Builder, c_in: usize, hidden: usize, c_out: usize) -> Self {
        Self { cv1: Conv::new(&mut b.pp("cv1"), ConvShape::new(c_in, hidden, 1, 1)), cv5: Conv::new(&mut b.pp("cv5"), ConvShape::new(4 * hidden, c_out, 1, 1)) }
    }

    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        let pool = |t: Tensor<4>| {
            cx.trace(|| TracedOp::MaxPool { input: t.dims(), k: 5, stride: 1, padding: 2 });
            max_pool2d(t, MaxPoolOptions::new([5, 5]).with_stride([1, 1]).with_padding([2, 2]))
        };
        let y0 = self.cv1.forward(x, cx);
        let y1 = pool(y0.clone());
        let y2 = pool(y1.clone());
        let y3 = pool(y2.clone());
        self.cv5.forward(cx.cat(vec![y0, y1, y2, y3]), cx)
    }
}

/// `SPPELAN` in a topology: `args = { out, hidden }`.
pub static BLOCK: crate::block::BlockKind = crate::block::BlockKind {
    name: "SPPELAN",
    args: &["out", "hidden"],
    head: false,
    build: |b| {
        let input = b.single()?;
        let (out, hidden) = (b.args.usize("out")?, b.args.usize("hidden")?);
        Ok((std::rc::Rc::new(SPPELAN::new(b.params, input.channels, hidden, out)), Some(crate::block::Shape { channels: out, stride: input.stride })))
    },
};

crate::one_input_layer!(SPPELAN);
