//! The layers of a transformer family, with PyTorch's semantics and key names: `Linear`,
//! `LayerNorm` and an `MLP` (here), multi-head attention ([`attention`]) and multi-scale
//! deformable attention ([`deformable`]). Tokens are `(B, N, C)` tensors; a block that reads a
//! feature map flattens it (`(B, C, H, W)` -> `(B, H*W, C)`, row-major, as `flatten(2)` does).

pub mod attention;
pub mod deformable;

use burn::tensor::activation::relu;
use burn::tensor::{FloatDType, Tensor};

pub use attention::MultiheadAttention;
pub use deformable::MSDeformableAttention;

use crate::ctx::Ctx;
use crate::params::{Builder, Init, ParamId, Role};

/// `nn.Linear`: `x W^T + b` over the last dimension (keys `weight`, `bias`).
#[derive(Debug, Clone)]
pub struct Linear {
    weight: ParamId,
    bias: ParamId,
    input: usize,
    out: usize,
}

impl Linear {
    /// PyTorch's default init.
    pub fn new(b: &mut Builder, input: usize, out: usize) -> Self {
        Self { weight: b.linear_weight(out, input), bias: b.linear_bias(out, input), input, out }
    }

    /// A weight started by `init`, the bias by PyTorch's default.
    pub fn weight_init(b: &mut Builder, input: usize, out: usize, init: Init) -> Self {
        Self { weight: b.matrix("weight", out, input, init), bias: b.linear_bias(out, input), input, out }
    }

    /// A weight started by `init` and a bias of `bias` everywhere (the families' own inits:
    /// zeroed box heads, a classification prior).
    pub fn init(b: &mut Builder, input: usize, out: usize, init: Init, bias: f32) -> Self {
        Self { weight: b.matrix("weight", out, input, init), bias: b.constant("bias", Role::Bias, out, bias), input, out }
    }

    /// A weight `init` and the bias `values` (deformable attention's sampling directions).
    pub fn with_bias(b: &mut Builder, input: usize, init: Init, values: Vec<f32>) -> Self {
        let out = values.len();
        Self { weight: b.matrix("weight", out, input, init), bias: b.values("bias", Role::Bias, values), input, out }
    }

    pub fn forward<const D: usize>(&self, x: Tensor<D>, cx: &Ctx) -> Tensor<D> {
        let dims = x.dims();
        debug_assert_eq!(dims[D - 1], self.input, "Linear input width");
        let rows = dims[..D - 1].iter().product::<usize>();
        let y = x.reshape([rows, self.input]).matmul(cx.rank2(self.weight).transpose()).add(cx.rank1(self.bias).unsqueeze::<2>());
        let mut out = dims;
        out[D - 1] = self.out;
        y.reshape(out)
    }
}

/// `nn.LayerNorm` over the last dimension (eps 1e-5; keys `weight`, `bias`), computed in f32 as
/// PyTorch's autocast does, then rounded to the input's dtype.
#[derive(Debug, Clone)]
pub struct LayerNorm {
    weight: ParamId,
    bias: ParamId,
    channels: usize,
}

impl LayerNorm {
    pub const EPS: f64 = 1e-5;

    pub fn new(b: &mut Builder, channels: usize) -> Self {
        let (weight, bias) = b.norm(channels);
        Self { weight, bias, channels }
    }

    pub fn forward<const D: usize>(&self, x: Tensor<D>, cx: &Ctx) -> Tensor<D> {
        let dtype = x.dtype();
        let x = x.cast(FloatDType::F32);
        let mean = x.clone().mean_dim(D - 1);
        let centred = x.sub(mean);
        let var = centred.clone().powi_scalar(2).mean_dim(D - 1);
        let mut shape = [1; D];
        shape[D - 1] = self.channels;
        let (w, b) = (cx.master_rank1(self.weight).cast(FloatDType::F32), cx.master_rank1(self.bias).cast(FloatDType::F32));
        let y = centred.div(var.add_scalar(Self::EPS).sqrt()).mul(w.reshape(shape)).add(b.reshape(shape));
        y.cast(FloatDType::from(dtype))
    }
}

/// DETR's `MLP`: `layers` linear layers with ReLU between them (keys `layers.{i}.*`).
#[derive(Debug, Clone)]
pub struct Mlp {
    layers: Vec<Linear>,
}

impl Mlp {
    /// Widths `input -> hidden x (n - 1) -> out`, weights started by `init`; the last layer
    /// zeroed when `zero_last` (DETR's box heads start at their reference box).
    pub fn new(b: &mut Builder, input: usize, hidden: usize, out: usize, n: usize, init: Init, zero_last: bool) -> Self {
        let mut layers_b = b.pp("layers");
        let layers = (0..n)
            .map(|i| {
                let (c_in, c_out) = (if i == 0 { input } else { hidden }, if i + 1 == n { out } else { hidden });
                let mut lb = layers_b.pp(i);
                if zero_last && i + 1 == n { Linear::init(&mut lb, c_in, c_out, Init::Zeros, 0.0) } else { Linear::weight_init(&mut lb, c_in, c_out, init) }
            })
            .collect();
        Self { layers }
    }

    pub fn forward<const D: usize>(&self, x: Tensor<D>, cx: &Ctx) -> Tensor<D> {
        let last = self.layers.len() - 1;
        self.layers.iter().enumerate().fold(x, |x, (i, l)| {
            let y = l.forward(x, cx);
            if i < last { relu(y) } else { y }
        })
    }
}

/// `inverse_sigmoid` of DETR's box refinement: `log(x / (1 - x))` with both clamped at `eps`
/// (1e-5), `x` clamped to [0, 1] first.
pub fn inverse_sigmoid<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    const EPS: f32 = 1e-5;
    let x = x.clamp(0.0, 1.0);
    let one_minus = x.clone().neg().add_scalar(1.0).clamp_min(EPS);
    x.clamp_min(EPS).div(one_minus).log()
}

/// `(B, C, H, W)` -> `(B, H*W, C)`.
pub fn tokens(x: Tensor<4>) -> Tensor<3> {
    let [b, c, h, w] = x.dims();
    x.reshape([b, c, h * w]).swap_dims(1, 2)
}

/// `(B, H*W, C)` -> `(B, C, H, W)`.
pub fn map(x: Tensor<3>, h: usize, w: usize) -> Tensor<4> {
    let [b, _, c] = x.dims();
    x.swap_dims(1, 2).reshape([b, c, h, w])
}
