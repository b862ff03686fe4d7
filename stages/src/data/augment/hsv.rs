//! HSV jitter on OpenCV's 8-bit HSV scales (H in [0, 180), S and V in [0, 255]), as
//! LibreYOLO's `augment_hsv`: integer offsets `U(-1, 1) * [5, 30, 30]`, each channel's offset
//! zeroed with probability 1/2; H wraps, S and V clip.

use image::RgbImage;
use rand::Rng;

const GAINS: [f32; 3] = [5.0, 30.0, 30.0];

pub fn jitter(img: &mut RgbImage, rng: &mut impl Rng) {
    let mut offsets = [0i32; 3];
    for (o, g) in offsets.iter_mut().zip(GAINS) {
        let v = rng.random_range(-1.0f32..1.0) * g;
        let keep = rng.random_range(0..2);
        *o = (v * keep as f32) as i32; // truncation toward zero, like astype(int16)
    }
    if offsets == [0, 0, 0] {
        return;
    }
    // Per-channel lookup tables: the shift is independent of the other channels.
    let hue: Vec<u8> = (0..180i32).map(|h| (h + offsets[0]).rem_euclid(180) as u8).collect();
    let sat: Vec<u8> = (0..256i32).map(|s| (s + offsets[1]).clamp(0, 255) as u8).collect();
    let val: Vec<u8> = (0..256i32).map(|v| (v + offsets[2]).clamp(0, 255) as u8).collect();
    let (sdiv, hdiv) = tables();
    for px in img.as_mut().chunks_exact_mut(3) {
        let (h, s, v) = rgb_to_hsv_with([px[0], px[1], px[2]], sdiv, hdiv);
        px.copy_from_slice(&hsv_to_rgb(hue[h as usize], sat[s as usize], val[v as usize]));
    }
}

/// Fixed-point shift of OpenCV's division tables.
const SHIFT: u32 = 12;

/// OpenCV's `sdiv_table` and `hdiv_table180`: `(255 << 12) / v` and `(180 << 12) / (6 * d)`.
fn tables() -> &'static ([i32; 256], [i32; 256]) {
    static TABLES: std::sync::OnceLock<([i32; 256], [i32; 256])> = std::sync::OnceLock::new();
    TABLES.get_or_init(|| {
        let mut s = [0i32; 256];
        let mut h = [0i32; 256];
        for i in 1..256 {
            s[i] = ((255u32 << SHIFT) as f64 / i as f64).round() as i32;
            h[i] = ((180u32 << SHIFT) as f64 / (6.0 * i as f64)).round() as i32;
        }
        (s, h)
    })
}

/// OpenCV's `COLOR_RGB2HSV` for 8-bit images (its integer algorithm).
pub fn rgb_to_hsv(rgb: [u8; 3]) -> (u8, u8, u8) {
    let (sdiv, hdiv) = tables();
    rgb_to_hsv_with(rgb, sdiv, hdiv)
}

#[inline(always)]
fn rgb_to_hsv_with([r, g, b]: [u8; 3], sdiv: &[i32; 256], hdiv: &[i32; 256]) -> (u8, u8, u8) {
    let (r, g, b) = (r as i32, g as i32, b as i32);
    let v = r.max(g).max(b);
    let diff = v - r.min(g).min(b);
    let s = (diff * sdiv[v as usize] + (1 << (SHIFT - 1))) >> SHIFT;
    let h = if v == r {
        g - b
    } else if v == g {
        b - r + 2 * diff
    } else {
        r - g + 4 * diff
    };
    let mut h = (h * hdiv[diff as usize] + (1 << (SHIFT - 1))) >> SHIFT;
    if h < 0 {
        h += 180;
    }
    (h as u8, s as u8, v as u8)
}

/// HSV (OpenCV 8-bit scales) to RGB, in integers: the hue circle has 6 sectors of 30 half-degrees.
#[inline(always)]
pub fn hsv_to_rgb(h: u8, s: u8, v: u8) -> [u8; 3] {
    if s == 0 {
        return [v, v, v];
    }
    const D: i32 = 255 * 30;
    let (h, s, v) = (h as i32 % 180, s as i32, v as i32);
    let (sector, f) = (h / 30, h % 30);
    let p = (v * (255 - s) + 127) / 255;
    let q = (v * (D - s * f) + D / 2) / D;
    let t = (v * (D - s * (30 - f)) + D / 2) / D;
    let (r, g, b) = match sector {
        0 => (v, t, p),
        1 => (q, v, p),
        2 => (p, v, t),
        3 => (p, q, v),
        4 => (t, p, v),
        _ => (v, p, q),
    };
    [r as u8, g as u8, b as u8]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opencv_scales_and_round_trip() {
        assert_eq!(rgb_to_hsv([255, 0, 0]), (0, 255, 255));
        assert_eq!(rgb_to_hsv([0, 255, 0]), (60, 255, 255));
        assert_eq!(rgb_to_hsv([0, 0, 255]), (120, 255, 255));
        for rgb in [[12u8, 200, 77], [250, 250, 3], [90, 90, 90], [1, 2, 3]] {
            let (h, s, v) = rgb_to_hsv(rgb);
            let back = hsv_to_rgb(h, s, v);
            for (a, b) in back.iter().zip(rgb) {
                assert!((*a as i32 - b as i32).abs() <= 4, "{rgb:?} -> {back:?}");
            }
        }
    }
}
