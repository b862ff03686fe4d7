//! Horizontal and vertical flips of an image and its boxes.

use image::RgbImage;
use image::imageops;

use super::Boxes;

pub fn horizontal(img: &mut RgbImage, boxes: &mut Boxes) {
    imageops::flip_horizontal_in_place(img);
    let w = img.width() as f32;
    for b in &mut boxes.xyxy {
        *b = [w - b[2], b[1], w - b[0], b[3]];
    }
}

pub fn vertical(img: &mut RgbImage, boxes: &mut Boxes) {
    imageops::flip_vertical_in_place(img);
    let h = img.height() as f32;
    for b in &mut boxes.xyxy {
        *b = [b[0], h - b[3], b[2], h - b[1]];
    }
}
