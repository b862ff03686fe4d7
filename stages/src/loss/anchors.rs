//! Anchor points of a multi-scale head, in the loss's convention: pixel centres
//! `k * stride + stride / 2` (integer halving), scale by scale, row-major.

use burn::tensor::{Device, Tensor, TensorData};

#[derive(Debug, Clone)]
pub struct Anchors {
    /// `(1, A, 2)` anchor centres `(x, y)` in pixels.
    pub points: Tensor<3>,
    /// `(1, A, 1)` stride of each anchor's scale.
    pub strides: Tensor<3>,
    pub count: usize,
}

impl Anchors {
    /// Anchors for maps of `sizes[i] = (h, w)` at `strides[i]`.
    pub fn new(sizes: &[(usize, usize)], strides: &[usize], device: &Device) -> Self {
        let mut xy = vec![];
        let mut s = vec![];
        for (&(h, w), &stride) in sizes.iter().zip(strides) {
            let shift = (stride / 2) as f32;
            for y in 0..h {
                for x in 0..w {
                    xy.push((x * stride) as f32 + shift);
                    xy.push((y * stride) as f32 + shift);
                    s.push(stride as f32);
                }
            }
        }
        let count = s.len();
        Self {
            points: Tensor::from_data(TensorData::new(xy, [1, count, 2]), device),
            strides: Tensor::from_data(TensorData::new(s, [1, count, 1]), device),
            count,
        }
    }
}
