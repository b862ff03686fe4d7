//! A classification sample as LibreYOLO 1.6 makes it (`data/augment/classify.py`,
//! `build_classify_transforms`, at its defaults):
//!
//! * training: torchvision's `RandomResizedCrop(imgsz, scale, ratio=(3/4, 4/3))` (bilinear),
//!   `RandomHorizontalFlip(flip_prob)`, `RandomVerticalFlip(flipud)`;
//! * evaluation: the shorter side resized to `floor(imgsz / crop_pct)`, then `CenterCrop(imgsz)`.
//!
//! The ImageNet normalisation is the network's (`Pixels imagenet = true`); images leave here as
//! u8 RGB like detection's. The label travels as one whole-image target row
//! `[cls, 0, 0, 1, 1]`, so the loader, cache and batches are detection's.

use image::RgbImage;
use image::imageops;
use rand::Rng;

use super::augment::Boxes;
use super::dataset::Dataset;
use super::image::{self as img, Interpolation};
use super::sample::Sample;

/// LibreYOLO's eval resize ratio before the centre crop (`DEFAULT_CROP_PCT`).
pub const CROP_PCT: f64 = 0.875;
/// `RandomResizedCrop`'s aspect-ratio range.
const RATIO: (f64, f64) = (3.0 / 4.0, 4.0 / 3.0);

/// The classification augmentation (the manifest's `[augment]` `crop_scale`, `flip_prob`,
/// `flipud`, `interpolation`).
#[derive(Debug, Clone, Copy)]
pub struct ClassifyAugment {
    /// `RandomResizedCrop`'s area range (LibreYOLO's `scale`, default (0.5, 1.0)).
    pub scale: [f64; 2],
    pub flip_prob: f64,
    pub flipud: f64,
    /// The crop's resampling (LibreYOLO's ResNet and MobileNetV4: bicubic).
    pub interpolation: Interpolation,
}

/// A training sample: a random resized crop of the image at `(height, width)`, flipped.
pub fn train_sample(ds: &Dataset, index: usize, aug: &ClassifyAugment, (height, width): (u32, u32), rng: &mut impl Rng) -> Sample {
    let (image, boxes) = ds.load(index);
    let (x, y, w, h) = random_crop(image.width(), image.height(), aug.scale, rng);
    let mut out = img::resize_with(&imageops::crop_imm(image.as_ref(), x, y, w, h).to_image(), width, height, aug.interpolation);
    if aug.flip_prob > 0.0 && rng.random::<f64>() < aug.flip_prob {
        imageops::flip_horizontal_in_place(&mut out);
    }
    if aug.flipud > 0.0 && rng.random::<f64>() < aug.flipud {
        imageops::flip_vertical_in_place(&mut out);
    }
    Sample { image: out, targets: target(&boxes), index }
}

/// An evaluation sample: the shorter side resized to `floor(size / crop_pct)`, centre crop.
pub fn val_sample(ds: &Dataset, index: usize, size: (u32, u32), crop_pct: f64, interpolation: Interpolation) -> Sample {
    let (image, boxes) = ds.load(index);
    Sample { image: centre_crop(&image, size, crop_pct, interpolation), targets: target(&boxes), index }
}

/// The evaluation transform of one image (validation, predict): the shorter side resized to
/// `floor(max(height, width) / crop_pct)`, then the centre `(height, width)`.
pub fn centre_crop(image: &RgbImage, (height, width): (u32, u32), crop_pct: f64, interpolation: Interpolation) -> RgbImage {
    let side = (height.max(width) as f64 / crop_pct).floor() as u32;
    let (w, h) = shorter_side(image.width(), image.height(), side);
    let resized = img::resize_with(image, w, h, interpolation);
    // torchvision's CenterCrop: offsets `int(round((size - crop) / 2.0))`, Python's round (half
    // to even).
    let x = ((w.saturating_sub(width)) as f64 / 2.0).round_ties_even() as u32;
    let y = ((h.saturating_sub(height)) as f64 / 2.0).round_ties_even() as u32;
    let out = imageops::crop_imm(&resized, x, y, width.min(w), height.min(h)).to_image();
    if out.dimensions() == (width, height) {
        return out;
    }
    // Smaller than the crop (a crop_pct of 1 on an odd size): torchvision pads with zeros.
    let mut padded = RgbImage::new(width, height);
    imageops::overlay(&mut padded, &out, ((width - out.width()) / 2) as i64, ((height - out.height()) / 2) as i64);
    padded
}

