//! Batches assembled on a pool of worker threads ahead of the training step.
//!
//! Each epoch is a shuffled permutation (seeded by `seed` and the epoch); every sample draws
//! its augmentation from its own RNG seeded by `(seed, epoch, position)`, so a given seed gives
//! the same batches whatever the number of workers. A producer thread fills a bounded queue of
//! ready batches; images travel as u8 (B, 3, H, W), a quarter of the f32 bytes, and are scaled
//! to [0, 1] on the device.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, sync_channel};

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rayon::prelude::*;

use super::classify::{self, ClassifyAugment};
use super::dataset::Dataset;
use super::sample::{self, Augment, Sample};

#[derive(Debug, Clone)]
pub struct LoaderConfig {
    /// Images per batch (per rank).
    pub batch: usize,
    pub height: u32,
    pub width: u32,
    pub workers: usize,
    pub seed: u64,
    /// Labels kept per image (the rest dropped and counted); padding rows have class -1.
    pub max_labels: usize,
    /// How many target rows a batch holds.
    pub label_rows: LabelRows,
    pub shuffle: bool,
    /// Drop the last partial batch (when the split has at least one full batch).
    pub drop_last: bool,
    /// Batches prepared ahead.
    pub prefetch: usize,
    /// What makes a sample of an image.
    pub transform: Transform,
    /// This rank's shard: `(rank, world_size)`.
    pub shard: (usize, usize),
}

/// How many target rows a batch holds (`data.label_rows`, resolved by the run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelRows {
    /// `max_labels` rows in every batch: one shape for every step.
    Fixed,
    /// The batch's largest label count rounded up to a power of two (at least 8), at most
    /// `max_labels`. LibreYOLO pads each batch to its largest count; a loss that works on
    /// (batch, rows, anchors), as the TAL assigner and SimOTA do, then does that much less
    /// (YOLOv9's at 64 rows: ~0.35x of its time at 300 on the CPU), and the rounding keeps the
    /// shapes few. Padding rows take no anchor, so the loss is the same to the bit.
    Batch,
    /// The most rows a batch of this loader has needed so far (each batch's need as `Batch`
    /// rounds it, but at least [`GROWING_FLOOR`]): the count only grows, so a captured step
    /// settles on one graph within the first batches instead of one per count drawn (YOLOv9-t
    /// on COCO128 at b16 drew 16, 32 and 64 rows, three graphs, 15 GB of GPU memory against
    /// 5 GB).
    Growing,
}

/// The fewest rows a [`LabelRows::Growing`] batch holds: below it a graph of its own would save
/// little of the loss's work.
pub const GROWING_FLOOR: usize = 64;

impl LabelRows {
    /// The rows a batch whose images hold at most `largest` labels needs.
    pub fn rows(self, largest: usize, max_labels: usize) -> usize {
        match self {
            LabelRows::Fixed => max_labels,
            LabelRows::Batch => largest.next_power_of_two().max(8).min(max_labels),
            LabelRows::Growing => largest.next_power_of_two().max(GROWING_FLOOR).min(max_labels),
        }
    }
}

/// The most rows a loader's [`LabelRows::Growing`] batches have held, shared by the loaders that
/// feed one step (see [`Loader::share_rows`]).
#[derive(Debug, Clone, Default)]
struct MostRows(Arc<AtomicUsize>);

impl MostRows {
    /// The rows of the next batch under `mode`, whose images hold at most `largest` labels.
    /// (Padding rows change no loss, so a count raised by a batch nobody trains on, as an epoch
    /// stopped early leaves behind, changes no result.)
    fn next(&self, mode: LabelRows, largest: usize, max_labels: usize) -> usize {
        let need = mode.rows(largest, max_labels);
        match mode {
            LabelRows::Growing => need.max(self.0.fetch_max(need, Ordering::Relaxed)),
            LabelRows::Fixed | LabelRows::Batch => need,
        }
    }
}

/// How the loader makes a sample of an image: by the dataset's task and split.
#[derive(Debug, Clone, Copy)]
pub enum Transform {
    /// Detection training: [`sample::train_sample`].
    Detect(Augment),
    /// Detection validation: the resize only (letterbox or stretch).
    Resize(super::augment::resize::Resize),
    /// Classification training: random resized crop and flips.
    Classify(ClassifyAugment),
    /// Classification evaluation: resize to `size / crop_pct`, centre crop.
    CentreCrop { crop_pct: f64, interpolation: super::image::Interpolation },
}

