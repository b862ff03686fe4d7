//! RepNCSPELAN: YOLOv9's main block; ELAN whose two branches are RepNCSP + Conv3x3.
//!
//! ```text
//! x -> cv1 (1x1, part) -> split in halves a | b
//!      b -> cv2 = [RepNCSP(part/2 -> hidden, n), Conv3x3] -> c
//!      c -> cv3 = [RepNCSP(hidden -> hidden, n), Conv3x3] -> d
//!      concat(a, b, c, d) -> cv4 (1x1, out)
//! ```

use burn::tensor::Tensor;

use super::conv::{Conv, ConvShape};
use super::rep_ncsp::RepNCSP;
use crate::ctx::Ctx;
use crate::params::Builder;

/// `RepNCSP` followed by a 3x3 Conv (keys `.0` and `.1`, PyTorch's `nn.Sequential`).
#[derive(Debug, Clone)]
struct CspConv {
    csp: RepNCSP,
    conv: Conv,
}

impl CspConv {
    fn new(b: &mut Builder, c_in: usize, c_out: usize, n: usize) -> Self {
        Self { csp: RepNCSP::new(&mut b.pp(0), c_in, c_out, n), conv: Conv::new(&mut b.pp(1), ConvShape::new(c_out, c_out, 3, 1)) }
    }

    fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        self.conv.forward(self.csp.forward(x, cx), cx)
    }
}

#[derive(Debug, Clone)]
pub struct RepNCSPELAN {
    cv1: Conv,
    cv2: CspConv,
    cv3: CspConv,
    cv4: Conv,
}

impl RepNCSPELAN {
    pub fn new(b: &mut Builder, c_in: usize, part: usize, hidden: usize, c_out: usize, n: usize) -> Self {
        Self {
            cv1: Conv::new(&mut b.pp("cv1"), ConvShape::new(c_in, part, 1, 1)),
            cv2: CspConv::new(&mut b.pp("cv2"), part / 2, hidden, n),
            cv3: CspConv::new(&mut b.pp("cv3"), hidden, hidden, n),
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

/// `RepNCSPELAN` in a topology: `args = { out, part, hidden, n = 1 }`.
pub static BLOCK: crate::block::BlockKind = crate::block::BlockKind {
    name: "RepNCSPELAN",
    args: &["out", "part", "hidden", "n"],
    head: false,
    build: |b| {
        let input = b.single()?;
        let (out, part, hidden, n) = (b.args.usize("out")?, b.args.usize("part")?, b.args.usize("hidden")?, b.args.usize_or("n", 1)?);
        let layer = RepNCSPELAN::new(b.params, input.channels, part, hidden, out, n);
        Ok((std::rc::Rc::new(layer), Some(crate::block::Shape { channels: out, stride: input.stride })))
    },
};

crate::one_input_layer!(RepNCSPELAN);
