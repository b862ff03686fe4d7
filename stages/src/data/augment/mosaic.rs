//! Mosaic of four images on a (2H, 2W) canvas filled with 114, around a random centre
//! `xc ~ U(0.5W, 1.5W)`, `yc ~ U(0.5H, 1.5H)`: tile 0 ends at the centre from the top-left,
//! tile 1 starts there to the right, tile 2 below, tile 3 below-right (YOLOX's placement).
//! Boxes move with their tile and are clipped to the canvas.

use std::sync::Arc;

use image::RgbImage;
use rand::Rng;

use super::Boxes;
use crate::data::FILL;
use crate::data::image::resize;

/// Tiles are read in place (they come from the image cache); only a tile larger than the
/// training size is resized.
pub fn build(tiles: [(Arc<RgbImage>, Boxes); 4], height: u32, width: u32, rng: &mut impl Rng) -> (RgbImage, Boxes) {
    let (h2, w2) = (2 * height as i64, 2 * width as i64);
    let yc = rng.random_range(0.5 * height as f64..1.5 * height as f64) as i64;
    let xc = rng.random_range(0.5 * width as f64..1.5 * width as f64) as i64;
    let mut canvas = RgbImage::from_pixel(w2 as u32, h2 as u32, image::Rgb([FILL; 3]));
    let mut out = Boxes::default();
    for (i, (img, mut boxes)) in tiles.into_iter().enumerate() {
        let (h0, w0) = (img.height() as f64, img.width() as f64);
        let scale = 1f64.min(height as f64 / h0).min(width as f64 / w0);
        let img = if scale < 1.0 { Arc::new(resize(&img, (w0 * scale) as u32, (h0 * scale) as u32)) } else { img };
        let (h, w) = (img.height() as i64, img.width() as i64);
        let ((x1a, y1a, x2a, y2a), (x1b, y1b)) = match i {
            0 => {
                let a = ((xc - w).max(0), (yc - h).max(0), xc, yc);
                (a, (w - (a.2 - a.0), h - (a.3 - a.1)))
            }
            1 => {
                let a = (xc, (yc - h).max(0), (xc + w).min(w2), yc);
                (a, (0, h - (a.3 - a.1)))
            }
            2 => {
                let a = ((xc - w).max(0), yc, xc, (yc + h).min(h2));
                (a, (w - (a.2 - a.0), 0))
            }
            _ => ((xc, yc, (xc + w).min(w2), (yc + h).min(h2)), (0, 0)),
        };
        let (cw, ch) = ((x2a - x1a).min(w - x1b), (y2a - y1a).min(h - y1b));
        for y in 0..ch.max(0) {
            let src = ((y1b + y) * w + x1b) as usize * 3;
            let dst = ((y1a + y) * w2 + x1a) as usize * 3;
            let n = cw.max(0) as usize * 3;
            canvas.as_mut()[dst..dst + n].copy_from_slice(&img.as_raw()[src..src + n]);
        }
        let (padw, padh) = ((x1a - x1b) as f32, (y1a - y1b) as f32);
        for b in &mut boxes.xyxy {
            *b = [
                (b[0] * scale as f32 + padw).clamp(0.0, w2 as f32),
                (b[1] * scale as f32 + padh).clamp(0.0, h2 as f32),
                (b[2] * scale as f32 + padw).clamp(0.0, w2 as f32),
                (b[3] * scale as f32 + padh).clamp(0.0, h2 as f32),
            ];
        }
        out.extend(boxes);
    }
    (canvas, out)
}
