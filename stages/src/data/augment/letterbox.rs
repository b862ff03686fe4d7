//! Letterbox: resize into (H, W) keeping the aspect (`r = min(H/h, W/w)`, sides truncated),
//! image at the top-left corner, the rest filled with 114 (LibreYOLO's default `topleft`).

use image::RgbImage;

use super::Boxes;
use crate::data::FILL;
use crate::data::image::{fit, resize};

/// The letterboxed image and the ratio `r` (boxes scale by `r`, no offset).
pub fn apply(img: &RgbImage, boxes: &mut Boxes, height: u32, width: u32) -> (RgbImage, f32) {
    if at_size(img.dimensions(), height, width) {
        return (img.clone(), 1.0); // already the training size (mosaic output): nothing to do
    }
    let (r, nw, nh) = fit(img.width(), img.height(), height, width);
    let resized = resize(img, nw, nh);
    let mut out = RgbImage::from_pixel(width, height, image::Rgb([FILL; 3]));
    image::imageops::replace(&mut out, &resized, 0, 0);
    for b in &mut boxes.xyxy {
        for v in b.iter_mut() {
            *v *= r;
        }
    }
    (out, r)
}

/// [`apply`] taking the image: one already at the training size (a mosaic's output) is returned
/// as it is instead of copied.
pub fn apply_owned(img: RgbImage, boxes: &mut Boxes, height: u32, width: u32) -> (RgbImage, f32) {
    if at_size(img.dimensions(), height, width) {
        return (img, 1.0);
    }
    apply(&img, boxes, height, width)
}

/// Whether an image of `(w, h)` is already the training size: letterboxing leaves it (and its
/// boxes) as it is, ratio 1.
fn at_size((w, h): (u32, u32), height: u32, width: u32) -> bool {
    (w, h) == (width, height)
}

/// The boxes' sides after [`apply`] to an image of `img_w` x `img_h` (what the tiny-box filter sees),
/// without letterboxing: the same float operations, so the same decisions.
pub fn scaled_sides(boxes: &Boxes, (img_w, img_h): (u32, u32), height: u32, width: u32) -> impl Iterator<Item = (f32, f32)> + '_ {
    let same = at_size((img_w, img_h), height, width);
    let (r, _, _) = fit(img_w, img_h, height, width);
    boxes.xyxy.iter().map(move |b| if same { (b[2] - b[0], b[3] - b[1]) } else { (b[2] * r - b[0] * r, b[3] * r - b[1] * r) })
}

/// Maps a box of the letterboxed image back to the original image's pixels.
pub fn unapply(xyxy: [f32; 4], r: f32, orig_w: u32, orig_h: u32) -> [f32; 4] {
    [
        (xyxy[0] / r).clamp(0.0, orig_w as f32),
        (xyxy[1] / r).clamp(0.0, orig_h as f32),
        (xyxy[2] / r).clamp(0.0, orig_w as f32),
        (xyxy[3] / r).clamp(0.0, orig_h as f32),
    ]
}
