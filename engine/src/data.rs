//! The manifest's dataset: opening its splits and building loaders with the manifest's
//! augmentation, sizes and worker count.

use std::sync::Arc;

use libreyolo_stages::data::cache::CacheMode as StageCache;
use libreyolo_stages::data::{Augment, ClassifyAugment, Dataset, DatasetConfig, Layout, Loader, LoaderConfig, Transform};

use crate::manifest::{CacheMode, Diagnostic, KeyPath, LoadedManifest, Part};

/// Which split to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    Train,
    Val,
}

/// The dataset YAML of the manifest, with errors pointing at `data.dataset`; without one, an
/// error saying how to give it.
pub fn config(loaded: &LoadedManifest) -> Result<DatasetConfig, Diagnostic> {
    let Some(dataset) = &loaded.manifest.data.dataset else {
        return Err(loaded
            .source
            .error_at(&KeyPath::dotted("data"), Part::Key, "no dataset: this manifest leaves `data.dataset` to the command line")
            .with_help(Some(
                "give a LibreYOLO / Ultralytics dataset YAML: `data=path/to/data.yaml` (e.g. `data=../shared/data/coco128/coco128.yaml` beside this checkout)"
                    .into(),
            )));
    };
    DatasetConfig::load(dataset).map_err(|e| loaded.source.error_at(&KeyPath::dotted("data.dataset"), Part::Value, e.to_string()))
}

/// The number of classes: `model.nc` when set, which must then be the dataset's.
pub fn classes(loaded: &LoadedManifest, cfg: &DatasetConfig) -> anyhow::Result<usize> {
    let nc = loaded.manifest.model.nc.map(|n| n as usize).unwrap_or(cfg.nc());
    if nc != cfg.nc() {
        anyhow::bail!("model.nc = {nc} but the dataset `{}` has {} classes", cfg.yaml.display(), cfg.nc());
    }
    Ok(nc)
}

/// Opens a split at the manifest's image size and cache mode.
pub fn open(loaded: &LoadedManifest, cfg: &DatasetConfig, split: Split) -> Result<Arc<Dataset>, Diagnostic> {
    let m = &loaded.manifest;
    let (name, sources) = match split {
        Split::Train => ("train", &cfg.train),
        Split::Val => ("val", if cfg.val.is_empty() { &cfg.train } else { &cfg.val }),
    };
    let cache = match m.data.cache {
        CacheMode::None => StageCache::None,
        CacheMode::Ram => StageCache::Ram,
        CacheMode::Disk => StageCache::Disk,
    };
    // A stretch reads the images as decoded: the one resize is its own.
    let target = m.data.resize.pre_resizes().then(|| (m.run.imgsz.height(), m.run.imgsz.width()));
    let opened = match cfg.layout {
        Layout::Yolo => Dataset::open(name, sources, cfg.nc(), target, cache),
        Layout::Folder => Dataset::open_folder(name, sources, &cfg.names, cache),
    };
    opened.map_err(|e| loaded.source.error_at(&KeyPath::dotted("data.dataset"), Part::Value, e.to_string()))
}

/// An error at `data.dataset` unless the dataset's layout is what `task` trains on: a
/// classifier reads an ImageFolder directory, a detector a YOLO dataset YAML.
pub fn check_layout(loaded: &LoadedManifest, cfg: &DatasetConfig, task: crate::train::validate::Task) -> Result<(), Diagnostic> {
    use crate::train::validate::Task;
    let why = match (task, cfg.layout) {
        (Task::Classify, Layout::Yolo) => format!(
            "this network classifies images, but the dataset `{}` is a detection dataset YAML: give an ImageFolder directory (DIR/train/CLASS/*.jpg, DIR/val/CLASS/*.jpg), e.g. one made by bench/make_crops.py",
            cfg.yaml.display()
        ),
        (Task::Detect, Layout::Folder) => format!(
            "this network detects objects, but `{}` is an ImageFolder directory (a class per folder, no boxes): give a LibreYOLO / Ultralytics dataset YAML",
            cfg.yaml.display()
        ),
        _ => return Ok(()),
    };
    Err(loaded.source.error_at(&KeyPath::dotted("data.dataset"), Part::Value, why))
}

/// How a run's loaders make samples: by the dataset's layout (boxes: detection's pipeline;
/// class folders: classification's).
#[derive(Debug, Clone, Copy)]
pub struct Transforms {
    pub train: Transform,
    /// The last `no_aug_epochs` (detection: mosaic closed; classification has no strong
    /// augmentation to close).
    pub closed: Transform,
    pub val: Transform,
}

pub fn transforms(loaded: &LoadedManifest, layout: Layout) -> Transforms {
    let a = &loaded.manifest.augment;
    match layout {
        Layout::Yolo => {
            let aug = augment(loaded);
            Transforms { train: Transform::Detect(aug), closed: Transform::Detect(aug.without_mosaic()), val: Transform::Resize(aug.resize) }
        }
        Layout::Folder => {
            let aug = ClassifyAugment { scale: a.crop_scale, flip_prob: a.flip_prob, flipud: a.flipud, interpolation: a.interpolation };
            let val = Transform::CentreCrop { crop_pct: a.crop_pct, interpolation: a.interpolation };
            Transforms { train: Transform::Classify(aug), closed: Transform::Classify(aug), val }
        }
    }
}

/// The manifest's augmentation settings.
pub fn augment(loaded: &LoadedManifest) -> Augment {
    let a = &loaded.manifest.augment;
    Augment {
        mosaic_prob: a.mosaic_prob,
        mixup_prob: a.mixup_prob,
        pipeline: a.pipeline,
        mixup_scale: a.mixup_scale,
        degrees: a.degrees,
        translate: a.translate,
        scale: a.mosaic_scale,
        shear: a.shear,
        hsv_prob: a.hsv_prob,
        flip_prob: a.flip_prob,
        flipud: a.flipud,
        resize: loaded.manifest.data.resize,
    }
}

/// A loader over `dataset` at the manifest's settings making samples by `transform`, its
/// batches' target rows as `data.label_rows` says for a step that is not captured (a training
/// run whose step is captured sets them again: `Loader::set_label_rows`).
pub fn loader(loaded: &LoadedManifest, dataset: Arc<Dataset>, batch: usize, transform: Transform, shard: (usize, usize)) -> Loader {
    let m = &loaded.manifest;
    Loader::new(
        dataset,
        LoaderConfig {
            batch,
            height: m.run.imgsz.height(),
            width: m.run.imgsz.width(),
            workers: m.data.workers.max(1),
            seed: m.run.seed,
            max_labels: m.data.max_labels,
            label_rows: m.data.label_rows.resolve(false, 1),
            shuffle: transform.is_training(),
            drop_last: transform.is_training(),
            prefetch: 4,
            transform,
            shard,
        },
    )
}
