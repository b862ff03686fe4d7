//! MixUp, as each family's pipeline runs it in LibreYOLO 1.6 (`crate::data::sample::Pipeline`).
//!
//! YOLOX's ([`blend`], `MosaicMixupDataset._mixup`), after a mosaic's affine warp: a partner
//! image is letterboxed into an (H, W) canvas of 114 at the top-left, the canvas is scaled by a
//! jitter `j ~ U(mixup_scale)` and mirrored with probability 1/2, a random (H, W) window of it
//! (anchored at the top-left corner when the scaled canvas is smaller) is blended 50/50 into
//! the sample, and the partner's boxes follow (scaled, clipped to the scaled canvas, mirrored,
//! shifted by the window and clipped to it).
//!
//! YOLOv9's ([`blend_finished`], `YOLO9MosaicMixupDataset._mixup`), after a mosaic sample is
//! finished: a partner sample made without mosaic, blended `r : 1 - r` with `r ~ Beta(32, 32)`,
//! the two box lists merged. (LibreYOLO blends its float images in [0, 1]; ours are bytes, so a
//! pixel is rounded to the nearest 1/255.)

use image::RgbImage;
use rand::Rng;

use super::Boxes;
use crate::data::FILL;
use crate::data::image::{fit, resize};

/// `r ~ Beta(32, 32)`: `X / (X + Y)` with `X, Y ~ Gamma(32, 1)`, each exactly a sum of 32 unit
/// exponentials.
pub fn beta_32_32(rng: &mut impl Rng) -> f64 {
    let mut gamma = || (0..32).map(|_| -(1.0 - rng.random::<f64>()).ln()).sum::<f64>();
    let x = gamma();
    x / (x + gamma())
}

/// YOLOv9's MixUp of two finished samples of the same size: `image = r * image + (1 - r) *
/// partner` (rounded), `r ~ Beta(32, 32)`.
pub fn blend_finished(image: &mut RgbImage, partner: &RgbImage, rng: &mut impl Rng) {
    let r = beta_32_32(rng) as f32;
    for (a, b) in image.as_mut().iter_mut().zip(partner.as_raw()) {
        *a = (r * *a as f32 + (1.0 - r) * *b as f32).round() as u8;
    }
}

