//! Pre-resized images kept between epochs: in RAM, or as sidecar files beside the images
//! (`<image>.r{H}x{W}.rgb`, reused while newer than the image).

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use image::RgbImage;
use rayon::prelude::*;

/// What the cache keeps images of: a split's images, by index (the dataset).
pub trait Source: Sync {
    /// The split's name, for the log.
    fn split(&self) -> &str;
    /// How many images it has.
    fn images(&self) -> usize;
    /// Image `i`'s file (the disk cache's sidecar sits beside it).
    fn image_path(&self, i: usize) -> &Path;
    /// Image `i` decoded and pre-resized.
    fn decode(&self, i: usize) -> Result<RgbImage, String>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheMode {
    #[default]
    None,
    Ram,
    Disk,
}

pub enum ImageCache {
    None,
    Ram(Vec<OnceLock<Result<Arc<RgbImage>, String>>>),
    Disk { target: Option<(u32, u32)> },
}

impl ImageCache {
    pub fn new(mode: CacheMode, len: usize, target: Option<(u32, u32)>) -> Self {
        match mode {
            CacheMode::None => Self::None,
            CacheMode::Ram => Self::Ram((0..len).map(|_| OnceLock::new()).collect()),
            CacheMode::Disk => Self::Disk { target },
        }
    }

    /// Fills a RAM cache (in parallel) or writes missing sidecar files.
    pub fn warm(&self, ds: &dyn Source) {
        let start = std::time::Instant::now();
        match self {
            Self::None => return,
            Self::Ram(_) | Self::Disk { .. } => {
                (0..ds.images()).into_par_iter().for_each(|i| {
                    let _ = self.get(ds, i);
                });
            }
        }
        tracing::info!("{} split: {} images cached in {:.1}s", ds.split(), ds.images(), start.elapsed().as_secs_f64());
    }

    pub fn get(&self, ds: &dyn Source, i: usize) -> Result<Arc<RgbImage>, String> {
        match self {
            Self::None => ds.decode(i).map(Arc::new),
            Self::Ram(slots) => slots[i].get_or_init(|| ds.decode(i).map(Arc::new)).clone(),
            Self::Disk { target } => {
                let sidecar = sidecar_path(ds.image_path(i), *target);
                if let Some(img) = read_sidecar(&sidecar, ds.image_path(i)) {
                    return Ok(Arc::new(img));
                }
                let img = ds.decode(i)?;
                if let Err(e) = write_sidecar(&sidecar, &img) {
                    tracing::warn!("{}: cannot write the disk cache: {e}", sidecar.display());
                }
                Ok(Arc::new(img))
            }
        }
    }
}

/// `IMAGE.r{H}x{W}.rgb` for a pre-resized image, `IMAGE.rgb` for one at its own size.
fn sidecar_path(image: &Path, target: Option<(u32, u32)>) -> PathBuf {
    let mut name = image.file_name().unwrap_or_default().to_os_string();
    name.push(target.map(|(h, w)| format!(".r{h}x{w}.rgb")).unwrap_or_else(|| ".rgb".into()));
    image.with_file_name(name)
}

/// `u32 width, u32 height` (little endian) then RGB8 pixels.
fn read_sidecar(sidecar: &Path, image: &Path) -> Option<RgbImage> {
    let fresh = sidecar.metadata().ok()?.modified().ok()? >= image.metadata().ok()?.modified().ok()?;
    if !fresh {
        return None;
    }
    let bytes = std::fs::read(sidecar).ok()?;
    let w = u32::from_le_bytes(bytes.get(0..4)?.try_into().ok()?);
    let h = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?);
    RgbImage::from_raw(w, h, bytes.get(8..)?.to_vec())
}

fn write_sidecar(sidecar: &Path, img: &RgbImage) -> std::io::Result<()> {
    let mut bytes = Vec::with_capacity(8 + img.as_raw().len());
    bytes.extend(img.width().to_le_bytes());
    bytes.extend(img.height().to_le_bytes());
    bytes.extend(img.as_raw());
    let tmp = sidecar.with_extension("rgb.tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(tmp, sidecar)
}
