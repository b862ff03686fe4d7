//! A grid of augmented training samples with their boxes drawn, written as a PNG: the quickest
//! way to see what the network is fed.

use std::path::Path;

use image::{Rgb, RgbImage};

use super::loader::Batch;

/// Distinct colours for classes (cycled).
pub const COLOURS: [[u8; 3]; 10] = [
    [230, 25, 75],
    [60, 180, 75],
    [255, 225, 25],
    [0, 130, 200],
    [245, 130, 48],
    [145, 30, 180],
    [70, 240, 240],
    [240, 50, 230],
    [210, 245, 60],
    [250, 190, 212],
];

/// Draws the images of `batch` in a grid of `columns`, boxes in class colours.
pub fn grid(batch: &Batch, columns: usize) -> RgbImage {
    let (h, w) = (batch.height, batch.width);
    let cols = columns.clamp(1, batch.size.max(1)) as u32;
    let rows = (batch.size as u32).div_ceil(cols);
    let mut out = RgbImage::new(cols * w, rows * h);
    let plane = (h * w) as usize;
    for i in 0..batch.size {
        let (ox, oy) = ((i as u32 % cols) * w, (i as u32 / cols) * h);
        let img = &batch.images[i * 3 * plane..(i + 1) * 3 * plane];
        for y in 0..h {
            for x in 0..w {
                let p = (y * w + x) as usize;
                out.put_pixel(ox + x, oy + y, Rgb([img[p], img[plane + p], img[2 * plane + p]]));
            }
        }
        for row in batch.targets[i * batch.rows * 5..(i + 1) * batch.rows * 5].chunks_exact(5) {
            if row[0] < 0.0 {
                continue;
            }
            let c = Rgb(COLOURS[row[0] as usize % COLOURS.len()]);
            let x1 = ox + (row[1] * w as f32) as u32;
            let y1 = oy + (row[2] * h as f32) as u32;
            let x2 = ox + ((row[3] * w as f32) as u32).min(w - 1);
            let y2 = oy + ((row[4] * h as f32) as u32).min(h - 1);
            rectangle(&mut out, (x1, y1, x2, y2), c);
        }
    }
    out
}

/// A 2-pixel rectangle outline.
fn rectangle(img: &mut RgbImage, (x1, y1, x2, y2): (u32, u32, u32, u32), c: Rgb<u8>) {
    for t in 0..2 {
        for x in x1..=x2 {
            for y in [y1 + t, y2.saturating_sub(t)] {
                if x < img.width() && y < img.height() {
                    img.put_pixel(x, y, c);
                }
            }
        }
        for y in y1..=y2 {
            for x in [x1 + t, x2.saturating_sub(t)] {
                if x < img.width() && y < img.height() {
                    img.put_pixel(x, y, c);
                }
            }
        }
    }
}

pub fn write_png(img: &RgbImage, path: &Path) -> Result<(), String> {
    img.save_with_format(path, image::ImageFormat::Png).map_err(|e| format!("writing {}: {e}", path.display()))
}
