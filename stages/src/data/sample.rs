//! One training sample as LibreYOLO's pipelines make it ([`Pipeline`]: YOLOv9's
//! `YOLO9MosaicMixupDataset` + `YOLO9TrainTransform`, YOLOX's `MosaicMixupDataset` +
//! `TrainTransform`):
//!
//! 1. with `mosaic_prob`, a mosaic of the image and three partners (preferring annotated
//!    ones), warped by a random affine to (H, W); YOLOv9 drops boxes of 2 px or less; YOLOX
//!    then, with `mixup_prob` and boxes left, mixes in an annotated partner;
//!    otherwise the pre-resized image;
//! 2. HSV jitter, horizontal and vertical flips (YOLOX: only when there are boxes), letterbox
//!    to (H, W), or stretch (`data.resize`: RT-DETR's `RTDETRTrainTransform`, which reads the
//!    image before the pre-resize);
//! 3. boxes of 1 px or less dropped; if none is left, the un-augmented image is used instead;
//! 4. YOLOv9, after a mosaic, with `mixup_prob`: MixUp with a partner sample made by steps 2-3;
//! 5. targets `[cls, x1, y1, x2, y2]` normalised to [0, 1].

use image::RgbImage;
use rand::Rng;

use super::augment::mixup;
use super::augment::resize::Resize;
use super::augment::{Boxes, affine, flip, hsv, mosaic};
use super::dataset::Dataset;

/// Augmentation settings (the manifest's `[augment]`).
#[derive(Debug, Clone, Copy)]
pub struct Augment {
    pub mosaic_prob: f64,
    /// MixUp after a mosaic (YOLOX: 1.0; YOLOv9: 0), in the pipeline's form.
    pub mixup_prob: f64,
    pub pipeline: Pipeline,
    /// YOLOX's jitter of the partner.
    pub mixup_scale: [f64; 2],
    pub degrees: f64,
    pub translate: f64,
    pub scale: [f64; 2],
    pub shear: f64,
    pub hsv_prob: f64,
    pub flip_prob: f64,
    pub flipud: f64,
    /// How the image meets (H, W): letterbox, or stretch (then the dataset is not pre-resized).
    pub resize: Resize,
}

impl Augment {
    /// The same settings with mosaic closed (the last `no_aug_epochs`).
    pub fn without_mosaic(self) -> Self {
        Self { mosaic_prob: 0.0, ..self }
    }
}

/// Whose augmentation pipeline (`augment.pipeline`): its MixUp and its box filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pipeline {
    /// LibreYOLO's YOLOv9: 2 px filter after the mosaic, MixUp of two finished samples.
    #[default]
    Yolo9,
    /// LibreYOLO's YOLOX: MixUp into the warped mosaic; no HSV or flips without boxes.
    Yolox,
}

/// A sample at the training size: the image (H, W) and its normalised targets.
#[derive(Debug, Clone)]
pub struct Sample {
    pub image: RgbImage,
    /// `[cls, x1, y1, x2, y2]`, normalised.
    pub targets: Vec<[f32; 5]>,
    pub index: usize,
}

/// Up to 20 draws for a partner with labels: `Ok` the first with labels, `Err` the last draw.
fn labelled(ds: &Dataset, rng: &mut impl Rng) -> Result<usize, usize> {
    let mut index = 0;
    for _ in 0..20 {
        index = rng.random_range(0..ds.len());
        if ds.has_labels(index) {
            return Ok(index);
        }
    }
    Err(index)
}

/// A mosaic partner: with labels if 20 draws find one, the last draw otherwise.
fn partner(ds: &Dataset, rng: &mut impl Rng) -> usize {
    labelled(ds, rng).unwrap_or_else(|last| last)
}

pub fn train_sample(ds: &Dataset, index: usize, aug: &Augment, size: (u32, u32), rng: &mut impl Rng) -> Sample {
    let mosaic = aug.mosaic_prob > 0.0 && rng.random::<f64>() < aug.mosaic_prob;
    let mut sample = augmented(ds, index, mosaic, aug, size, rng);
    // LibreYOLO tests its padded label array here, which is never empty: a mosaic without boxes
    // is mixed too.
    if mosaic && aug.pipeline == Pipeline::Yolo9 && aug.mixup_prob > 0.0 && rng.random::<f64>() < aug.mixup_prob {
        let other = partner(ds, rng);
        let second = augmented(ds, other, false, aug, size, rng);
        mixup::blend_finished(&mut sample.image, &second.image, rng);
        sample.targets.extend(second.targets);
    }
    sample
}

