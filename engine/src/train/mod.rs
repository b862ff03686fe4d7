//! The training application: runs the manifest's step program over the dataset, epoch after
//! epoch, with validation on the EMA weights, checkpoints, logs, plots and resume.
//!
//! * [`setup`]: one replica's trainer — the model, the update state, the step's stages built
//!   from the DAG and its program with the capture manager;
//! * [`fit`]: the epoch loop, and [`end_of_epoch`] what follows each epoch (validation,
//!   checkpoints, records, early stopping);
//! * [`epoch`]: one epoch's steps and their logged losses, read one step late.

pub mod autobatch;
pub mod checkpoint;
pub mod end_of_epoch;
pub mod epoch;
pub mod fit;
pub mod plots;
pub mod precision;
pub mod progress;
pub mod replica;
pub mod run_dir;
pub mod setup;
pub mod validate;

use std::sync::atomic::{AtomicBool, Ordering};

use crate::dag::StepDag;
use crate::data::{self, Split};
use crate::device::ResolvedDevice;
use crate::manifest::LoadedManifest;
use precision::Precision;
use replica::Replica;
use run_dir::EpochRecord;

pub use setup::Trainer;

/// What a finished run reports.
#[derive(Debug, Clone)]
pub struct TrainSummary {
    pub run_dir: std::path::PathBuf,
    pub epochs_run: usize,
    pub last: Option<EpochRecord>,
    pub best_fitness: Option<f64>,
    /// The metric the fitness is (`mAP50-95`, `accuracy_top1`).
    pub fitness: &'static str,
    pub interrupted: bool,
    /// Stopped by `patience` before the last epoch.
    pub stopped_early: bool,
    /// What the training step captured and how often it replayed (LibreYOLO's `graph_info()`),
    /// when its region is captured.
    pub capture: Option<crate::capture::GraphInfo>,
}

/// Set by Ctrl-C: the run saves `last` after the current step and stops.
static STOP: AtomicBool = AtomicBool::new(false);

/// Python's `round` (half to even), as LibreYOLO's accumulation count uses.
fn round_half_even(x: f64) -> usize {
    let r = x.round();
    (if (x - x.trunc()).abs() == 0.5 && r % 2.0 != 0.0 { r - x.signum() } else { r }) as usize
}

/// The dataset of a run, opened once and shared by its replicas.
pub struct Datasets {
    pub cfg: libreyolo_stages::data::DatasetConfig,
    /// Classes: the dataset's (`model.nc`, when set, must agree).
    pub nc: usize,
    pub train: std::sync::Arc<libreyolo_stages::data::Dataset>,
    pub val: Option<std::sync::Arc<libreyolo_stages::data::Dataset>>,
}

/// Trains `loaded` on `resolved`: on its one device, or data-parallel on several (one thread
/// and replica per GPU, gradients averaged through NCCL; see [`replica`]).
pub fn train(loaded: &LoadedManifest, dag: &StepDag, resolved: &ResolvedDevice) -> anyhow::Result<TrainSummary> {
    let devices = resolved.devices();
    crate::compile::apply(loaded.manifest.capture.compile, resolved.backend, devices.len());
    let datasets = prepare(loaded)?;
    // AutoBatch probes one GPU before the replicas start, as LibreYOLO does before spawning.
    let batch = resolve_batch(loaded, dag, datasets.nc, resolved, devices.len(), false)?;
    let replicas = Replica::group(devices);
    replica::run(replicas, replica::FAILURE_GRACE, |r| fit::fit(loaded, dag, resolved, &datasets, batch, r))
}

/// Rank `rank` of a torchrun-style launch over `resolved`'s GPUs: this process trains on
/// `cuda:rank`, the others are processes too (the NCCL identifier is already agreed).
pub fn train_process(loaded: &LoadedManifest, dag: &StepDag, resolved: &ResolvedDevice, rank: usize) -> anyhow::Result<TrainSummary> {
    crate::compile::apply(loaded.manifest.capture.compile, resolved.backend, resolved.devices().len());
    let datasets = prepare(loaded)?;
    let batch = resolve_batch(loaded, dag, datasets.nc, resolved, resolved.devices().len(), true)?;
    fit::fit(loaded, dag, resolved, &datasets, batch, Replica::process(rank, resolved.devices()))
}

