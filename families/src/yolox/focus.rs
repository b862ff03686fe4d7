//! Focus: space-to-depth, then a convolution. Each 2x2 pixel block becomes 4x the channels, in
//! YOLOX's order (top-left, bottom-left, top-right, bottom-right), so a `(B, C, H, W)` image
//! becomes `(B, 4C, H/2, W/2)` before `conv`.

use burn::tensor::Tensor;

use crate::blocks::{Conv, ConvShape};
use crate::ctx::Ctx;
use crate::params::Builder;
use crate::topology::TopologyError;

#[derive(Debug, Clone)]
pub struct Focus {
    conv: Conv,
}

impl Focus {
    /// Keys `conv.conv.weight`, `conv.bn.*`.
    pub fn new(b: &mut Builder, c_in: usize, c_out: usize, k: usize, stride: usize) -> Self {
        Self { conv: Conv::new(&mut b.pp("conv"), ConvShape::new(4 * c_in, c_out, k, stride)) }
    }

    pub fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        self.conv.forward(space_to_depth(x), cx)
    }
}

/// `(B, C, H, W)` -> `(B, 4C, H/2, W/2)`: channel block `2 * col + row` holds the pixels of
/// row parity `row` and column parity `col` (LibreYOLO's `cat(x[::2, ::2], x[1::2, ::2],
/// x[::2, 1::2], x[1::2, 1::2])`), as one permute rather than four strided slices.
pub fn space_to_depth(x: Tensor<4>) -> Tensor<4> {
    let [b, c, h, w] = x.dims();
    x.reshape([b, c, h / 2, 2, w / 2, 2]).permute([0, 5, 3, 1, 2, 4]).reshape([b, 4 * c, h / 2, w / 2])
}

/// `Focus` in a topology: `args = { out, k = 1, s = 1 }`.
pub static BLOCK: crate::block::BlockKind = crate::block::BlockKind {
    name: "Focus",
    args: &["out", "k", "s"],
    head: false,
    build: |b| {
        let input = b.single()?;
        let (out, k, s) = (b.args.usize("out")?, b.args.usize_or("k", 1)?, b.args.usize_or("s", 1)?);
        if input.stride != 1 {
            return Err(TopologyError::new(b.args.layer, Some("from"), format!("`{}` (Focus) reads the image, not a feature map", b.name)));
        }
        let layer = Focus::new(b.params, input.channels, out, k, s);
        Ok((std::rc::Rc::new(layer), Some(crate::block::Shape { channels: out, stride: 2 * s })))
    },
};

crate::one_input_layer!(Focus);

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Tensor, TensorData};

    use super::*;

    /// The four strided slices of LibreYOLO's Focus, concatenated in its order.
    #[test]
    fn space_to_depth_concatenates_yolox_slices_in_order() {
        let device = Device::flex();
        let (b, c, h, w) = (2, 3, 4, 6);
        let data: Vec<f32> = (0..b * c * h * w).map(|i| i as f32).collect();
        let x = Tensor::<4>::from_data(TensorData::new(data.clone(), [b, c, h, w]), &device);
        let got = space_to_depth(x).into_data().try_to_vec::<f32>().unwrap();
        let at = |n: usize, ch: usize, y: usize, x: usize| data[((n * c + ch) * h + y) * w + x];
        let mut want = vec![];
        for n in 0..b {
            for (row, col) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                for ch in 0..c {
                    for y in 0..h / 2 {
                        for x in 0..w / 2 {
                            want.push(at(n, ch, 2 * y + row, 2 * x + col));
                        }
                    }
                }
            }
        }
        assert_eq!(got, want);
    }
}
