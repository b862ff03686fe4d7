//! Random affine warp (rotation, scale, shear, translation about the origin) of an image to
//! (H, W), bilinear with border 114, as LibreYOLO's `random_affine` (YOLOX's): applied to the
//! 2x mosaic canvas it also brings it down to the training size. Boxes are warped by their
//! corners; the result is their axis-aligned bounds, clipped.

use image::RgbImage;
use rand::Rng;

use super::Boxes;
use crate::data::FILL;

/// Ranges of the random parameters.
#[derive(Debug, Clone, Copy)]
pub struct AffineParams {
    /// Rotation in degrees, uniform in +-degrees.
    pub degrees: f64,
    /// Translation as a fraction of the output size, uniform in +-translate.
    pub translate: f64,
    /// Scale range.
    pub scale: [f64; 2],
    /// Shear in degrees, uniform in +-shear.
    pub shear: f64,
}

/// The 2x3 matrix mapping source pixels to output pixels.
pub fn random_matrix(p: &AffineParams, out_w: u32, out_h: u32, rng: &mut impl Rng) -> [[f64; 3]; 2] {
    let mut uniform = |lo: f64, hi: f64| if hi > lo { rng.random_range(lo..hi) } else { lo };
    let angle = uniform(-p.degrees, p.degrees).to_radians();
    let scale = uniform(p.scale[0], p.scale[1]);
    // cv2.getRotationMatrix2D(angle, centre (0, 0), scale).
    let (a, b) = (scale * angle.cos(), scale * angle.sin());
    let r = [[a, b], [-b, a]];
    let shear_x = uniform(-p.shear, p.shear).to_radians().tan();
    let shear_y = uniform(-p.shear, p.shear).to_radians().tan();
    let tx = uniform(-p.translate, p.translate) * out_w as f64;
    let ty = uniform(-p.translate, p.translate) * out_h as f64;
    [[r[0][0] + shear_y * r[1][0], r[0][1] + shear_y * r[1][1], tx], [r[1][0] + shear_x * r[0][0], r[1][1] + shear_x * r[0][1], ty]]
}

/// Bits of the fixed-point bilinear weights (each axis).
const FRAC_BITS: u32 = 8;
const ONE: i32 = 1 << FRAC_BITS;
/// Fractional bits of the source position accumulated along a row (drift < 0.001 px per row).
const ACC_BITS: u32 = 20;

/// Warps `img` to `out_w` x `out_h` through `m` and moves the boxes with it.
///
/// Bilinear sampling with 8-bit fixed-point weights (OpenCV uses 5-bit tables); source pixels
/// outside the image read as the border value 114. Each output row walks the source along a
/// straight line, so the inverse map costs two additions per pixel.
/// A pixel whose 2x2 source neighbourhood crosses the image border: outside taps read 114.
#[allow(clippy::too_many_arguments)]
#[inline]
fn border_pixel(px: &mut [u8], src: &[u8], stride: usize, sw: i32, sh: i32, x0: i32, y0: i32, w: [i32; 4]) {
    let tap = |xx: i32, yy: i32, c: usize| -> i32 {
        if xx < 0 || yy < 0 || xx >= sw || yy >= sh { FILL as i32 } else { src[yy as usize * stride + xx as usize * 3 + c] as i32 }
    };
    for (c, out) in px.iter_mut().enumerate().take(3) {
        let v = tap(x0, y0, c) * w[0] + tap(x0 + 1, y0, c) * w[1] + tap(x0, y0 + 1, c) * w[2] + tap(x0 + 1, y0 + 1, c) * w[3];
        *out = ((v + (1 << (2 * FRAC_BITS - 1))) >> (2 * FRAC_BITS)) as u8;
    }
}

