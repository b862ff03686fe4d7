//! A dataset split: the images of its folders or `.txt` lists, their labels, and a cache of
//! pre-resized images. Problems with single files never stop a run: bad label rows and
//! unreadable images are skipped, each with a warning, and counted.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use image::RgbImage;
use rayon::prelude::*;

use super::augment::Boxes;
use super::cache::{CacheMode, ImageCache, Source};
use super::image as img;
use super::labels::{self, Label, RowWarning};

/// One scanned image: its item and label warnings, or the file and why it was skipped.
type Scanned = Result<(Item, Vec<RowWarning>), (PathBuf, String)>;

#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error("the {split} split has no images (looked in {})", sources.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    Empty { split: String, sources: Vec<PathBuf> },
    #[error("{split} split: `{}` does not exist", path.display())]
    Missing { split: String, path: PathBuf },
    #[error("cannot read `{}`: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

/// One image of the split.
#[derive(Debug, Clone)]
pub struct Item {
    pub image: PathBuf,
    pub labels: Vec<Label>,
    /// Original size (width, height) from the file header.
    pub size: (u32, u32),
}

/// What went wrong while scanning, for the log.
#[derive(Debug, Default, Clone)]
pub struct ScanReport {
    pub row_warnings: Vec<RowWarning>,
    /// Images that could not be read, with the reason.
    pub bad_images: Vec<(PathBuf, String)>,
}

pub struct Dataset {
    pub split: String,
    pub items: Vec<Item>,
    pub nc: usize,
    /// Pre-resize target (height, width): the longer side fitted to it; `None`: the image's own
    /// size.
    pub target: Option<(u32, u32)>,
    cache: ImageCache,
    /// Images that failed to decode after the scan (replaced by another image at load time).
    pub failed_decodes: AtomicUsize,
    pub report: ScanReport,
}

impl Dataset {
    /// Scans `sources` (folders and/or `.txt` lists) of one split of a YOLO dataset: each
    /// image's boxes from the `.txt` beside it. `target`: the (H, W) its images are pre-resized
    /// to (longer side fitted), or `None` to keep them as decoded (a stretch resizes once).
    pub fn open(split: &str, sources: &[PathBuf], nc: usize, target: impl Into<Option<(u32, u32)>>, cache: CacheMode) -> Result<Arc<Self>, DatasetError> {
        let mut files = vec![];
        for source in sources {
            list_images(split, source, &mut files)?;
        }
        files.sort();
        files.dedup();
        let files = files.into_iter().map(|f| (f, None)).collect();
        Self::scan(split, sources, files, nc, target.into(), cache)
    }

    /// Scans one split of an ImageFolder dataset: every image under `source/CLASS/` (its
    /// sub-folders included, as torchvision's `ImageFolder` walks them) labelled with
    /// `CLASS`'s index in `names` (a box over the whole image), kept at its own size (the
    /// classification crops are cut from the original, as torchvision's transforms do). A
    /// sub-folder that is not one of `names` is skipped with a warning.
    pub fn open_folder(split: &str, sources: &[PathBuf], names: &[String], cache: CacheMode) -> Result<Arc<Self>, DatasetError> {
        let mut files = vec![];
        for source in sources {
            if !source.is_dir() {
                return Err(DatasetError::Missing { split: split.into(), path: source.to_path_buf() });
            }
            let mut folders: Vec<PathBuf> = std::fs::read_dir(source)
                .map_err(|e| DatasetError::Io { path: source.to_path_buf(), source: e })?
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect();
            folders.sort();
            for folder in folders {
                let name = folder.file_name().unwrap_or_default().to_string_lossy();
                let Some(cls) = names.iter().position(|n| *n == name) else {
                    if !name.starts_with('.') {
                        tracing::warn!("{}: skipped: `{name}` is not one of the train split's classes", folder.display());
                    }
                    continue;
                };
                let mut images = vec![];
                walk_images(&folder, &mut images).map_err(|e| DatasetError::Io { path: folder.clone(), source: e })?;
                images.sort();
                files.extend(images.into_iter().map(|f| (f, Some(cls as u32))));
            }
        }
        Self::scan(split, sources, files, names.len(), None, cache)
    }

