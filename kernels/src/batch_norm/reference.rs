//! The fused BatchNorm (+ SiLU) composed of burn's primitive operations, in f32: what the CPU
//! backend and the capture device run, and the reference the GPU kernels are checked against.
//! The variance is two-pass (centred), the most accurate form.

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Scalar, TensorMetadata};
use burn::tensor::{FloatDType, Shape, Slice};

use super::{MEAN, RSTD, SCALE, SHIFT, STATS_ROWS};

/// Per-channel view `[1, C, 1, 1]` of a `[C]` tensor.
fn per_channel<B: Backend>(t: FloatTensor<B>, c: usize) -> FloatTensor<B> {
    B::float_reshape(t, Shape::new([1, c, 1, 1]))
}

/// Row `r` of a `[rows, C]` tensor as `[1, C, 1, 1]`.
fn row<B: Backend>(stats: &FloatTensor<B>, r: usize, c: usize) -> FloatTensor<B> {
    let slices = [Slice::new(r as isize, Some(r as isize + 1), 1), Slice::new(0, None, 1)];
    per_channel::<B>(B::float_slice(stats.clone(), &slices), c)
}

/// Sum over (N, H, W), `[1, C, 1, 1]`.
fn channel_sum<B: Backend>(t: FloatTensor<B>) -> FloatTensor<B> {
    B::float_sum_dims(t, &[0, 2, 3])
}

/// `y * sigmoid(y)`, and the derivative `s * (1 + y * (1 - s))` when asked.
fn sigmoid<B: Backend>(y: FloatTensor<B>) -> FloatTensor<B> {
    let e = B::float_exp(B::float_neg(y));
    B::float_recip(B::float_add_scalar(e, Scalar::Float(1.0)))
}

pub fn forward<B: Backend>(x: FloatTensor<B>, weight: FloatTensor<B>, bias: FloatTensor<B>, epsilon: f64, act: bool) -> (FloatTensor<B>, FloatTensor<B>) {
    let dtype = x.dtype();
    let [n, c, h, w] = [0, 1, 2, 3].map(|d| x.shape()[d]);
    let m = (n * h * w) as f64;
    let xf = B::float_cast(x, FloatDType::F32);
    let mean = B::float_div_scalar(channel_sum::<B>(xf.clone()), Scalar::Float(m));
    let centred = B::float_sub(xf.clone(), mean.clone());
    let var = B::float_div_scalar(channel_sum::<B>(B::float_mul(centred.clone(), centred)), Scalar::Float(m));
    let rstd = B::float_recip(B::float_sqrt(B::float_add_scalar(var.clone(), Scalar::Float(epsilon))));
    let scale = B::float_mul(per_channel::<B>(weight, c), rstd.clone());
    let shift = B::float_sub(per_channel::<B>(bias, c), B::float_mul(mean.clone(), scale.clone()));
    let mut y = B::float_add(B::float_mul(xf, scale.clone()), shift.clone());
    if act {
        y = B::float_mul(y.clone(), sigmoid::<B>(y));
    }
    let flat = |t: FloatTensor<B>| B::float_reshape(t, Shape::new([1, c]));
    let stats = B::float_cat(vec![flat(mean), flat(var), flat(rstd), flat(scale), flat(shift)], 0);
    debug_assert_eq!(stats.shape()[0], STATS_ROWS);
    (B::float_cast(y, dtype.into()), stats)
}

pub fn backward<B: Backend>(x: FloatTensor<B>, grad: FloatTensor<B>, stats: FloatTensor<B>, act: bool) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
    let dtype = x.dtype();
    let [n, c, h, w] = [0, 1, 2, 3].map(|d| x.shape()[d]);
    let m = (n * h * w) as f64;
    let (mean, rstd, scale, shift) = (row::<B>(&stats, MEAN, c), row::<B>(&stats, RSTD, c), row::<B>(&stats, SCALE, c), row::<B>(&stats, SHIFT, c));
    let xf = B::float_cast(x, FloatDType::F32);
    let mut gy = B::float_cast(grad, FloatDType::F32);
    if act {
        let y = B::float_add(B::float_mul(xf.clone(), scale.clone()), shift);
        let s = sigmoid::<B>(y.clone());
        let one_minus_s = B::float_add_scalar(B::float_neg(s.clone()), Scalar::Float(1.0));
        let slope = B::float_mul(s, B::float_add_scalar(B::float_mul(y, one_minus_s), Scalar::Float(1.0)));
        gy = B::float_mul(gy, slope);
    }
    let centred = B::float_sub(xf, mean);
    let sum_gy = channel_sum::<B>(gy.clone());
    let sum_gy_xc = channel_sum::<B>(B::float_mul(gy.clone(), centred.clone()));
    let a = B::float_neg(B::float_div_scalar(
        B::float_mul(B::float_mul(scale.clone(), B::float_mul(rstd.clone(), rstd.clone())), sum_gy_xc.clone()),
        Scalar::Float(m),
    ));
    let b = B::float_neg(B::float_div_scalar(B::float_mul(scale.clone(), sum_gy.clone()), Scalar::Float(m)));
    let dx = B::float_add(B::float_add(B::float_mul(gy, scale), B::float_mul(centred, a)), b);
    let flat = |t: FloatTensor<B>| B::float_reshape(t, Shape::new([c]));
    let dweight = B::float_mul(rstd, sum_gy_xc);
    (B::float_cast(dx, dtype.into()), flat(dweight), flat(sum_gy))
}