/// The loaded image's class as a whole-image target row (from what `Dataset::load` returned:
/// an image that fails to decode is replaced by another, with that one's class).
fn target(boxes: &Boxes) -> Vec<[f32; 5]> {
    boxes.cls.iter().take(1).map(|&c| [c as f32, 0.0, 0.0, 1.0, 1.0]).collect()
}

/// torchvision's `Resize(side)`: the shorter side to `side`, the longer `int(side * long / short)`.
fn shorter_side(w: u32, h: u32, side: u32) -> (u32, u32) {
    if w <= h { (side, (side as f64 * h as f64 / w as f64) as u32) } else { ((side as f64 * w as f64 / h as f64) as u32, side) }
}

/// `RandomResizedCrop.get_params`: `(x, y, w, h)`. Ten draws of an area fraction in `scale`
/// and a log-uniform aspect ratio; the first that fits is placed uniformly; if none fits, the
/// largest centred crop with the ratio clamped to the range.
pub fn random_crop(width: u32, height: u32, scale: [f64; 2], rng: &mut impl Rng) -> (u32, u32, u32, u32) {
    let area = (width * height) as f64;
    let (lo, hi) = (RATIO.0.ln(), RATIO.1.ln());
    for _ in 0..10 {
        let target = area * rng.random_range(scale[0]..=scale[1]);
        let aspect = rng.random_range(lo..=hi).exp();
        let w = (target * aspect).sqrt().round() as u32;
        let h = (target / aspect).sqrt().round() as u32;
        if 0 < w && w <= width && 0 < h && h <= height {
            let y = rng.random_range(0..=height - h);
            let x = rng.random_range(0..=width - w);
            return (x, y, w, h);
        }
    }
    let ratio = width as f64 / height as f64;
    let (w, h) = if ratio < RATIO.0 {
        (width, (width as f64 / RATIO.0).round() as u32)
    } else if ratio > RATIO.1 {
        ((height as f64 * RATIO.1).round() as u32, height)
    } else {
        (width, height)
    };
    ((width - w) / 2, (height - h) / 2, w, h)
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    #[test]
    fn random_crops_stay_inside_and_cover_the_area_range() {
        let mut rng = StdRng::seed_from_u64(3);
        for (w, h) in [(640, 480), (31, 200), (200, 31), (224, 224)] {
            for _ in 0..200 {
                let (x, y, cw, ch) = random_crop(w, h, [0.5, 1.0], &mut rng);
                assert!(cw > 0 && ch > 0 && x + cw <= w && y + ch <= h, "{w}x{h}: {x},{y} {cw}x{ch}");
            }
        }
        // A square image: every draw fits, so the area is within the range (up to rounding).
        for _ in 0..200 {
            let (_, _, cw, ch) = random_crop(224, 224, [0.5, 1.0], &mut rng);
            let frac = (cw * ch) as f64 / (224.0 * 224.0);
            assert!((0.49..=1.01).contains(&frac), "{frac}");
        }
        // Too narrow for any draw: the centred fallback with the ratio clamped to 3/4.
        assert_eq!(random_crop(10, 1000, [0.9, 1.0], &mut rng), (0, 493, 10, 13));
    }

    #[test]
    fn the_shorter_side_is_resized_as_torchvision() {
        assert_eq!(shorter_side(640, 480, 256), (341, 256));
        assert_eq!(shorter_side(100, 300, 256), (256, 768));
    }
}