    /// The items of `files` (with their class when the folder gives it, else their label
    /// file's boxes), unreadable ones skipped and reported.
    fn scan(
        split: &str,
        sources: &[PathBuf],
        files: Vec<(PathBuf, Option<u32>)>,
        nc: usize,
        target: Option<(u32, u32)>,
        cache: CacheMode,
    ) -> Result<Arc<Self>, DatasetError> {
        let mut report = ScanReport::default();
        let scanned: Vec<Scanned> = files
            .par_iter()
            .map(|(f, class)| {
                let size = img::dimensions(f).map_err(|e| (f.clone(), e))?;
                let (labels, warnings) = match class {
                    Some(cls) => (vec![Label { cls: *cls, x1: 0.0, y1: 0.0, x2: 1.0, y2: 1.0 }], vec![]),
                    None => labels::read(&labels::label_path(f), nc),
                };
                Ok((Item { image: f.clone(), labels, size }, warnings))
            })
            .collect();
        let mut items = vec![];
        // Results come back in file order, so the warnings are logged in a stable order.
        for r in scanned {
            match r {
                Ok((item, warnings)) => {
                    for w in &warnings {
                        tracing::warn!("{w}");
                    }
                    report.row_warnings.extend(warnings);
                    items.push(item);
                }
                Err((path, reason)) => {
                    tracing::warn!("{}: skipped unreadable image: {reason}", path.display());
                    report.bad_images.push((path, reason));
                }
            }
        }
        if items.is_empty() {
            return Err(DatasetError::Empty { split: split.into(), sources: sources.to_vec() });
        }
        let cache = ImageCache::new(cache, items.len(), target);
        let dataset = Arc::new(Self { split: split.into(), items, nc, target, cache, failed_decodes: AtomicUsize::new(0), report });
        dataset.cache.warm(&*dataset);
        Ok(dataset)
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn num_boxes(&self) -> usize {
        self.items.iter().map(|i| i.labels.len()).sum()
    }

    /// The pre-resized image and its boxes in its pixels. An image that fails to decode is
    /// reported once and replaced by the next readable one.
    pub fn load(&self, index: usize) -> (Arc<RgbImage>, Boxes) {
        for k in 0..self.len() {
            let i = (index + k) % self.len();
            match self.cache.get(self, i) {
                Ok(image) => return (image.clone(), self.boxes(i, image.width(), image.height())),
                Err(_) => continue,
            }
        }
        panic!("no image of the {} split can be decoded", self.split)
    }

    /// Labels of image `i` in pixels of a `width` x `height` rendering of it.
    pub fn boxes(&self, i: usize, width: u32, height: u32) -> Boxes {
        let (w, h) = (width as f64, height as f64);
        Boxes {
            xyxy: self.items[i].labels.iter().map(|l| [(l.x1 * w) as f32, (l.y1 * h) as f32, (l.x2 * w) as f32, (l.y2 * h) as f32]).collect(),
            cls: self.items[i].labels.iter().map(|l| l.cls).collect(),
        }
    }

    pub fn has_labels(&self, i: usize) -> bool {
        !self.items[i].labels.is_empty()
    }
}

/// The images under `dir` and its sub-folders (hidden ones left out), following links.
fn walk_images(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')) {
            continue;
        }
        if path.is_dir() {
            walk_images(&path, out)?;
        } else if path.is_file() && img::is_image(&path) {
            out.push(path);
        }
    }
    Ok(())
}

fn list_images(split: &str, source: &Path, out: &mut Vec<PathBuf>) -> Result<(), DatasetError> {
    if source.is_dir() {
        let entries = std::fs::read_dir(source).map_err(|e| DatasetError::Io { path: source.to_path_buf(), source: e })?;
        for e in entries.flatten() {
            let p = e.path();
            if p.is_file() && img::is_image(&p) {
                out.push(p);
            }
        }
        Ok(())
    } else if source.extension().is_some_and(|e| e == "txt") && source.is_file() {
        let text = std::fs::read_to_string(source).map_err(|e| DatasetError::Io { path: source.to_path_buf(), source: e })?;
        let base = source.parent().unwrap_or(Path::new("."));
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let p = Path::new(line.strip_prefix("./").unwrap_or(line));
            out.push(if p.is_absolute() { p.to_path_buf() } else { base.join(p) });
        }
        Ok(())
    } else if img::is_image(source) && source.is_file() {
        out.push(source.to_path_buf());
        Ok(())
    } else {
        Err(DatasetError::Missing { split: split.into(), path: source.to_path_buf() })
    }
}

impl Source for Dataset {
    fn split(&self) -> &str {
        &self.split
    }
    fn images(&self) -> usize {
        self.len()
    }
    fn image_path(&self, i: usize) -> &Path {
        &self.items[i].image
    }
    /// Decodes and pre-resizes image `i`; a failure is counted and logged here, once per decode.
    fn decode(&self, i: usize) -> Result<RgbImage, String> {
        let path = &self.items[i].image;
        let decoded = match self.target {
            Some((h, w)) => img::load_resized(path, h, w).map(|(im, _)| im),
            None => img::decode(path),
        };
        decoded.inspect_err(|e| {
            self.failed_decodes.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("{}: skipped unreadable image: {e}", path.display());
        })
    }
}
