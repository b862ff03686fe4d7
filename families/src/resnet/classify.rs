//! Classify: a classification head, global average pooling then a linear layer (`fc.weight`
//! `[nc, C]`, `fc.bias`), LibreYOLO's ResNet `forward_head`. Its output is the network's: the
//! logits as one `(B, nc, 1, 1)` map.

use std::rc::Rc;

use burn::tensor::activation::softmax;
use burn::tensor::{FloatDType, Tensor};

use crate::block::{BlockKind, Classifier, Head, Layer, Out};
use crate::ctx::Ctx;
use crate::params::ParamId;

#[derive(Debug, Clone)]
pub struct Classify {
    weight: ParamId,
    bias: ParamId,
    nc: usize,
}

impl Classify {
    /// Logits `(B, nc)` of the feature map `x`.
    pub fn logits(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<2> {
        let [b, c, h, w] = x.dims();
        let pooled = x.sum_dims(&[2, 3]).reshape([b, c]).div_scalar((h * w) as f64);
        let weight = cx.rank2(self.weight);
        let bias = cx.rank1(self.bias).reshape([1, self.nc]);
        pooled.matmul(weight.transpose()).add(bias)
    }
}

impl Layer for Classify {
    fn forward(&self, mut inputs: Vec<Tensor<4>>, cx: &Ctx) -> Out {
        let logits = self.logits(inputs.remove(0), cx);
        let [b, nc] = logits.dims();
        Out::Head(vec![logits.reshape([b, nc, 1, 1])])
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn as_head(&self) -> Option<&dyn Head> {
        Some(self)
    }
}

impl Head for Classify {
    fn nc(&self) -> usize {
        self.nc
    }
    fn as_classifier(&self) -> Option<&dyn Classifier> {
        Some(self)
    }
}

impl Classifier for Classify {
    fn probabilities(&self, maps: &[Tensor<4>]) -> Tensor<2> {
        let [b, nc, _, _] = maps[0].dims();
        softmax(maps[0].clone().cast(FloatDType::F32).reshape([b, nc]), 1)
    }
}

/// `Classify` in a topology: no arguments (the classes are the dataset's); keys `fc.*` under the
/// layer's `params` prefix.
pub static BLOCK: BlockKind = BlockKind {
    name: "Classify",
    args: &[],
    head: true,
    build: |b| {
        let input = b.single()?;
        let mut fc = b.params.pp("fc");
        let (weight, bias) = (fc.linear_weight(b.nc, input.channels), fc.linear_bias(b.nc, input.channels));
        Ok((Rc::new(Classify { weight, bias, nc: b.nc }), None))
    },
};