/// Steps 1-3 and 5 of the pipeline: a mosaic (with YOLOX's MixUp) or the image, then HSV,
/// flips and letterbox.
fn augmented(ds: &Dataset, index: usize, mosaic: bool, aug: &Augment, (height, width): (u32, u32), rng: &mut impl Rng) -> Sample {
    let (image, boxes) = if mosaic {
        let indices = [index, partner(ds, rng), partner(ds, rng), partner(ds, rng)];
        let tiles = indices.map(|i| ds.load(i));
        let (canvas, boxes) = mosaic::build(tiles, height, width, rng);
        let params = affine::AffineParams { degrees: aug.degrees, translate: aug.translate, scale: aug.scale, shear: aug.shear };
        let m = affine::random_matrix(&params, width, height, rng);
        let mut boxes = boxes;
        let mut image = affine::warp(&canvas, &mut boxes, m, width, height);
        if aug.pipeline == Pipeline::Yolo9 {
            boxes.keep_larger_than(2.0);
        }
        // MixUp only with boxes to mix and a partner that has some (else skipped, as LibreYOLO).
        if aug.pipeline == Pipeline::Yolox
            && aug.mixup_prob > 0.0
            && !boxes.is_empty()
            && rng.random::<f64>() < aug.mixup_prob
            && let Ok(other) = labelled(ds, rng)
        {
            let (img, other_boxes) = ds.load(other);
            mixup::blend(&mut image, &mut boxes, (&img, other_boxes), aug.mixup_scale, rng);
        }
        (image, boxes)
    } else {
        let (img, boxes) = ds.load(index);
        (RgbImage::clone(&img), boxes)
    };
    finish(image, boxes, aug, (height, width), index, rng)
}

/// HSV, flips, letterbox (or stretch), tiny-box filter with fallback, normalisation.
fn finish(mut image: RgbImage, mut boxes: Boxes, aug: &Augment, (height, width): (u32, u32), index: usize, rng: &mut impl Rng) -> Sample {
    if aug.pipeline == Pipeline::Yolox && boxes.is_empty() {
        // YOLOX's TrainTransform letterboxes an image without boxes as it is.
        let (out, _) = aug.resize.apply_owned(image, &mut boxes, height, width);
        return Sample { image: out, targets: vec![], index };
    }
    // When no box would survive the resize's tiny-box filter, the sample falls back to the
    // image before HSV and flips: keep a copy only then (it was a 1.2 MB copy per sample). The
    // margin covers the flips' rounding (W - x2 vs x2), so a box counted here surely survives.
    let survives = aug.resize.scaled_sides(&boxes, image.dimensions(), height, width).into_iter().any(|(w, h)| w > 1.001 && h > 1.001);
    let original = (!boxes.is_empty() && !survives).then(|| (image.clone(), boxes.clone()));
    if rng.random::<f64>() < aug.hsv_prob {
        hsv::jitter(&mut image, rng);
    }
    if rng.random::<f64>() < aug.flip_prob {
        flip::horizontal(&mut image, &mut boxes);
    }
    if rng.random::<f64>() < aug.flipud {
        flip::vertical(&mut image, &mut boxes);
    }
    let (mut out, _) = aug.resize.apply_owned(image, &mut boxes, height, width);
    boxes.keep_larger_than(1.0);
    if boxes.is_empty()
        && let Some((img, mut b)) = original
    {
        out = aug.resize.apply(&img, &mut b, height, width).0;
        boxes = b;
    }
    Sample { image: out, targets: normalise(&boxes, height, width), index }
}

/// A validation sample: the resize only. Returns the sample and the (x, y) scale from the
/// dataset's image (pre-resized for a letterbox) to it.
pub fn val_sample(ds: &Dataset, index: usize, (height, width): (u32, u32), resize: Resize) -> (Sample, [f32; 2]) {
    let (img, mut boxes) = ds.load(index);
    let (out, s) = resize.apply(&img, &mut boxes, height, width);
    (Sample { image: out, targets: normalise(&boxes, height, width), index }, s)
}

