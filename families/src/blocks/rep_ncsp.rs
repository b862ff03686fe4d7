//! RepNCSP: a CSP block whose bottlenecks use RepConvN.
//!
//! ```text
//! x -> cv1 (1x1) -> [RepNBottleneck] x n --+
//!   -> cv2 (1x1) ---------------------------+-> concat -> cv3 (1x1)
//! ```

use burn::tensor::Tensor;

use super::conv::{Conv, ConvShape};
use super::rep_conv::RepConvN;
use crate::ctx::Ctx;
use crate::params::Builder;

/// `x + Conv3x3(RepConvN(x))` (the shortcut is on: input and output widths match).
#[derive(Debug, Clone)]
pub struct RepNBottleneck {
    cv1: RepConvN,
    cv2: Conv,
}

impl RepNBottleneck {
    pub fn new(b: &mut Builder, c: usize) -> Self {
        Self { cv1: RepConvN::new(&mut b.pp("cv1"), c, c), cv2: Conv::new(&mut b.pp("cv2"), ConvShape::new(c, c, 3, 1)) }
    }

    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        x.clone().add(self.cv2.forward(self.cv1.forward(x, cx), cx))
    }
}

#[derive(Debug, Clone)]
pub struct RepNCSP {
    cv1: Conv,
    cv2: Conv,
    cv3: Conv,
    m: Vec<RepNBottleneck>,
}

impl RepNCSP {
    pub fn new(b: &mut Builder, c_in: usize, c_out: usize, n: usize) -> Self {
        let hidden = c_out / 2;
        Self {
            cv1: Conv::new(&mut b.pp("cv1"), ConvShape::new(c_in, hidden, 1, 1)),
            cv2: Conv::new(&mut b.pp("cv2"), ConvShape::new(c_in, hidden, 1, 1)),
            cv3: Conv::new(&mut b.pp("cv3"), ConvShape::new(2 * hidden, c_out, 1, 1)),
            m: (0..n).map(|i| RepNBottleneck::new(&mut b.pp("m").pp(i), hidden)).collect(),
        }
    }

    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        let bottlenecks = self.m.iter().fold(self.cv1.forward(x.clone(), cx), |y, m| m.forward(y, cx));
        self.cv3.forward(cx.cat(vec![bottlenecks, self.cv2.forward(x, cx)]), cx)
    }
}
