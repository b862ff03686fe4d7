//! One replica's training: the run directory and loaders, the trainer, resume, the profiler,
//! then the epoch loop (mosaic closing and the graphs it invalidates, each epoch, and what
//! follows it: [`super::end_of_epoch`]).

use std::time::Instant;

use libreyolo_stages::data::Loader;

use super::checkpoint::TrainState;
use super::end_of_epoch::{After, EndOfEpoch};
use super::epoch::EpochEnd;
use super::replica::{self, Replica};
use super::run_dir::RunDir;
use super::setup::{GrownRows, ProfileOut, Trainer};
use super::{Datasets, TrainSummary, validate};
use crate::capture::CaptureManager;
use crate::capture::forward::ForwardGraph;
use crate::dag::StepDag;
use crate::data;
use crate::device::ResolvedDevice;
use crate::manifest::{LabelRowsSetting, LoadedManifest};
use crate::profile::{self, Profiler};

/// The loaders of a replica: with mosaic, without (the last `no_aug_epochs`), validation (rank 0).
pub struct Loaders {
    pub mosaic: Loader,
    pub no_mosaic: Loader,
    pub val: Option<Loader>,
}

/// The loaders as for an eager step; [`Loaders::set_label_rows`] once the trainer knows.
fn loaders(loaded: &LoadedManifest, datasets: &Datasets, batch: usize, replica: &Replica) -> anyhow::Result<Loaders> {
    let rank_batch = crate::distributed::per_rank_batch(batch, replica.world()).map_err(anyhow::Error::msg)?;
    let t = data::transforms(loaded, datasets.cfg.layout);
    let train = datasets.train.clone();
    Ok(Loaders {
        mosaic: data::loader(loaded, train.clone(), rank_batch, t.train, replica.shard()),
        no_mosaic: data::loader(loaded, train, rank_batch, t.closed, replica.shard()),
        val: datasets.val.clone().filter(|_| replica.is_main()).map(|ds| data::loader(loaded, ds, batch, t.val, (0, 1))),
    })
}

impl Loaders {
    /// The batches' target rows (`data.label_rows`), which follow whether the step is captured
    /// and on how many GPUs. The two training loaders grow one count: closing the mosaic keeps
    /// the rows the step's graph holds.
    fn set_label_rows(&mut self, rows: libreyolo_stages::data::LabelRows) {
        self.mosaic.set_label_rows(rows);
        self.no_mosaic.set_label_rows(rows);
        self.no_mosaic.share_rows(&self.mosaic);
        if let Some(val) = self.val.as_mut() {
            val.set_label_rows(rows);
        }
    }
}

/// Rank 0 owns the run directory; the others only learn where it is (to resume from it).
fn run_dir(loaded: &LoadedManifest, replica: &Replica) -> anyhow::Result<(Option<RunDir>, std::path::PathBuf)> {
    let m = &loaded.manifest;
    let run = if replica.is_main() {
        let run = RunDir::create(&m.run.project, &m.run.name, m.run.exist_ok, m.run.resume)?;
        run.write_manifest(loaded)?;
        replica.publish_run_dir(&run.path);
        Some(run)
    } else {
        None
    };
    replica.barrier();
    // Another process's rank 0 cannot tell us its directory: resuming names it exactly.
    let path = replica.run_dir().map(|p| p.to_path_buf()).unwrap_or_else(|| m.run.project.join(&m.run.name));
    Ok((run, path))
}