pub fn warp(img: &RgbImage, boxes: &mut Boxes, m: [[f64; 3]; 2], out_w: u32, out_h: u32) -> RgbImage {
    let det = m[0][0] * m[1][1] - m[0][1] * m[1][0];
    let inv = [[m[1][1] / det, -m[0][1] / det], [-m[1][0] / det, m[0][0] / det]];
    let (sw, sh) = (img.width() as i32, img.height() as i32);
    let src = img.as_raw();
    let stride = sw as usize * 3;
    let mut out = vec![FILL; (out_w * out_h * 3) as usize];
    let scale = (1i64 << ACC_BITS) as f64;
    let frac_mask = (1i64 << ACC_BITS) - 1;
    // Axis-aligned (no rotation, no shear: LibreYOLO's default): the source column of every
    // output column is the same on every row, so it is computed once; same integers as below.
    let axis_aligned = inv[0][1] == 0.0 && inv[1][0] == 0.0;
    let columns: Vec<(i32, i32)> = if axis_aligned {
        let mut sx = ((inv[0][0] * -m[0][2]) * scale) as i64;
        let step_x = (inv[0][0] * scale) as i64;
        (0..out_w)
            .map(|_| {
                let c = ((sx >> ACC_BITS) as i32, ((sx & frac_mask) >> (ACC_BITS - FRAC_BITS)) as i32);
                sx += step_x;
                c
            })
            .collect()
    } else {
        vec![]
    };
    for y in 0..out_h as usize {
        let dy = y as f64 - m[1][2];
        if axis_aligned {
            let sy = ((inv[1][1] * dy) * scale) as i64;
            let (y0, fy) = ((sy >> ACC_BITS) as i32, ((sy & frac_mask) >> (ACC_BITS - FRAC_BITS)) as i32);
            if y0 < -1 || y0 >= sh {
                continue;
            }
            let row = &mut out[y * out_w as usize * 3..(y + 1) * out_w as usize * 3];
            let interior_row = y0 >= 0 && y0 + 1 < sh;
            for (px, &(x0, fx)) in row.chunks_exact_mut(3).zip(&columns) {
                if x0 < -1 || x0 >= sw {
                    continue;
                }
                let w = [(ONE - fx) * (ONE - fy), fx * (ONE - fy), (ONE - fx) * fy, fx * fy];
                if interior_row && x0 >= 0 && x0 + 1 < sw {
                    let o = y0 as usize * stride + x0 as usize * 3;
                    let (top, bottom) = (&src[o..o + 6], &src[o + stride..o + stride + 6]);
                    for c in 0..3 {
                        let v = top[c] as i32 * w[0] + top[3 + c] as i32 * w[1] + bottom[c] as i32 * w[2] + bottom[3 + c] as i32 * w[3];
                        px[c] = ((v + (1 << (2 * FRAC_BITS - 1))) >> (2 * FRAC_BITS)) as u8;
                    }
                } else {
                    border_pixel(px, src, stride, sw, sh, x0, y0, w);
                }
            }
            continue;
        }
        // Source position of x = 0 and its step per output pixel, in fixed point.
        let mut sx = ((inv[0][0] * -m[0][2] + inv[0][1] * dy) * scale) as i64;
        let mut sy = ((inv[1][0] * -m[0][2] + inv[1][1] * dy) * scale) as i64;
        let (step_x, step_y) = ((inv[0][0] * scale) as i64, (inv[1][0] * scale) as i64);
        let row = &mut out[y * out_w as usize * 3..(y + 1) * out_w as usize * 3];
        for px in row.chunks_exact_mut(3) {
            let (x0, y0) = ((sx >> ACC_BITS) as i32, (sy >> ACC_BITS) as i32);
            let fx = ((sx & frac_mask) >> (ACC_BITS - FRAC_BITS)) as i32;
            let fy = ((sy & frac_mask) >> (ACC_BITS - FRAC_BITS)) as i32;
            sx += step_x;
            sy += step_y;
            if x0 < -1 || y0 < -1 || x0 >= sw || y0 >= sh {
                continue;
            }
            let w = [(ONE - fx) * (ONE - fy), fx * (ONE - fy), (ONE - fx) * fy, fx * fy];
            if x0 >= 0 && y0 >= 0 && x0 + 1 < sw && y0 + 1 < sh {
                let o = y0 as usize * stride + x0 as usize * 3;
                for c in 0..3 {
                    let v = src[o + c] as i32 * w[0] + src[o + 3 + c] as i32 * w[1] + src[o + stride + c] as i32 * w[2] + src[o + stride + 3 + c] as i32 * w[3];
                    px[c] = ((v + (1 << (2 * FRAC_BITS - 1))) >> (2 * FRAC_BITS)) as u8;
                }
            } else {
                border_pixel(px, src, stride, sw, sh, x0, y0, w);
            }
        }
    }
    for b in &mut boxes.xyxy {
        let corners = [(b[0], b[1]), (b[2], b[3]), (b[0], b[3]), (b[2], b[1])];
        let mut lo = [f64::MAX; 2];
        let mut hi = [f64::MIN; 2];
        for (cx, cy) in corners {
            let (cx, cy) = (cx as f64, cy as f64);
            let nx = m[0][0] * cx + m[0][1] * cy + m[0][2];
            let ny = m[1][0] * cx + m[1][1] * cy + m[1][2];
            lo = [lo[0].min(nx), lo[1].min(ny)];
            hi = [hi[0].max(nx), hi[1].max(ny)];
        }
        *b = [
            lo[0].clamp(0.0, out_w as f64) as f32,
            lo[1].clamp(0.0, out_h as f64) as f32,
            hi[0].clamp(0.0, out_w as f64) as f32,
            hi[1].clamp(0.0, out_h as f64) as f32,
        ];
    }
    RgbImage::from_raw(out_w, out_h, out).expect("sized buffer")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// The axis-aligned fast path gives the same pixels as the general path: a tiny shear
    /// sends the same warp through the general code.
    #[test]
    fn axis_aligned_path_matches_the_general_path() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let img = RgbImage::from_fn(97, 61, |x, y| image::Rgb([(x * 7 + y) as u8, (x * y) as u8, (x + 3 * y) as u8]));
        for (scale, tx, ty) in [(1.3, 5.0, -7.0), (0.6, -20.0, 11.0), (0.5, 0.0, 0.0), (1.0, 0.25, 0.75)] {
            let fast = warp(&img, &mut Boxes::default(), [[scale, 0.0, tx], [0.0, scale, ty]], 80, 64);
            // The general path with the same matrix: forced by comparing pixel by pixel
            // against a direct evaluation of the general loop (shear 1e-300 keeps the numbers).
            let general = warp(&img, &mut Boxes::default(), [[scale, 1e-300, tx], [1e-300, scale, ty]], 80, 64);
            assert!(fast.as_raw() == general.as_raw(), "scale {scale} t ({tx}, {ty})");
        }
        let _ = random_matrix(&AffineParams { degrees: 0.0, translate: 0.1, scale: [0.5, 1.5], shear: 0.0 }, 640, 640, &mut rng);
    }
}