/// YOLOX's MixUp: blends `partner` (an image and its boxes, in its pixels) into `image`, adding
/// its boxes to `boxes`.
pub fn blend(image: &mut RgbImage, boxes: &mut Boxes, partner: (&RgbImage, Boxes), scale: [f64; 2], rng: &mut impl Rng) {
    let jitter = if scale[0] < scale[1] { rng.random_range(scale[0]..scale[1]) } else { scale[0] };
    let mirror = rng.random::<f64>() > 0.5;
    let (width, height) = image.dimensions();
    let (img, mut cp_boxes) = partner;

    // The partner letterboxed into (H, W), then the whole canvas scaled by the jitter
    // (`cv2.resize` truncates the sizes, as `int(...)` there).
    let (r, nw, nh) = fit(img.width(), img.height(), height, width);
    let mut canvas = RgbImage::from_pixel(width, height, image::Rgb([FILL; 3]));
    image::imageops::replace(&mut canvas, &resize(img, nw, nh), 0, 0);
    let (ow, oh) = (((width as f64 * jitter) as u32).max(1), ((height as f64 * jitter) as u32).max(1));
    let mut canvas = resize(&canvas, ow, oh);
    if mirror {
        image::imageops::flip_horizontal_in_place(&mut canvas);
    }
    let ratio = r as f64 * jitter;

    // The window: a random offset where the scaled canvas is larger than the sample.
    let x_off = if ow > width { rng.random_range(0..ow - width) } else { 0 };
    let y_off = if oh > height { rng.random_range(0..oh - height) } else { 0 };
    for y in 0..height {
        for x in 0..width {
            let (sx, sy) = (x + x_off, y + y_off);
            let other = if sx < ow && sy < oh { canvas.get_pixel(sx, sy).0 } else { [0; 3] };
            let p = image.get_pixel_mut(x, y);
            for (v, o) in p.0.iter_mut().zip(other) {
                // `(0.5 * a + 0.5 * b).astype(uint8)` truncates.
                *v = (0.5 * *v as f32 + 0.5 * o as f32) as u8;
            }
        }
    }

    for b in &mut cp_boxes.xyxy {
        let mut s = b.map(|v| v * ratio as f32);
        s = [s[0].clamp(0.0, ow as f32), s[1].clamp(0.0, oh as f32), s[2].clamp(0.0, ow as f32), s[3].clamp(0.0, oh as f32)];
        if mirror {
            s = [ow as f32 - s[2], s[1], ow as f32 - s[0], s[3]];
        }
        *b = [
            (s[0] - x_off as f32).clamp(0.0, width as f32),
            (s[1] - y_off as f32).clamp(0.0, height as f32),
            (s[2] - x_off as f32).clamp(0.0, width as f32),
            (s[3] - y_off as f32).clamp(0.0, height as f32),
        ];
    }
    boxes.extend(cp_boxes);
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    /// A black sample and a white partner of the sample's size at jitter 1, not mirrored: every
    /// pixel becomes the 50/50 mean (127, truncated), and the partner's box is added unchanged.
    #[test]
    fn blends_half_and_half_and_carries_the_partner_boxes() {
        for seed in 0..16u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut image = RgbImage::from_pixel(64, 48, image::Rgb([0; 3]));
            let mut boxes = Boxes { xyxy: vec![[1.0, 2.0, 30.0, 40.0]], cls: vec![0] };
            let white = RgbImage::from_pixel(64, 48, image::Rgb([255; 3]));
            let partner_boxes = Boxes { xyxy: vec![[10.0, 5.0, 20.0, 25.0]], cls: vec![7] };
            blend(&mut image, &mut boxes, (&white, partner_boxes), [1.0, 1.0], &mut rng);
            assert!(image.pixels().all(|p| p.0 == [127; 3]), "seed {seed}");
            assert_eq!(boxes.cls, [0, 7]);
            // Mirrored or not, a box of the full-size partner stays inside the sample at its size.
            let b = boxes.xyxy[1];
            assert!((b[2] - b[0] - 10.0).abs() < 1e-4 && (b[3] - b[1] - 20.0).abs() < 1e-4, "seed {seed}: {b:?}");
            assert!(b[0] == 10.0 || b[0] == 44.0, "seed {seed}: mirrored about the 64-px canvas or not: {b:?}");
        }
    }

    /// `Beta(32, 32)` has mean 1/2 and standard deviation `1 / (2 sqrt(65))` = 0.062.
    #[test]
    fn beta_32_32_has_its_mean_and_spread() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let draws: Vec<f64> = (0..20_000).map(|_| beta_32_32(&mut rng)).collect();
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        let sd = (draws.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / draws.len() as f64).sqrt();
        assert!((mean - 0.5).abs() < 0.002 && (sd - 0.062).abs() < 0.002, "mean {mean}, sd {sd}");
    }

    /// A jitter below 1 leaves the right and bottom of the window outside the scaled canvas:
    /// there the sample is blended with black (LibreYOLO's zero padding).
    #[test]
    fn a_shrunk_partner_leaves_black_padding() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut image = RgbImage::from_pixel(64, 64, image::Rgb([200; 3]));
        let white = RgbImage::from_pixel(64, 64, image::Rgb([255; 3]));
        blend(&mut image, &mut Boxes::default(), (&white, Boxes::default()), [0.5, 0.5], &mut rng);
        assert_eq!(image.get_pixel(63, 63).0, [100; 3]);
        assert_eq!(image.get_pixel(0, 0).0, [227; 3]);
    }
}
