//! How an image meets the network's (H, W) input (`data.resize`): LibreYOLO's letterbox (its
//! YOLO families), or a plain stretch to the input, aspect not kept (its DETR families:
//! `RTDETRTrainTransform` in training, `RTDETRValPreprocessor` and `preprocess_numpy` in
//! validation and inference).
//!
//! A letterbox reads the dataset's pre-resized images (longer side fitted), so the letterbox
//! itself only pads. A stretch reads the originals (LibreYOLO's `wants_unresized_image`), so an
//! image is resampled once, straight to (H, W).

use image::RgbImage;

use super::{Boxes, letterbox};
use crate::data::image::resize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Resize {
    /// Aspect kept, image at the top-left, the rest filled with 114 ([`letterbox`]).
    #[default]
    Letterbox,
    /// Each axis scaled on its own to fill (H, W).
    Stretch,
}

impl Resize {
    /// Whether the dataset keeps its images pre-resized (the letterbox's) or as decoded.
    pub fn pre_resizes(self) -> bool {
        self == Resize::Letterbox
    }

    /// The (x, y) scale from an image of `(w, h)` pixels to the (H, W) input: a box of the
    /// input maps back to the image by dividing by it.
    pub fn scale(self, (w, h): (u32, u32), height: u32, width: u32) -> [f32; 2] {
        match self {
            Resize::Letterbox => [(height as f32 / h as f32).min(width as f32 / w as f32); 2],
            Resize::Stretch => [width as f32 / w as f32, height as f32 / h as f32],
        }
    }

    /// The image at (H, W) with its boxes scaled to it, and the scale applied (x, y).
    pub fn apply(self, img: &RgbImage, boxes: &mut Boxes, height: u32, width: u32) -> (RgbImage, [f32; 2]) {
        match self {
            Resize::Letterbox => {
                let (out, r) = letterbox::apply(img, boxes, height, width);
                (out, [r; 2])
            }
            Resize::Stretch => {
                let s = stretch_scale(img.dimensions(), height, width);
                scale_boxes(boxes, s);
                (resize(img, width, height), s)
            }
        }
    }

    /// [`Resize::apply`] taking the image: one already at (H, W) (a mosaic's output) is returned
    /// as it is instead of copied.
    pub fn apply_owned(self, img: RgbImage, boxes: &mut Boxes, height: u32, width: u32) -> (RgbImage, [f32; 2]) {
        if img.dimensions() == (width, height) {
            return (img, [1.0; 2]);
        }
        self.apply(&img, boxes, height, width)
    }

    /// The boxes' sides after [`Resize::apply`] to an image of `(w, h)` (what the tiny-box
    /// filter sees), computed by the same float operations, so with the same decisions.
    pub fn scaled_sides(self, boxes: &Boxes, (w, h): (u32, u32), height: u32, width: u32) -> Vec<(f32, f32)> {
        match self {
            Resize::Letterbox => letterbox::scaled_sides(boxes, (w, h), height, width).collect(),
            Resize::Stretch => {
                let [sx, sy] = if (w, h) == (width, height) { [1.0; 2] } else { stretch_scale((w, h), height, width) };
                boxes.xyxy.iter().map(|b| (b[2] * sx - b[0] * sx, b[3] * sy - b[1] * sy)).collect()
            }
        }
    }
}

/// `(W / w, H / h)`: LibreYOLO's `rx`, `ry`.
fn stretch_scale((w, h): (u32, u32), height: u32, width: u32) -> [f32; 2] {
    [width as f32 / w as f32, height as f32 / h as f32]
}

fn scale_boxes(boxes: &mut Boxes, [sx, sy]: [f32; 2]) {
    for b in &mut boxes.xyxy {
        b[0] *= sx;
        b[2] *= sx;
        b[1] *= sy;
        b[3] *= sy;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn picture(w: u32, h: u32) -> RgbImage {
        RgbImage::from_fn(w, h, |x, y| image::Rgb([(x % 256) as u8, (y % 256) as u8, 7]))
    }

    #[test]
    fn a_stretch_fills_the_input_and_scales_each_axis_on_its_own() {
        let mut boxes = Boxes { xyxy: vec![[10.0, 20.0, 110.0, 60.0]], cls: vec![3] };
        let (out, s) = Resize::Stretch.apply(&picture(200, 100), &mut boxes, 64, 32);
        assert_eq!(out.dimensions(), (32, 64));
        assert_eq!(s, [0.16, 0.64]);
        let want = [1.6, 12.8, 17.6, 38.4];
        assert!(boxes.xyxy[0].iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-5), "{:?}", boxes.xyxy);
        // The filter's view is exactly the sides of the boxes the stretch made.
        let sides = Resize::Stretch.scaled_sides(&Boxes { xyxy: vec![[10.0, 20.0, 110.0, 60.0]], cls: vec![3] }, (200, 100), 64, 32);
        let b = boxes.xyxy[0];
        assert_eq!(sides, vec![(b[2] - b[0], b[3] - b[1])]);
    }

    #[test]
    fn a_letterbox_scales_both_axes_by_the_smaller_ratio() {
        assert_eq!(Resize::Letterbox.scale((200, 100), 64, 32), [0.16, 0.16]);
        assert_eq!(Resize::Stretch.scale((200, 100), 64, 32), [0.16, 0.64]);
        let mut boxes = Boxes { xyxy: vec![[10.0, 20.0, 110.0, 60.0]], cls: vec![0] };
        let (out, s) = Resize::Letterbox.apply(&picture(200, 100), &mut boxes, 64, 32);
        assert_eq!((out.dimensions(), s), ((32, 64), [0.16; 2]));
    }

    #[test]
    fn an_image_at_the_input_size_is_left_as_it_is() {
        let img = picture(32, 64);
        let mut boxes = Boxes { xyxy: vec![[1.0, 2.0, 3.0, 4.0]], cls: vec![0] };
        for resize in [Resize::Letterbox, Resize::Stretch] {
            let (out, s) = resize.apply_owned(img.clone(), &mut boxes, 64, 32);
            assert_eq!((out == img, s), (true, [1.0; 2]), "{resize:?}");
            assert_eq!(boxes.xyxy[0], [1.0, 2.0, 3.0, 4.0]);
        }
    }
}