impl Transform {
    /// Whether samples are drawn at random (so the split is shuffled and drawn in full batches).
    pub fn is_training(&self) -> bool {
        matches!(self, Transform::Detect(_) | Transform::Classify(_))
    }
}

/// One batch, ready for a single host-to-device copy.
#[derive(Debug, Clone)]
pub struct Batch {
    /// `(B, 3, H, W)` RGB, u8.
    pub images: Vec<u8>,
    /// `(B, rows, 5)` `[cls, x1, y1, x2, y2]` normalised; padding rows `[-1, 0, 0, 0, 0]`.
    pub targets: Vec<f32>,
    pub size: usize,
    pub height: u32,
    pub width: u32,
    /// Target rows per image (as [`LabelRows`] says).
    pub rows: usize,
    /// Dataset index of each image.
    pub indices: Vec<usize>,
    /// Labels dropped because an image had more than `max_labels`.
    pub truncated_labels: usize,
}

/// A batch's labels kept on the host beside their device copy ([`Batch::targets`]'s rows and
/// its image count): what a stage that works on the labels on the host reads (RT-DETR's
/// denoising groups, its Hungarian matching) instead of reading the device copy back, a sync.
#[derive(Debug, Clone)]
pub struct HostLabels {
    pub rows: Vec<f32>,
    pub images: usize,
}

impl crate::stage::HostValue for HostLabels {
    const TY: &'static str = "host labels";
}

pub struct Loader {
    dataset: Arc<Dataset>,
    cfg: LoaderConfig,
    most_rows: MostRows,
    pool: Arc<rayon::ThreadPool>,
}

impl Loader {
    pub fn new(dataset: Arc<Dataset>, cfg: LoaderConfig) -> Self {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(cfg.workers.max(1)).thread_name(|i| format!("loader-{i}")).build().expect("a thread pool");
        Self { dataset, cfg, most_rows: MostRows::default(), pool: Arc::new(pool) }
    }

    pub fn dataset(&self) -> &Arc<Dataset> {
        &self.dataset
    }

    pub fn config(&self) -> &LoaderConfig {
        &self.cfg
    }

    /// Dataset indices of this rank for `epoch`, in order: PyTorch's DistributedSampler (one
    /// permutation per epoch shared by all ranks, padded by wrapping, rank `r` takes every
    /// `world`-th index from `r`).
    pub fn order(&self, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.dataset.len()).collect();
        if self.cfg.shuffle {
            order.shuffle(&mut StdRng::seed_from_u64(mix(self.cfg.seed, epoch, u64::MAX)));
        }
        let (rank, world) = self.cfg.shard;
        if world > 1 {
            // Every rank takes the same number of samples (padding by wrapping, like PyTorch's
            // DistributedSampler), then its stride.
            let per_rank = order.len().div_ceil(world);
            let total = per_rank * world;
            let padded: Vec<usize> = (0..total).map(|i| order[i % order.len()]).collect();
            order = padded.into_iter().skip(rank).step_by(world).collect();
        }
        order
    }

    /// How many target rows its batches hold from now on (the run decides once it knows whether
    /// the step is captured).
    pub fn set_label_rows(&mut self, rows: LabelRows) {
        self.cfg.label_rows = rows;
    }

    /// Grows its [`LabelRows::Growing`] count with `other`'s: loaders that feed one captured step
    /// (mosaic, then closed mosaic) keep the rows the step's graph was recorded at.
    pub fn share_rows(&mut self, other: &Loader) {
        self.most_rows = other.most_rows.clone();
    }

    pub fn batches_per_epoch(&self) -> usize {
        let n = self.order(0).len();
        if self.cfg.drop_last && n >= self.cfg.batch { n / self.cfg.batch } else { n.div_ceil(self.cfg.batch) }
    }

    /// The batches of `epoch`, produced in the background.
    pub fn epoch(&self, epoch: u64) -> Receiver<Batch> {
        let (tx, rx) = sync_channel(self.cfg.prefetch.max(1));
        let order = self.order(epoch);
        let batches = self.batches_per_epoch();
        let group = self.group();
        let (dataset, cfg, most_rows, pool) = (self.dataset.clone(), self.cfg.clone(), self.most_rows.clone(), self.pool.clone());
        std::thread::Builder::new()
            .name("loader".into())
            .spawn(move || {
                for first in (0..batches).step_by(group) {
                    let spans: Vec<Vec<usize>> =
                        (first..(first + group).min(batches)).map(|b| (b * cfg.batch..((b + 1) * cfg.batch).min(order.len())).collect()).collect();
                    for batch in pool.install(|| make_batches(&dataset, &cfg, &most_rows, epoch, &spans, &order)) {
                        if tx.send(batch).is_err() {
                            return; // the consumer stopped
                        }
                    }
                }
            })
            .expect("spawn the loader thread");
        rx
    }

    /// Batches made together, their samples in one parallel pass: enough for two samples per
    /// worker. One batch at a time left many workers idle behind each batch's slowest mosaic
    /// (16 workers made 950 images/s on the H200 machine where one made 139).
    fn group(&self) -> usize {
        (2 * self.cfg.workers.max(1)).div_ceil(self.cfg.batch.max(1)).clamp(1, 8)
    }
}

