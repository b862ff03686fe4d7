//! HSV jitter on OpenCV's 8-bit HSV scales (H in [0, 180), S and V in [0, 255]), as
//! LibreYOLO's `augment_hsv`: integer offsets `U(-1, 1) * [5, 30, 30]`, each channel's offset
//! zeroed with probability 1/2; H wraps, S and V clip. Both conversions are OpenCV's to the
//! bit, so the jitter darkens as LibreYOLO's does: OpenCV's HSV-to-RGB truncates, and a round
//! trip with all offsets zero (which LibreYOLO still makes) lowers 86% of colours by ~0.34 of a
//! step a channel on average.

use image::RgbImage;
use rand::Rng;

const GAINS: [f32; 3] = [5.0, 30.0, 30.0];

/// The H, S, V offsets of one jitter: `U(-1, 1) * gain`, each kept with probability 1/2.
fn draw_offsets(rng: &mut impl Rng) -> [i32; 3] {
    let mut offsets = [0i32; 3];
    for (o, g) in offsets.iter_mut().zip(GAINS) {
        let v = rng.random_range(-1.0f32..1.0) * g;
        let keep = rng.random_range(0..2);
        *o = (v * keep as f32) as i32; // truncation toward zero, like astype(int16)
    }
    offsets
}

pub fn jitter(img: &mut RgbImage, rng: &mut impl Rng) {
    let offsets = draw_offsets(rng);
    // Per-channel lookup tables: the shift is independent of the other channels.
    let hue: Vec<u8> = (0..180i32).map(|h| (h + offsets[0]).rem_euclid(180) as u8).collect();
    let sat: Vec<u8> = (0..256i32).map(|s| (s + offsets[1]).clamp(0, 255) as u8).collect();
    let val: Vec<u8> = (0..256i32).map(|v| (v + offsets[2]).clamp(0, 255) as u8).collect();
    let (sdiv, hdiv) = tables();
    let convert = |rgb: [u8; 3]| {
        let (h, s, v) = rgb_to_hsv_with(rgb, sdiv, hdiv);
        hsv_to_rgb(hue[h as usize], sat[s as usize], val[v as usize])
    };
    // The conversion is a pure function of the colour, and colours repeat (the mosaic's and the
    // letterbox's fill, flat regions, JPEG's smooth blocks): a small direct-mapped memo of
    // recent colours answers many pixels. HSV was over a quarter of a loader worker's time.
    let mut memo = ColourMemo::new();
    for px in img.as_mut().chunks_exact_mut(3) {
        px.copy_from_slice(&memo.get_or_insert([px[0], px[1], px[2]], convert));
    }
}

/// A direct-mapped cache from colours to their converted colours, small enough for L1.
struct ColourMemo {
    /// 0 is "empty": colours are stored as 0x01RRGGBB.
    keys: [u32; 1 << Self::BITS],
    values: [[u8; 3]; 1 << Self::BITS],
}

impl ColourMemo {
    const BITS: u32 = 12;

    fn new() -> Self {
        Self { keys: [0; 1 << Self::BITS], values: [[0; 3]; 1 << Self::BITS] }
    }

    #[inline(always)]
    fn get_or_insert(&mut self, [r, g, b]: [u8; 3], convert: impl Fn([u8; 3]) -> [u8; 3]) -> [u8; 3] {
        let key = 0x0100_0000 | (r as u32) << 16 | (g as u32) << 8 | b as u32;
        let slot = (key.wrapping_mul(0x9E37_79B1) >> (32 - Self::BITS)) as usize;
        if self.keys[slot] != key {
            self.keys[slot] = key;
            self.values[slot] = convert([r, g, b]);
        }
        self.values[slot]
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

/// OpenCV's `COLOR_HSV2RGB` for 8-bit images, to the bit: its float path (`HSV2RGB_b`): S and V
/// scaled by 1/255 and H by 1/30 in f32, the sector's two ramps `v * (1 - s * f)` with a fused
/// multiply-add, each channel scaled back by 255 and truncated.
#[inline(always)]
pub fn hsv_to_rgb(h: u8, s: u8, v: u8) -> [u8; 3] {
    let (s, v) = (s as f32 * (1.0 / 255.0), v as f32 * (1.0 / 255.0));
    let byte = |x: f32| (x * 255.0) as u8; // `as` truncates, as OpenCV's conversion back does
    if s == 0.0 {
        return [byte(v); 3];
    }
    let h = h as f32 * (1.0 / 30.0);
    let sector = h.floor();
    let f = h - sector;
    // OpenCV's `tab`: v, v(1 - s), v(1 - s f), v(1 - s (1 - f)).
    let tab = [v, v * (1.0 - s), v * (-s).mul_add(f, 1.0), v * (-s).mul_add(1.0 - f, 1.0)];
    let [r, g, b] = match sector as u32 {
        0 => [0, 3, 1],
        1 => [2, 0, 1],
        2 => [1, 0, 3],
        3 => [1, 2, 0],
        4 => [3, 1, 0],
        _ => [0, 1, 2],
    };
    [byte(tab[r]), byte(tab[g]), byte(tab[b])]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The jitter is the per-pixel definition with the offsets it drew, for every colour.
    #[test]
    fn jitter_converts_every_colour_as_the_per_pixel_definition() {
        use rand::SeedableRng;
        let colours: Vec<u8> = (0..1u32 << 24).flat_map(|c| [(c >> 16) as u8, (c >> 8) as u8, c as u8]).collect();
        let mut tested = 0;
        for seed in 0..40u64 {
            // The offsets jitter draws, replayed on a clone of the generator.
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let offsets = draw_offsets(&mut rng.clone());
            if tested == 3 {
                continue;
            }
            tested += 1;
            let mut img = RgbImage::from_raw(4096, 4096, colours.clone()).unwrap();
            jitter(&mut img, &mut rng);
            for (c, px) in img.as_raw().chunks_exact(3).enumerate() {
                let rgb = [(c >> 16) as u8, (c >> 8) as u8, c as u8];
                let (h, s, v) = rgb_to_hsv(rgb);
                let want = hsv_to_rgb(
                    (h as i32 + offsets[0]).rem_euclid(180) as u8,
                    (s as i32 + offsets[1]).clamp(0, 255) as u8,
                    (v as i32 + offsets[2]).clamp(0, 255) as u8,
                );
                assert_eq!(px, want, "colour {rgb:?} with offsets {offsets:?}");
            }
        }
        assert_eq!(tested, 3);
    }

    /// Every HSV triple converts as OpenCV's `COLOR_HSV2RGB` does: a checksum of OpenCV's whole
    /// table (180 x 256 x 256 triples, RGB bytes in H, S, V order; OpenCV 5.1.0 and 4.x give the
    /// same bytes): `sum(byte_i * (i * 2654435761 + 1))` modulo 2^64.
    #[test]
    fn hsv_to_rgb_is_opencvs_for_every_triple() {
        let mut sum = 0u64;
        let mut i = 0u64;
        for h in 0..180u8 {
            for s in 0..=255u8 {
                for v in 0..=255u8 {
                    for byte in hsv_to_rgb(h, s, v) {
                        sum = sum.wrapping_add((byte as u64).wrapping_mul(i.wrapping_mul(2_654_435_761).wrapping_add(1)));
                        i += 1;
                    }
                }
            }
        }
        assert_eq!(sum, 0x6923_9611_50c4_9e84);
    }

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
