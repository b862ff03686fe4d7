//! Decoding images (JPEG, PNG, BMP, GIF, TIFF, WebP, PPM/PGM; EXIF orientation ignored, as OpenCV's
//! `IMREAD_IGNORE_ORIENTATION`) to RGB, and the pre-resize of LibreYOLO's cache: the longer
//! side fitted to the training size, aspect kept, bilinear.

use std::path::Path;

use fast_image_resize::images::Image;
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
use image::RgbImage;

/// Image extensions a dataset folder is scanned for (any case): LibreYOLO's `IMG_FORMATS` for
/// detection datasets and torchvision's `ImageFolder` extensions for classification ones (the
/// union), except LibreYOLO's `.pfm` (float maps, which the `image` crate does not decode).
pub const EXTENSIONS: &[&str] = &["jpg", "jpeg", "png", "bmp", "gif", "tif", "tiff", "webp", "ppm", "pgm"];

pub fn is_image(path: &Path) -> bool {
    path.extension().and_then(|e| e.to_str()).is_some_and(|e| EXTENSIONS.iter().any(|x| x.eq_ignore_ascii_case(e)))
}

/// Decodes `path` to RGB8.
pub fn decode(path: &Path) -> Result<RgbImage, String> {
    let reader = image::ImageReader::open(path).map_err(|e| e.to_string())?.with_guessed_format().map_err(|e| e.to_string())?;
    let img = reader.decode().map_err(|e| e.to_string())?;
    Ok(img.into_rgb8())
}

/// Width and height from the file header, without decoding the pixels.
pub fn dimensions(path: &Path) -> Result<(u32, u32), String> {
    image::ImageReader::open(path).map_err(|e| e.to_string())?.with_guessed_format().map_err(|e| e.to_string())?.into_dimensions().map_err(|e| e.to_string())
}

/// Resizes `img` to `width` x `height` (bilinear).
pub fn resize(img: &RgbImage, width: u32, height: u32) -> RgbImage {
    resize_with(img, width, height, Interpolation::Bilinear)
}

/// How an image is resampled: PIL's filters, antialiased when shrinking as PIL's are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Interpolation {
    #[default]
    Bilinear,
    /// PIL's BICUBIC (a = -0.5: Catmull-Rom), LibreYOLO's classifiers' (timm's) choice.
    Bicubic,
}

/// Resizes `img` to `width` x `height` with `filter`.
pub fn resize_with(img: &RgbImage, width: u32, height: u32, filter: Interpolation) -> RgbImage {
    if img.width() == width && img.height() == height {
        return img.clone();
    }
    let src = Image::from_vec_u8(img.width(), img.height(), img.as_raw().clone(), PixelType::U8x3).expect("RGB8 buffer matches its size");
    let mut dst = Image::new(width.max(1), height.max(1), PixelType::U8x3);
    let kernel = match filter {
        Interpolation::Bilinear => FilterType::Bilinear,
        Interpolation::Bicubic => FilterType::CatmullRom,
    };
    let options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(kernel));
    Resizer::new().resize(&src, &mut dst, &options).expect("same pixel type");
    RgbImage::from_raw(width.max(1), height.max(1), dst.into_vec()).expect("buffer of the requested size")
}

/// The pre-resize ratio and size: `r = min(H / h, W / w)`, sides truncated (`int(w * r)`).
pub fn fit(width: u32, height: u32, target_h: u32, target_w: u32) -> (f32, u32, u32) {
    let r = (target_h as f64 / height as f64).min(target_w as f64 / width as f64);
    (r as f32, ((width as f64 * r) as u32).max(1), ((height as f64 * r) as u32).max(1))
}

/// Decodes and pre-resizes: returns the image and the ratio applied to it.
pub fn load_resized(path: &Path, target_h: u32, target_w: u32) -> Result<(RgbImage, f32), String> {
    let img = decode(path)?;
    let (r, w, h) = fit(img.width(), img.height(), target_h, target_w);
    Ok((resize(&img, w, h), r))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every format of [`EXTENSIONS`] decodes to the pixels it was written with (lossless
    /// encodings; GIF's palette holds the image's few colours exactly).
    #[test]
    fn every_scanned_format_decodes() {
        let dir = tempfile::tempdir().unwrap();
        let img = RgbImage::from_fn(13, 7, |x, y| image::Rgb([[0u8, 255, 40][(x as usize + y as usize) % 3], (x * 19) as u8 % 2 * 200, 90]));
        for ext in EXTENSIONS {
            let path = dir.path().join(format!("a.{}", ext.to_uppercase()));
            let written = match *ext {
                // JPEG is lossy: only its size is checked.
                "jpg" | "jpeg" => image::DynamicImage::ImageRgb8(img.clone()).save_with_format(&path, image::ImageFormat::Jpeg),
                "pgm" => {
                    image::DynamicImage::ImageLuma8(image::DynamicImage::ImageRgb8(img.clone()).into_luma8()).save_with_format(&path, image::ImageFormat::Pnm)
                }
                _ => img.save_with_format(&path, image::ImageFormat::from_extension(ext).unwrap()),
            };
            written.unwrap_or_else(|e| panic!("writing .{ext}: {e}"));
            assert!(is_image(&path), ".{ext} (any case) is scanned");
            let got = decode(&path).unwrap_or_else(|e| panic!("decoding .{ext}: {e}"));
            assert_eq!(dimensions(&path).unwrap(), (13, 7), ".{ext}");
            match *ext {
                "jpg" | "jpeg" => assert_eq!(got.dimensions(), (13, 7)),
                "pgm" => assert_eq!(got, image::DynamicImage::ImageLuma8(image::DynamicImage::ImageRgb8(img.clone()).into_luma8()).into_rgb8(), ".{ext}"),
                _ => assert_eq!(got, img, ".{ext}: the pixels written"),
            }
        }
        assert!(!is_image(std::path::Path::new("a.pfm")) && !is_image(std::path::Path::new("labels.txt")));
    }
}