/// What every run needs before its replicas start: the kernel cache, Ctrl-C, the datasets.
fn prepare(loaded: &LoadedManifest) -> anyhow::Result<Datasets> {
    let m = &loaded.manifest;
    crate::kernel_cache::configure();
    let _ = ctrlc::set_handler(|| {
        if STOP.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
        eprintln!("\ninterrupt: finishing this step, saving weights/last, then stopping (Ctrl-C again to abort)");
    });
    // A dataset error is the manifest's (`data.dataset`): the caller shows it as one, exit 2.
    let cfg = data::config(loaded)?;
    let nc = data::classes(loaded, &cfg)?;
    let train = data::open(loaded, &cfg, Split::Train)?;
    let val = if m.val.enabled { Some(data::open(loaded, &cfg, Split::Val)?) } else { None };
    Ok(Datasets { cfg, nc, train, val })
}

/// LibreYOLO's (and Ultralytics') batch when AutoBatch has nothing to probe.
pub const DEFAULT_BATCH: usize = 16;

/// `run.batch`, with AutoBatch (`-1`) read as the default batch: for checks and tools that
/// need a batch before the device is known.
pub fn nominal_batch(batch: i64) -> usize {
    if batch > 0 { batch as usize } else { DEFAULT_BATCH }
}

/// Micro-batches per optimizer step: LibreYOLO's `round(nbs / batch)`, at least 1.
pub fn accumulation(nbs: Option<u32>, batch: usize) -> usize {
    nbs.map(|nbs| round_half_even(nbs as f64 / batch as f64).max(1)).unwrap_or(1)
}

/// The global batch to train at over `world` GPUs: `run.batch`, or for `-1` AutoBatch
/// ([`autobatch`]: one GPU probed, scaled by the GPUs within `nbs`); on the CPU LibreYOLO's
/// answer, 16, with a warning, and where the probe fails, the same with the reason.
/// `processes`: a torchrun-style launch, where every rank would probe on its own.
pub fn resolve_batch(loaded: &LoadedManifest, dag: &StepDag, nc: usize, resolved: &ResolvedDevice, world: usize, processes: bool) -> anyhow::Result<usize> {
    let m = &loaded.manifest;
    if m.run.batch > 0 {
        return Ok(m.run.batch as usize);
    }
    if resolved.backend == crate::device::Backend::Cpu {
        tracing::warn!("AutoBatch (batch=-1) needs a CUDA device; using the default batch={DEFAULT_BATCH}");
        return Ok(DEFAULT_BATCH);
    }
    if processes {
        anyhow::bail!(
            "AutoBatch (batch=-1) under a multi-process launch (RANK/WORLD_SIZE) is not supported yet: give the global batch, e.g. batch={}",
            DEFAULT_BATCH * world
        );
    }
    let device = resolved.devices()[0].clone();
    let ordinal = resolved.ids[0];
    let precision = Precision::new(m, resolved.backend, &device)?;
    let total = autobatch::total_gib(ordinal)?;
    let per_gpu = match autobatch::probe(loaded, dag, nc, &device, &precision, total)
        .and_then(|points| autobatch::fit(&points, total, autobatch::FRACTION).map_err(anyhow::Error::msg))
    {
        Ok((per_gpu, raw)) => {
            tracing::info!("AutoBatch: cuda:{ordinal} {total:.1} GiB, target {:.0}%: {per_gpu} images per GPU (fit {raw:.1})", autobatch::FRACTION * 100.0);
            per_gpu
        }
        Err(e) => {
            tracing::warn!("AutoBatch: probe failed ({e}); using the default batch={DEFAULT_BATCH}");
            DEFAULT_BATCH
        }
    };
    let batch = autobatch::global_batch(per_gpu, world, m.optim.nbs.map(|n| n as usize));
    if world > 1 {
        tracing::info!("AutoBatch: global batch {batch} over {world} GPUs");
    }
    Ok(batch)
}