/// The one-line description of the run printed and logged at its start.
fn header(t: &Trainer<'_>, resolved: &ResolvedDevice, images: usize, batch: usize, loader: &Loader) -> String {
    let m = &t.loaded.manifest;
    let world = t.replica.world();
    let accumulate = t.update.accumulate;
    format!(
        "training {}-{} ({} parameters) on {} for {} epochs: {images} images, batch {batch}{}{}, {} steps/epoch, {}",
        m.model.family,
        m.model.size,
        t.model.params.borrow().num_parameters(),
        resolved.describe(),
        m.run.epochs,
        if world > 1 {
            format!(" ({} per GPU, BatchNorm {})", batch / world, if m.run.sync_bn { "synced (SyncBatchNorm)" } else { "per GPU" })
        } else {
            String::new()
        },
        if accumulate > 1 { format!(" x {accumulate} accumulated") } else { String::new() },
        loader.batches_per_epoch(),
        t.precision.describe()
    )
}

/// The profiler of `profile=true` (one GPU: LibreYOLO's profiler measures one process).
fn start_profiler(t: &mut Trainer<'_>, resolved: &ResolvedDevice, batch: usize, run_path: &std::path::Path) {
    let m = &t.loaded.manifest;
    if !m.profile.enabled {
        return;
    }
    if t.replica.world() > 1 {
        if t.replica.is_main() {
            tracing::warn!("profile: the profiler is not available with {} GPUs; training without it", t.replica.world());
        }
        return;
    }
    let meta = profile::analysis::Meta {
        model: format!("{}-{}", m.model.family, m.model.size),
        device: resolved.describe(),
        batch,
        imgsz: m.run.imgsz.to_string(),
        precision: t.precision.describe(),
        workers: m.data.workers,
        capture: t.captures(),
        manifest: t.loaded.source.path.display().to_string(),
    };
    let observe = resolved.backend == crate::device::Backend::Cuda;
    t.probes.profiler = Some(Profiler::new(t.device.clone(), meta, m.profile.warmup as usize, m.profile.steps as usize, observe).trace_graph_kernels());
    t.probes.profile_out = Some(ProfileOut { dir: run_path.to_path_buf(), trace: m.profile.trace, then_stop: m.profile.then_stop });
    eprintln!("profiling: {} warm-up steps, then {} measured (half unsynced, half synced per phase)", m.profile.warmup, m.profile.steps.max(2));
}

