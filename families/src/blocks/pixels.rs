//! Pixels: a network's input contract, as its first layer. Every engine path (training,
//! validation, predict) hands a network RGB images in [0, 1]; a family trained on other pixels
//! says so here: `args = { bgr = true, range = 255 }` for YOLOX (OpenCV's BGR order, 0-255, not
//! normalised), `args = { imagenet = true }` for LibreYOLO's classifiers (`(x - mean) / std`
//! with ImageNet's per-channel mean and std, as its classification transforms normalise). The
//! images reach this layer in f32, before the cast to the compute dtype (in
//! bf16 a [0, 1] pixel is good to 1/256 of the range, a 0-255 one exactly), and `range = 255`
//! rounds, which gives back the exact bytes the loader read (u8 / 255 * 255 is not always a
//! whole number in f32).

use std::rc::Rc;

use burn::tensor::Tensor;

use crate::block::{BlockKind, Layer, Out};
use crate::ctx::Ctx;
use crate::topology::TopologyError;

pub static BLOCK: BlockKind = BlockKind {
    name: "Pixels",
    args: &["bgr", "range", "imagenet"],
    head: false,
    build: |b| {
        let input = b.single()?;
        if input.channels != 3 || input.stride != 1 {
            return Err(TopologyError::new(
                b.args.layer,
                Some("from"),
                "`Pixels` reads the images (3 channels at stride 1): put it first, `from = \"images\"`",
            ));
        }
        let bgr = b.args.bool_or("bgr", false)?;
        let range = b.args.usize_or("range", 1)?;
        if range != 1 && range != 255 {
            return Err(TopologyError::new(b.args.layer, Some("args.range"), format!("`args.range` of block `Pixels` is 1 or 255, got {range}")));
        }
        let imagenet = b.args.bool_or("imagenet", false)?;
        if imagenet && (bgr || range != 1) {
            return Err(TopologyError::new(
                b.args.layer,
                Some("args.imagenet"),
                "`imagenet = true` normalises RGB pixels in [0, 1]: leave `bgr` and `range` unset",
            ));
        }
        Ok((Rc::new(Pixels { bgr, range, imagenet }), Some(input)))
    },
};

#[derive(Debug, Clone, Copy)]
pub struct Pixels {
    /// Channels in BGR order.
    pub bgr: bool,
    /// The largest pixel value the network was trained on: 1 or 255.
    pub range: usize,
    /// Normalised with ImageNet's per-channel mean and std.
    pub imagenet: bool,
}

/// ImageNet's per-channel mean and std (LibreYOLO's `IMAGENET_MEAN`, `IMAGENET_STD`).
pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

impl Layer for Pixels {
    fn forward(&self, mut inputs: Vec<Tensor<4>>, cx: &Ctx) -> Out {
        let mut x = inputs.remove(0);
        if self.bgr {
            x = x.flip([1]);
        }
        if self.range == 255 {
            x = x.mul_scalar(255.0).round();
        }
        if self.imagenet {
            let device = x.device();
            let channel = |v: [f32; 3]| Tensor::<4>::from_data(burn::tensor::TensorData::new(v.to_vec(), [1, 3, 1, 1]), &device);
            x = x.sub(channel(IMAGENET_MEAN)).div(channel(IMAGENET_STD));
        }
        Out::Map(cx.compute_input(x))
    }
    fn reads_pixels(&self) -> bool {
        true
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, FloatDType, Int, TensorData};

    use super::*;
    use crate::ParamStore;

    /// Every byte, as the loader hands it over (u8 / 255, RGB), comes back exact in BGR order,
    /// in f32 and in bf16.
    #[test]
    fn bgr_255_gives_back_the_loaded_bytes_in_any_compute_dtype() {
        let device = Device::flex();
        let bytes: Vec<i64> = (0..3 * 256).map(|i| i % 256).collect();
        let rgb = Tensor::<4, Int>::from_data(TensorData::new(bytes.clone(), [1, 3, 16, 16]), &device).float().div_scalar(255.0);
        let layer = Pixels { bgr: true, range: 255, imagenet: false };
        let store = ParamStore::default();
        for cx in [Ctx::eval(&store), Ctx::eval_in(&store, FloatDType::BF16)] {
            let Out::Map(out) = layer.forward(vec![rgb.clone()], &cx) else { panic!("a map") };
            let got: Vec<f32> = out.cast(FloatDType::F32).into_data().convert::<f32>().try_to_vec::<f32>().unwrap();
            let want: Vec<f32> = [2, 1, 0].iter().flat_map(|&c| bytes[c * 256..(c + 1) * 256].iter().map(|&v| v as f32)).collect();
            assert_eq!(got, want);
        }
    }
}
