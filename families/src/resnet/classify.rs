//! Classify: a classification head, global average pooling then a linear layer (`fc.weight`
//! `[nc, C]`, `fc.bias`), LibreYOLO's ResNet `forward_head`; with `hidden = N`, timm's
//! MobileNetV4 head: the pooled features through a 1x1 convolution to N channels
//! (`conv_head`), BatchNorm (`norm_head`) and ReLU, then the linear layer (`classifier.*`). Its
//! output is the network's: the logits as one `(B, nc, 1, 1)` map.

use std::rc::Rc;

use burn::tensor::activation::{relu, softmax};
use burn::tensor::{FloatDType, Tensor};

use super::ConvBn;
use crate::block::{BlockKind, Classifier, Head, Layer, Out};
use crate::blocks::ConvShape;
use crate::ctx::Ctx;
use crate::params::ParamId;

#[derive(Debug, Clone)]
pub struct Classify {
    /// MobileNetV4's `conv_head` and `norm_head`, between the pooling and the linear layer.
    hidden: Option<ConvBn>,
    weight: ParamId,
    bias: ParamId,
    nc: usize,
}

impl Classify {
    /// Logits `(B, nc)` of the feature map `x`.
    pub fn logits(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<2> {
        let [b, _, h, w] = x.dims();
        // The mean in f32 (a bf16 sum of 49 values loses bits PyTorch's pooling keeps), then
        // back to the compute dtype.
        let dtype = x.dtype();
        let mut pooled = x.cast(FloatDType::F32).sum_dims(&[2, 3]).div_scalar((h * w) as f64).cast(dtype);
        if let Some(hidden) = &self.hidden {
            pooled = relu(hidden.forward(pooled, cx));
        }
        let c = pooled.dims()[1];
        let pooled = pooled.reshape([b, c]);
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

/// `Classify` in a topology: `args = { hidden = 0 }` (the classes are the dataset's); keys
/// `fc.*` under the layer's `params` prefix, or with `hidden`, `conv_head.weight`, `norm_head.*`
/// and `classifier.*` as timm's MobileNetV4 names them.
pub static BLOCK: BlockKind = BlockKind {
    name: "Classify",
    args: &["hidden"],
    head: true,
    build: |b| {
        let input = b.single()?;
        let hidden = b.args.usize_or("hidden", 0)?;
        let (features, linear, hidden) = match hidden {
            0 => (input.channels, "fc", None),
            n => (n, "classifier", Some(ConvBn::new(b.params, "conv_head", "norm_head", ConvShape::new(input.channels, n, 1, 1)))),
        };
        let mut fc = b.params.pp(linear);
        let (weight, bias) = (fc.linear_weight(b.nc, features), fc.linear_bias(b.nc, features));
        Ok((Rc::new(Classify { hidden, weight, bias, nc: b.nc }), None))
    },
};
