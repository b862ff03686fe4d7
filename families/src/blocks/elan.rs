//! ELAN: the first block of YOLOv9-t and -s.
//!
//! ```text
//! x -> cv1 (1x1, part) -> split in halves a | b
//!      b -> cv2 (3x3, hidden) -> c -> cv3 (3x3, hidden) -> d
//!      concat(a, b, c, d) -> cv4 (1x1, out)
//! ```

use burn::tensor::Tensor;

use super::conv::{Conv, ConvShape};
use crate::ctx::Ctx;
use crate::params::Builder;

#[derive(Debug, Clone)]
pub struct Elan {
    cv1: Conv,
    cv2: Conv,
    cv3: Conv,
    cv4: Conv,
}

impl Elan {
    pub fn new(b: &mut Builder, c_in: usize, part: usize, hidden: usize, c_out: usize) -> Self {
        Self {
            cv1: Conv::new(&mut b.pp("cv1"), ConvShape::new(c_in, part, 1, 1)),
            cv2: Conv::new(&mut b.pp("cv2"), ConvShape::new(part / 2, hidden, 3, 1)),
            cv3: Conv::new(&mut b.pp("cv3"), ConvShape::new(hidden, hidden, 3, 1)),
            cv4: Conv::new(&mut b.pp("cv4"), ConvShape::new(part + 2 * hidden, c_out, 1, 1)),
        }
    }

    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        let halves = self.cv1.forward(x, cx).chunk(2, 1);
        let c = self.cv2.forward(halves[1].clone(), cx);
        let d = self.cv3.forward(c.clone(), cx);
        self.cv4.forward(cx.cat(vec![halves[0].clone(), halves[1].clone(), c, d]), cx)
    }
}

/// `ELAN` in a topology: `args = { out, part, hidden }`.
pub static BLOCK: crate::block::BlockKind = crate::block::BlockKind {
    name: "ELAN",
    args: &["out", "part", "hidden"],
    head: false,
    build: |b| {
        let input = b.single()?;
        let (out, part, hidden) = (b.args.usize("out")?, b.args.usize("part")?, b.args.usize("hidden")?);
        Ok((std::rc::Rc::new(Elan::new(b.params, input.channels, part, hidden, out)), Some(crate::block::Shape { channels: out, stride: input.stride })))
    },
};

crate::one_input_layer!(Elan);
