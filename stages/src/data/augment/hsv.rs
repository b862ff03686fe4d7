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
    for px in img.pixels_mut() {
        let (h, s, v) = rgb_to_hsv(px.0);
        px.0 = hsv_to_rgb(hue[h as usize], sat[s as usize], val[v as usize]);
    }
}

/// OpenCV's `COLOR_RGB2HSV` for 8-bit images.
pub fn rgb_to_hsv([r, g, b]: [u8; 3]) -> (u8, u8, u8) {
    let (r, g, b) = (r as f32, g as f32, b as f32);
    let v = r.max(g).max(b);
    let diff = v - r.min(g).min(b);
    let s = if v > 0.0 { 255.0 * diff / v } else { 0.0 };
    let mut h = if diff == 0.0 {
        0.0
    } else if v == r {
        60.0 * (g - b) / diff
    } else if v == g {
        120.0 + 60.0 * (b - r) / diff
    } else {
        240.0 + 60.0 * (r - g) / diff
    };
    if h < 0.0 {
        h += 360.0;
    }
    let h = (h / 2.0).round() as u32 % 180;
    (h as u8, s.round() as u8, v as u8)
}

/// OpenCV's `COLOR_HSV2RGB` for 8-bit images.
pub fn hsv_to_rgb(h: u8, s: u8, v: u8) -> [u8; 3] {
    let v_f = v as f32;
    if s == 0 {
        return [v, v, v];
    }
    let s = s as f32 / 255.0;
    let h = h as f32 * 2.0 / 60.0; // sector in [0, 6)
    let sector = h.floor();
    let f = h - sector;
    let p = v_f * (1.0 - s);
    let q = v_f * (1.0 - s * f);
    let t = v_f * (1.0 - s * (1.0 - f));
    let (r, g, b) = match sector as i32 % 6 {
        0 => (v_f, t, p),
        1 => (q, v_f, p),
        2 => (p, v_f, t),
        3 => (p, q, v_f),
        4 => (t, p, v_f),
        _ => (v_f, p, q),
    };
    [r.round() as u8, g.round() as u8, b.round() as u8]
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