fn normalise(boxes: &Boxes, height: u32, width: u32) -> Vec<[f32; 5]> {
    let (w, h) = (width as f32, height as f32);
    boxes
        .xyxy
        .iter()
        .zip(&boxes.cls)
        .map(|(b, c)| [*c as f32, (b[0] / w).clamp(0.0, 1.0), (b[1] / h).clamp(0.0, 1.0), (b[2] / w).clamp(0.0, 1.0), (b[3] / h).clamp(0.0, 1.0)])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::augment::letterbox;
    use crate::data::image::resize;
    use rand::SeedableRng;

    fn augment() -> Augment {
        Augment {
            mosaic_prob: 0.0,
            mixup_prob: 0.0,
            pipeline: Pipeline::Yolo9,
            mixup_scale: [0.5, 1.5],
            degrees: 0.0,
            translate: 0.0,
            scale: [1.0, 1.0],
            shear: 0.0,
            hsv_prob: 1.0,
            flip_prob: 1.0,
            flipud: 0.0,
            resize: Resize::Letterbox,
        }
    }

    fn picture(w: u32, h: u32) -> RgbImage {
        RgbImage::from_fn(w, h, |x, y| image::Rgb([(x * 3 + y) as u8, (x * y % 251) as u8, (200 - (x + y) % 150) as u8]))
    }

    /// Boxes that the letterbox shrinks below a pixel send the sample back to its image before
    /// HSV and flips, with those boxes (LibreYOLO's fallback); boxes that survive keep the
    /// augmentation. Both from one image twice the training size (letterbox ratio 1/2).
    #[test]
    fn a_sample_whose_boxes_all_vanish_falls_back_to_the_unaugmented_image() {
        let img = picture(128, 96);
        let plain = letterbox::apply(&img, &mut Boxes::default(), 48, 64).0;
        let tiny = Boxes { xyxy: vec![[10.0, 10.0, 11.5, 11.5]], cls: vec![3] };
        let large = Boxes { xyxy: vec![[10.0, 10.0, 60.0, 50.0]], cls: vec![3] };
        for seed in 0..8u64 {
            let fallback = finish(img.clone(), tiny.clone(), &augment(), (48, 64), 0, &mut rand::rngs::StdRng::seed_from_u64(seed));
            assert_eq!(fallback.image.as_raw(), plain.as_raw(), "seed {seed}: the fallback is the plain letterbox");
            assert_eq!(fallback.targets.len(), 1);
            assert_eq!(fallback.targets[0][0], 3.0);
            let kept = finish(img.clone(), large.clone(), &augment(), (48, 64), 0, &mut rand::rngs::StdRng::seed_from_u64(seed));
            assert_ne!(kept.image.as_raw(), plain.as_raw(), "seed {seed}: a surviving box keeps the flip");
            // Flipped in the 128-px image (x 10..60 -> 68..118), then halved: 34..59.
            assert!((kept.targets[0][1] - 34.0 / 64.0).abs() < 1e-6 && (kept.targets[0][3] - 59.0 / 64.0).abs() < 1e-6, "{:?}", kept.targets);
        }
    }

    /// An image without boxes: YOLOX's TrainTransform letterboxes it as it is, YOLOv9's still
    /// jitters and flips it.
    #[test]
    fn a_yolox_sample_without_boxes_is_only_letterboxed() {
        let img = picture(128, 96);
        let plain = letterbox::apply(&img, &mut Boxes::default(), 48, 64).0;
        let yolox = Augment { pipeline: Pipeline::Yolox, ..augment() };
        for seed in 0..4u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let sample = finish(img.clone(), Boxes::default(), &yolox, (48, 64), 0, &mut rng);
            assert_eq!(sample.image.as_raw(), plain.as_raw(), "seed {seed}");
            assert!(sample.targets.is_empty());
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let yolo9 = finish(img.clone(), Boxes::default(), &augment(), (48, 64), 0, &mut rng);
            assert_ne!(yolo9.image.as_raw(), plain.as_raw(), "seed {seed}: YOLOv9 flips it (flip_prob 1)");
        }
    }

    /// RT-DETR's stretch: each axis scaled on its own (x by 64/128, y by 48/32 here), the flip
    /// in the original's pixels, the 1-px filter after the stretch, and the fallback to the
    /// plain stretch of the image when every box falls under it.
    #[test]
    fn a_stretched_sample_scales_each_axis_and_filters_after_the_stretch() {
        let img = picture(128, 32);
        let stretch = Augment { resize: Resize::Stretch, hsv_prob: 0.0, ..augment() };
        let plain = resize(&img, 64, 48);
        // 1.5 px high in the original, 2.25 after the stretch: kept (a letterbox would halve it).
        let low = Boxes { xyxy: vec![[10.0, 10.0, 60.0, 11.5]], cls: vec![1] };
        let kept = finish(img.clone(), low, &stretch, (48, 64), 0, &mut rand::rngs::StdRng::seed_from_u64(0));
        assert_ne!(kept.image.as_raw(), plain.as_raw(), "flipped (flip_prob 1)");
        let want = [1.0, 34.0 / 64.0, 15.0 / 48.0, 59.0 / 64.0, 17.25 / 48.0];
        assert!(kept.targets[0].iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6), "{:?}", kept.targets);
        // 1.5 px wide, 0.75 after the stretch: gone, and the sample is the plain stretch.
        let narrow = Boxes { xyxy: vec![[10.0, 10.0, 11.5, 30.0]], cls: vec![2] };
        let fallback = finish(img.clone(), narrow, &stretch, (48, 64), 0, &mut rand::rngs::StdRng::seed_from_u64(0));
        assert_eq!(fallback.image.as_raw(), plain.as_raw());
        assert_eq!(fallback.targets.len(), 1, "LibreYOLO keeps the original boxes in its fallback");
    }
}
