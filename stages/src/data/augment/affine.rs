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
    [
        [r[0][0] + shear_y * r[1][0], r[0][1] + shear_y * r[1][1], tx],
        [r[1][0] + shear_x * r[0][0], r[1][1] + shear_x * r[0][1], ty],
    ]
}

/// Warps `img` to `out_w` x `out_h` through `m` and moves the boxes with it.
pub fn warp(img: &RgbImage, boxes: &mut Boxes, m: [[f64; 3]; 2], out_w: u32, out_h: u32) -> RgbImage {
    let det = m[0][0] * m[1][1] - m[0][1] * m[1][0];
    let inv = [
        [m[1][1] / det, -m[0][1] / det],
        [-m[1][0] / det, m[0][0] / det],
    ];
    let (sw, sh) = (img.width() as i64, img.height() as i64);
    let src = img.as_raw();
    let mut out = vec![FILL; (out_w * out_h * 3) as usize];
    for y in 0..out_h as usize {
        let dy = y as f64 - m[1][2];
        for x in 0..out_w as usize {
            let dx = x as f64 - m[0][2];
            let sx = inv[0][0] * dx + inv[0][1] * dy;
            let sy = inv[1][0] * dx + inv[1][1] * dy;
            let (x0, y0) = (sx.floor() as i64, sy.floor() as i64);
            if x0 < -1 || y0 < -1 || x0 >= sw || y0 >= sh {
                continue;
            }
            let (fx, fy) = ((sx - x0 as f64) as f32, (sy - y0 as f64) as f32);
            let px = |xx: i64, yy: i64, c: usize| -> f32 {
                if xx < 0 || yy < 0 || xx >= sw || yy >= sh { FILL as f32 } else { src[((yy * sw + xx) * 3) as usize + c] as f32 }
            };
            let o = (y * out_w as usize + x) * 3;
            for c in 0..3 {
                let top = px(x0, y0, c) * (1.0 - fx) + px(x0 + 1, y0, c) * fx;
                let bottom = px(x0, y0 + 1, c) * (1.0 - fx) + px(x0 + 1, y0 + 1, c) * fx;
                out[o + c] = (top * (1.0 - fy) + bottom * fy).round() as u8;
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