/// The batches whose sample positions are `spans`, in order. Each sample is seeded by its
/// position, so the batches do not depend on how they are grouped.
fn make_batches(ds: &Dataset, cfg: &LoaderConfig, most_rows: &MostRows, epoch: u64, spans: &[Vec<usize>], order: &[usize]) -> Vec<Batch> {
    let (h, w) = (cfg.height, cfg.width);
    let positions: Vec<usize> = spans.iter().flatten().copied().collect();
    let mut samples: Vec<Sample> = positions
        .par_iter()
        .map(|&pos| {
            let index = order[pos];
            // Seeded by the sample's place in the whole epoch (all ranks), so every sample of a
            // multi-GPU epoch draws its own augmentation, as on one GPU.
            let (rank, world) = cfg.shard;
            let global = (pos * world.max(1) + rank) as u64;
            let rng = || StdRng::seed_from_u64(mix(cfg.seed, epoch, global));
            match &cfg.transform {
                Transform::Detect(aug) => sample::train_sample(ds, index, aug, (h, w), &mut rng()),
                Transform::Resize(resize) => sample::val_sample(ds, index, (h, w), *resize).0,
                Transform::Classify(aug) => classify::train_sample(ds, index, aug, (h, w), &mut rng()),
                Transform::CentreCrop { crop_pct, interpolation } => classify::val_sample(ds, index, (h, w), *crop_pct, *interpolation),
            }
        })
        .collect();
    let mut out = Vec::with_capacity(spans.len());
    for span in spans {
        let rest = samples.split_off(span.len());
        let per_image = most_rows.next(cfg.label_rows, largest_labels(&samples), cfg.max_labels);
        out.push(assemble(&samples, h, w, cfg.max_labels, per_image));
        samples = rest;
    }
    out
}

/// The most labels an image of `samples` holds.
pub fn largest_labels(samples: &[Sample]) -> usize {
    samples.iter().map(|s| s.targets.len()).max().unwrap_or(0)
}

/// HWC samples into one CHW batch plus targets padded to `per_image` rows an image (at least
/// the most labels an image holds, as [`LabelRows::rows`] gives), each image keeping at most
/// `max_labels` labels.
pub fn assemble(samples: &[Sample], height: u32, width: u32, max_labels: usize, per_image: usize) -> Batch {
    debug_assert!(per_image >= largest_labels(samples).min(max_labels), "fewer rows than labels kept");
    let plane = (height * width) as usize;
    let mut images = vec![0u8; samples.len() * 3 * plane];
    images.par_chunks_mut(3 * plane).zip(samples.par_iter()).for_each(|(dst, s)| {
        for (p, px) in s.image.as_raw().chunks_exact(3).enumerate() {
            dst[p] = px[0];
            dst[plane + p] = px[1];
            dst[2 * plane + p] = px[2];
        }
    });
    let mut targets = vec![0f32; samples.len() * per_image * 5];
    let mut truncated = 0;
    for (i, s) in samples.iter().enumerate() {
        let rows = &mut targets[i * per_image * 5..(i + 1) * per_image * 5];
        for (m, row) in rows.chunks_exact_mut(5).enumerate() {
            match s.targets.get(m) {
                Some(t) => row.copy_from_slice(t),
                None => row[0] = -1.0,
            }
        }
        truncated += s.targets.len().saturating_sub(max_labels);
    }
    Batch {
        images,
        targets,
        size: samples.len(),
        height,
        width,
        rows: per_image,
        indices: samples.iter().map(|s| s.index).collect(),
        truncated_labels: truncated,
    }
}

/// A well-mixed 64-bit seed from three values (SplitMix64 finaliser).
pub fn mix(seed: u64, epoch: u64, position: u64) -> u64 {
    let mut z = seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ position.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