/// One replica's training: all of it alone, its shard of every batch (and, on rank 0, every
/// side effect) in a data-parallel run.
pub fn fit(
    loaded: &LoadedManifest,
    dag: &StepDag,
    resolved: &ResolvedDevice,
    datasets: &Datasets,
    batch: usize,
    replica: Replica,
) -> anyhow::Result<TrainSummary> {
    let m = &loaded.manifest;
    let mut loaders = loaders(loaded, datasets, batch, &replica)?;
    let iters_per_epoch = loaders.mosaic.batches_per_epoch().div_ceil(super::accumulation(m.optim.nbs, batch)).max(1);
    let mut trainer = Trainer::new(loaded, dag, resolved, datasets.nc, batch, iters_per_epoch, replica.clone())?;
    let rows = m.data.label_rows.resolve(trainer.captures(), replica.world());
    let explicit = matches!(m.data.label_rows, LabelRowsSetting::Batch | LabelRowsSetting::Growing);
    if explicit && rows == libreyolo_stages::data::LabelRows::Fixed && replica.is_main() {
        tracing::warn!("data.label_rows = {:?}: a step captured on several GPUs needs one shape on every replica; using max_labels rows", m.data.label_rows);
    }
    loaders.set_label_rows(rows);
    trainer.grown_rows = (rows == libreyolo_stages::data::LabelRows::Growing).then(GrownRows::default);
    // Before the run directory exists: a wrong dataset leaves nothing behind.
    data::check_layout(loaded, &datasets.cfg, trainer.task())?;
    let (mut run, run_path) = run_dir(loaded, &replica)?;

    let mut state = TrainState {
        nc: datasets.nc,
        names: datasets.cfg.names.clone(),
        imgsz: [m.run.imgsz.height(), m.run.imgsz.width()],
        family: m.model.family.clone(),
        size: m.model.size.clone(),
        ..Default::default()
    };
    if m.run.resume {
        // Every replica reads the same checkpoint.
        state = trainer.resume(&run_path)?;
        if let Some(run) = run.as_mut() {
            run.log(&format!("resumed at epoch {} (iteration {})", state.next_epoch, state.iteration));
            eprintln!("resuming {} at epoch {}", run.path.display(), state.next_epoch + 1);
        }
    }
    let header = header(&trainer, resolved, datasets.train.len(), batch, &loaders.mosaic);
    if let Some(run) = run.as_mut() {
        eprintln!("{header}\nrun directory: {}", run.path.display());
        run.log(&header);
    }
    start_profiler(&mut trainer, resolved, batch, &run_path);

    let mut end = EndOfEpoch {
        nms: validate::nms_config(&m.val),
        // Validation's own graphs when the step is captured: its batch shape and the last partial one.
        val_graphs: trainer.captures().then(|| CaptureManager::<ForwardGraph<'static>>::new("validation forward", 1, 2)),
        last: None,
        interrupted: false,
        stopped_early: false,
    };
    let epochs = m.run.epochs as usize;
    let no_aug_start = epochs.saturating_sub(m.augment.no_aug_epochs as usize);
    let first_epoch = state.next_epoch;
    for epoch in first_epoch..epochs {
        if epoch == no_aug_start && epoch > first_epoch {
            mosaic_closed(&mut trainer, &mut end, epoch);
        }
        let loader = if epoch < no_aug_start { &loaders.mosaic } else { &loaders.no_mosaic };
        let started = Instant::now();
        let out = trainer.run_epoch(loader, epoch, epochs)?;
        if let Some(run) = run.as_ref() {
            let names: Vec<&str> = out.losses.iter().map(|(n, _)| n.as_str()).collect();
            run.record_steps(epoch, &names, &out.steps)?;
        }
        if trainer.replica.peer_failed() {
            return Err(replica::PeerFailed.into());
        }
        trainer.replica.check_weights_in_sync(&trainer.model.params.borrow(), epoch)?;
        if out.end == EpochEnd::ProfileOnly {
            if let Some(run) = run.as_mut() {
                run.log("Profile-only run (profile.then_stop=true): the partial epoch is neither validated nor checkpointed");
            }
            eprintln!("Profile-only run (profile.then_stop=true): stopping; the partial epoch is neither validated nor checkpointed");
            break;
        }
        let after = end.epoch_done(&trainer, run.as_mut(), loaders.val.as_ref(), &mut state, epoch, out, started.elapsed().as_secs_f64())?;
        if after == After::Stop {
            break;
        }
    }
    Ok(TrainSummary {
        run_dir: run_path,
        epochs_run: state.next_epoch - first_epoch,
        last: end.last,
        best_fitness: state.best_fitness,
        fitness: trainer.task().metric_names()[0],
        interrupted: end.interrupted,
        stopped_early: end.stopped_early,
        capture: trainer.exec.graphs.as_ref().map(|g| g.info()),
    })
}

/// The first epoch without mosaic: stages that compute something else then ask for new graphs.
fn mosaic_closed(trainer: &mut Trainer<'_>, end: &mut EndOfEpoch, epoch: usize) {
    let dag = trainer.dag;
    let stages = dag.recapturing_on("mosaic_close");
    if stages.is_empty() {
        return;
    }
    let reason = format!("mosaic closed at epoch {}; stage `{}` asked to re-capture", epoch + 1, stages.join("`, `"));
    if let Some(graphs) = trainer.exec.graphs.as_mut() {
        graphs.invalidate(&reason);
    }
    // Validation's graphs hold only the network's forward.
    let forward_changes = dag.stages.iter().any(|s| s.kind.autodiff == libreyolo_stages::stage::Autodiff::Forward && stages.contains(&s.name.as_str()));
    if forward_changes && let Some(graphs) = end.val_graphs.as_mut() {
        graphs.invalidate(&reason);
    }
}
