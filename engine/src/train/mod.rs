//! The training engine: runs the manifest's step DAG over the dataset, epoch after epoch,
//! with validation on the EMA weights, checkpoints, logs, plots and resume.

pub mod autobatch;
pub mod capture_plan;
pub mod checkpoint;
pub mod one_graph;
pub mod plots;
pub mod precision;
pub mod progress;
pub mod replica;
pub mod run_dir;
pub mod segment;
pub mod step;
pub mod two_graphs;
pub mod validate;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::Context;
use burn::tensor::{Device, Tensor};
use libreyolo_families::{Network, ParamId, ParamStore};
use libreyolo_stages::ema::{DecayScalars, Ema};
use libreyolo_stages::loss::Yolo9Loss;
use libreyolo_stages::loss::assigner::AssignerConfig;
use libreyolo_stages::optim::{AdamW, Optimizer, Scalars, Sgd};
use libreyolo_stages::schedule::{self, Schedule};

use crate::dag::StepDag;
use crate::data::{self, Split};
use crate::device::ResolvedDevice;
use crate::manifest::{LoadedManifest, Optimizer as OptimizerKind, Scheduler};
use crate::capture::CaptureManager;
use crate::capture::forward::{Forward, ForwardFn, ForwardGraph};
use crate::profile::host_sampler::HostSampler;
use crate::profile::{self, Profiler};
use checkpoint::TrainState;
use precision::{LossScale, Precision};
use replica::Replica;
use run_dir::{EpochRecord, RunDir, StepRecord};

/// The network and its parameters. Shared (`Rc`) so that a captured segment's graph can
/// borrow them across replays while the optimizer updates the parameters in place.
pub struct Model {
    pub network: Rc<Network>,
    pub params: Rc<RefCell<ParamStore>>,
}

/// What a finished run reports.
#[derive(Debug, Clone)]
pub struct TrainSummary {
    pub run_dir: std::path::PathBuf,
    pub epochs_run: usize,
    pub last: Option<EpochRecord>,
    pub best_fitness: Option<f64>,
    pub interrupted: bool,
    /// Stopped by `patience` before the last epoch.
    pub stopped_early: bool,
}

pub struct Trainer<'a> {
    loaded: &'a LoadedManifest,
    dag: &'a StepDag,
    device: Device,
    model: Model,
    optim: Rc<RefCell<Box<dyn Optimizer>>>,
    ema: Option<Rc<RefCell<Ema>>>,
    /// This step's optimizer and EMA hyper-parameters as device scalars (stable buffers that a
    /// captured step reads; written in place before every step).
    scalars: Rc<RefCell<Scalars>>,
    ema_scalars: Rc<RefCell<DecayScalars>>,
    /// The captured graphs hold the update too (BatchNorm statistics, optimizer, EMA): the whole
    /// step, or LibreYOLO's two graphs followed by an update graph.
    captures_update: bool,
    /// LibreYOLO's contract: forward and backward captured as two graphs, the loss eager.
    split_graphs: bool,
    /// With `split_graphs`, the network layer after which the graphs end (`until`).
    seam: Option<usize>,
    schedule: Schedule,
    loss: Yolo9Loss,
    aux_weight: f64,
    with_aux: bool,
    precision: Precision,
    /// Optimizer steps taken.
    iteration: usize,
    /// Micro-batches per optimizer step (`round(nbs / batch)`).
    accumulate: usize,
    grad_accumulator: Vec<(ParamId, Tensor<1>)>,
    /// The profiler while its window is open (`profile=true`); `None` costs one branch a stage.
    profiler: Option<Profiler>,
    /// Where the profile is written, and whether the run stops after it.
    profile_out: Option<ProfileOut>,
    /// `LIBREYOLO_HOST_PROFILE`: the host's stacks sampled over the first steps.
    host_sampler: Option<HostSampler>,
    /// `data.fixed_batch`: the batch every step trains on.
    fixed_batch: Option<libreyolo_stages::data::Batch>,
    /// The capture manager of the forward + loss + backward segment, when it is captured.
    graphs: Option<crate::capture::CaptureManager<segment::SegmentGraph>>,
    /// This trainer's place in a data-parallel run (alone: rank 0 of 1).
    replica: Replica,
    /// Which steps (eager or captured) run as a dry run first on a new input shape, to compile
    /// their kernels on every core ([`crate::precompile`]); `None` where that is not done.
    precompile: Option<crate::precompile::Precompile>,
}

struct ProfileOut {
    dir: std::path::PathBuf,
    trace: bool,
    then_stop: bool,
}

/// How an epoch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EpochEnd {
    Complete,
    /// Ctrl-C: weights/last is saved and the run stops.
    Interrupted,
    /// The profile window completed with `profile.then_stop`: the run stops, nothing saved.
    ProfileOnly,
}

/// Set by Ctrl-C: the run saves `last` after the current step and stops.
static STOP: AtomicBool = AtomicBool::new(false);

/// Python's `round` (half to even), as LibreYOLO's accumulation count uses.
fn round_half_even(x: f64) -> usize {
    let r = x.round();
    (if (x - x.trunc()).abs() == 0.5 && r % 2.0 != 0.0 { r - x.signum() } else { r }) as usize
}

/// The dataset of a run, opened once and shared by its replicas.
struct Datasets {
    cfg: libreyolo_stages::data::DatasetConfig,
    /// Classes: the dataset's (`model.nc`, when set, must agree).
    nc: usize,
    train: std::sync::Arc<libreyolo_stages::data::Dataset>,
    val: Option<std::sync::Arc<libreyolo_stages::data::Dataset>>,
}

/// Trains `loaded` on `resolved`: on its one device, or data-parallel on several (one thread
/// and replica per GPU, gradients averaged through NCCL; see [`replica`]).
pub fn train(loaded: &LoadedManifest, dag: &StepDag, resolved: &ResolvedDevice) -> anyhow::Result<TrainSummary> {
    let datasets = prepare(loaded)?;
    let devices = resolved.devices();
    // AutoBatch probes one GPU before the replicas start, as LibreYOLO does before spawning.
    let batch = resolve_batch(loaded, datasets.nc, resolved, devices.len(), false)?;
    let replicas = Replica::group(devices);
    replica::run(replicas, replica::FAILURE_GRACE, |r| train_replica(loaded, dag, resolved, &datasets, batch, r))
}

/// Rank `rank` of a torchrun-style launch over `resolved`'s GPUs: this process trains on
/// `cuda:rank`, the others are processes too (the NCCL identifier is already agreed).
pub fn train_process(loaded: &LoadedManifest, dag: &StepDag, resolved: &ResolvedDevice, rank: usize) -> anyhow::Result<TrainSummary> {
    let datasets = prepare(loaded)?;
    let batch = resolve_batch(loaded, datasets.nc, resolved, resolved.devices().len(), true)?;
    train_replica(loaded, dag, resolved, &datasets, batch, Replica::process(rank, resolved.devices()))
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
    let cfg = data::config(loaded).map_err(|d| anyhow::anyhow!("{}", d.render(false)))?;
    let nc = data::classes(loaded, &cfg)?;
    let train = data::open(loaded, &cfg, Split::Train).map_err(|d| anyhow::anyhow!("{}", d.render(false)))?;
    let val = if m.val.enabled { Some(data::open(loaded, &cfg, Split::Val).map_err(|d| anyhow::anyhow!("{}", d.render(false)))?) } else { None };
    Ok(Datasets { cfg, nc, train, val })
}

/// One replica's training: all of it alone, its shard of every batch (and, on rank 0, every
/// side effect) in a data-parallel run.
fn train_replica(loaded: &LoadedManifest, dag: &StepDag, resolved: &ResolvedDevice, datasets: &Datasets, batch: usize, replica: Replica) -> anyhow::Result<TrainSummary> {
    let m = &loaded.manifest;
    let main = replica.is_main();
    let world = replica.world();
    let device = replica.device().clone();
    let precision = Precision::new(m, resolved.backend, &device)?;
    let nc = datasets.nc;
    let with_aux = m.model.aux_weight > 0.0;
    let (network, mut params) = crate::network::build(loaded, nc, with_aux, &Device::flex()).map_err(|d| anyhow::anyhow!("{}", d.render(false)))?;
    if let Some(w) = &m.model.weights {
        checkpoint::load_any(&mut params, w).with_context(|| format!("loading model.weights {}", w.display()))?;
    }
    params.to_device(&device);

    let train_ds = datasets.train.clone();
    let rank_batch = crate::distributed::per_rank_batch(batch, world).map_err(anyhow::Error::msg)?;
    // Rank 0 owns the run directory; the others only learn where it is (to resume from it).
    let mut run = if main {
        let run = RunDir::create(&m.run.project, &m.run.name, m.run.exist_ok, m.run.resume)?;
        run.write_manifest(&loaded.source.text)?;
        replica.publish_run_dir(&run.path);
        Some(run)
    } else {
        None
    };
    replica.barrier();
    // Another process's rank 0 cannot tell us its directory: resuming names it exactly.
    let run_path = replica.run_dir().map(|p| p.to_path_buf()).unwrap_or_else(|| m.run.project.join(&m.run.name));

    let aug = data::augment(loaded);
    let loader = data::loader(loaded, train_ds.clone(), rank_batch, Some(aug), replica.shard());
    let loader_no_mosaic = data::loader(loaded, train_ds.clone(), rank_batch, Some(aug.without_mosaic()), replica.shard());
    let val_loader = datasets.val.clone().filter(|_| main).map(|ds| data::loader(loaded, ds, batch, None, (0, 1)));
    // LibreYOLO's accumulation counts the global batch.
    let accumulate = accumulation(m.optim.nbs, batch);
    let iters_per_epoch = loader.batches_per_epoch().div_ceil(accumulate).max(1);

    let optim: Box<dyn Optimizer> = match m.optim.optimizer {
        OptimizerKind::Sgd => Box::new(Sgd::new(m.optim.weight_decay, m.optim.nesterov)),
        OptimizerKind::Adamw => Box::new(AdamW::new(m.optim.weight_decay)),
    };
    let schedule = Schedule {
        kind: match m.schedule.scheduler {
            Scheduler::Linear => schedule::Kind::Linear,
            Scheduler::Cos => schedule::Kind::Cos,
        },
        lr0: m.optim.lr0,
        momentum: m.optim.momentum,
        warmup_epochs: m.schedule.warmup_epochs,
        warmup_lr_start: m.schedule.warmup_lr_start,
        warmup_momentum: m.schedule.warmup_momentum,
        min_lr_ratio: m.schedule.min_lr_ratio,
        epochs: m.run.epochs as usize,
        iters_per_epoch,
    };
    let loss = yolo9_loss(m, nc, &network);
    let ema = m.ema.enabled.then(|| Ema::new(&params, m.ema.decay, m.ema.tau));
    let mut trainer = Trainer {
        loaded,
        dag,
        device: device.clone(),
        model: Model { network: Rc::new(network), params: Rc::new(RefCell::new(params)) },
        optim: Rc::new(RefCell::new(optim)),
        ema: ema.map(|e| Rc::new(RefCell::new(e))),
        scalars: Rc::new(RefCell::new(Scalars::new(0.0, 0.0, &device))),
        ema_scalars: Rc::new(RefCell::new(DecayScalars::new(0.0, &device))),
        captures_update: false,
        split_graphs: false,
        seam: None,
        schedule,
        loss,
        aux_weight: m.model.aux_weight,
        with_aux,
        precision,
        iteration: 0,
        accumulate,
        grad_accumulator: vec![],
        profiler: None,
        profile_out: None,
        // One sampler per process (pprof's is process-wide): the main replica's.
        host_sampler: if replica.is_main() { HostSampler::from_env()? } else { None },
        graphs: None,
        fixed_batch: None,
        replica: replica.clone(),
        precompile: crate::precompile::wanted(resolved.backend, world).map(|mode| crate::precompile::Precompile::load(mode, &crate::kernel_cache::cache_dir())),
    };
    // Under several GPUs each rank captures its own graphs where that is safe
    // (`capture_plan::data_parallel_capture`); LibreYOLO disables cuda_graph under DDP altogether.
    if m.capture.enabled
        && let Some((graphs, kind)) = capture_plan::capture_manager(loaded, dag, resolved, (world, replica.is_process(), main))
    {
        trainer.graphs = Some(graphs);
        use capture_plan::CaptureSupport::*;
        trainer.captures_update = matches!(kind, WholeStep | TwoGraphsAndUpdate);
        trainer.split_graphs = matches!(kind, TwoGraphs | TwoGraphsAndUpdate);
        // Checked when the manifest was loaded (`dag::check_until`): a layer of the main branch.
        trainer.seam = dag.network_seam().map(|layer| trainer.model.network.layer_index(layer).expect("`until` names a built layer"));
        // Every captured graph reads the parameters (validation's, the EMA weights) at the
        // addresses it recorded, and the whole step records the updates too: each update must
        // keep its tensor's buffer, whatever the fusion backend would pick. (Two graphs with
        // eager updates into new buffers would replay the forward on the weights of the capture
        // step, or on whatever reused their memory.)
        trainer.model.params.borrow_mut().set_stable_buffers(true);
    }

    let mut state = TrainState {
        nc,
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

    // Every step, the first included, runs the same optimizer operations on the same buffers.
    trainer.optim.borrow_mut().init_state(&trainer.model.params.borrow());

    let nms_cfg = validate::nms_config(&m.val);
    let epochs = m.run.epochs as usize;
    let no_aug_start = epochs.saturating_sub(m.augment.no_aug_epochs as usize);
    let header = format!(
        "training {} ({} parameters) on {} for {epochs} epochs: {} images, batch {batch}{}{}, {} steps/epoch, {}",
        m.model.size,
        trainer.model.params.borrow().num_parameters(),
        resolved.describe(),
        train_ds.len(),
        if world > 1 {
            format!(" ({rank_batch} per GPU, BatchNorm {})", if m.run.sync_bn { "synced (SyncBatchNorm)" } else { "per GPU" })
        } else {
            String::new()
        },
        if accumulate > 1 { format!(" x {accumulate} accumulated") } else { String::new() },
        loader.batches_per_epoch(),
        trainer.precision.describe()
    );
    if let Some(run) = run.as_mut() {
        eprintln!("{header}\nrun directory: {}", run.path.display());
        run.log(&header);
    }
    if m.profile.enabled && world > 1 {
        // As LibreYOLO: the profiler measures one process on one GPU.
        if main {
            tracing::warn!("profile: the profiler is not available with {world} GPUs; training without it");
        }
    } else if m.profile.enabled {
        let meta = profile::analysis::Meta {
            model: format!("{}-{}", m.model.family, m.model.size),
            device: resolved.describe(),
            batch,
            imgsz: m.run.imgsz.to_string(),
            precision: trainer.precision.describe(),
            workers: m.data.workers,
            capture: trainer.graphs.is_some(),
            manifest: loaded.source.path.display().to_string(),
        };
        let observe = resolved.backend == crate::device::Backend::Cuda;
        trainer.profiler = Some(Profiler::new(device.clone(), meta, m.profile.warmup as usize, m.profile.steps as usize, observe));
        trainer.profile_out = Some(ProfileOut { dir: run_path.clone(), trace: m.profile.trace, then_stop: m.profile.then_stop });
        eprintln!("profiling: {} warm-up steps, then {} measured (half unsynced, half synced per phase)", m.profile.warmup, m.profile.steps.max(2));
    }

    // Validation's own graphs when the step is captured: its batch shape and the last partial one.
    let mut val_graphs = trainer.graphs.as_ref().map(|_| CaptureManager::<ForwardGraph<'static>>::new("validation forward", 1, 2));
    let mut last = None;
    let mut interrupted = false;
    let mut stopped_early = false;
    let first_epoch = state.next_epoch;
    for epoch in first_epoch..epochs {
        let mosaic = epoch < no_aug_start;
        if epoch == no_aug_start && epoch > first_epoch {
            // Stages that compute something else without mosaic ask for new graphs.
            let stages = dag.recapturing_on("mosaic_close");
            if !stages.is_empty() {
                let reason = format!("mosaic closed at epoch {}; stage `{}` asked to re-capture", epoch + 1, stages.join("`, `"));
                if let Some(graphs) = trainer.graphs.as_mut() {
                    graphs.invalidate(&reason);
                }
                // Validation's graphs hold only the network's forward.
                let forward_changes = dag.stages.iter().any(|s| s.kind.name == "network.forward" && stages.contains(&s.name.as_str()));
                if forward_changes && let Some(graphs) = val_graphs.as_mut() {
                    graphs.invalidate(&reason);
                }
            }
        }
        let epoch_loader = if mosaic { &loader } else { &loader_no_mosaic };
        let started = Instant::now();
        let (losses, images, end, steps) = trainer.run_epoch(epoch_loader, epoch, epochs)?;
        if let Some(run) = run.as_ref() {
            run.record_steps(epoch, &steps)?;
        }
        if trainer.replica.peer_failed() {
            return Err(replica::PeerFailed.into());
        }
        trainer.replica.check_weights_in_sync(&trainer.model.params.borrow(), epoch)?;
        if end == EpochEnd::ProfileOnly {
            if let Some(run) = run.as_mut() {
                run.log("Profile-only run (profile.then_stop=true): the partial epoch is neither validated nor checkpointed");
            }
            eprintln!("Profile-only run (profile.then_stop=true): stopping; the partial epoch is neither validated nor checkpointed");
            break;
        }
        let seconds = started.elapsed().as_secs_f64();
        let mut record = EpochRecord {
            epoch,
            box_loss: losses.box_loss,
            dfl_loss: losses.dfl_loss,
            cls_loss: losses.cls_loss,
            lr: trainer.schedule.at(trainer.iteration).0,
            // Every replica trains on as many images.
            images_per_s: (images * world) as f64 / seconds,
            seconds,
            map: None,
        };
        if end == EpochEnd::Interrupted {
            // Interrupted mid-epoch (every replica at the same step): keep what was learnt,
            // but this epoch is not complete.
            state.next_epoch = epoch;
            if let Some(run) = run.as_mut() {
                trainer.save(&run.weights("last"), &state)?;
                run.log(&format!("interrupted in epoch {}; weights/last saved", epoch + 1));
            }
            interrupted = true;
            break;
        }
        state.next_epoch = epoch + 1;
        state.iteration = trainer.iteration;
        let Some(run) = run.as_mut() else {
            // Rank 0 validates, saves and decides whether to go on; the others wait for it.
            if replica.agree_stop_after_epoch(false) {
                break;
            }
            continue;
        };
        let validate_now = m.val.enabled && m.val.eval_interval > 0 && ((epoch + 1) % m.val.eval_interval as usize == 0 || epoch + 1 == epochs);
        if validate_now && let Some(vl) = &val_loader {
            let t = Instant::now();
            let forward = trainer.validation_forward();
            let (stats, dets) = match val_graphs.as_mut() {
                // A captured run replays validation's forward too (LibreYOLO's validation graph).
                Some(graphs) => validate::validate(trainer.model.network.head(), vl, &device, &nms_cfg, &mut |x| {
                    let mut ops = Forward { f: forward.clone(), device: &device, input: x, dtype: trainer.precision.compute };
                    graphs.run(&ops.key(), &mut ops)
                })?,
                None => validate::validate(trainer.model.network.head(), vl, &device, &nms_cfg, &mut |x| forward(x))?,
            };
            eprintln!(
                "  val: mAP50-95 {:.4}  mAP50 {:.4}  ({} detections, {:.1}s)",
                stats[0].max(0.0),
                stats[1].max(0.0),
                dets.len(),
                t.elapsed().as_secs_f64()
            );
            record.map = Some(stats);
        }
        if let Some(stats) = record.map {
            let fitness = stats[0].max(0.0);
            if state.best_fitness.is_none_or(|b| fitness > b) {
                state.best_fitness = Some(fitness);
                state.best_epoch = Some(epoch);
                trainer.save(&run.weights("last"), &state)?;
                std::fs::copy(run.weights("last"), run.weights("best.tmp")).and_then(|_| std::fs::rename(run.weights("best.tmp"), run.weights("best")))?;
            }
        }
        trainer.save(&run.weights("last"), &state)?;
        if m.run.save_period > 0 && (epoch + 1) % m.run.save_period as usize == 0 {
            std::fs::copy(run.weights("last"), run.weights(&format!("epoch_{}", epoch + 1)))?;
        }
        run.record(&record)?;
        run.log(&format!(
            "epoch {}/{epochs}: box {:.4} dfl {:.4} cls {:.4} lr {:.6} {:.1} img/s{}",
            epoch + 1,
            record.box_loss,
            record.dfl_loss,
            record.cls_loss,
            record.lr,
            record.images_per_s,
            record.map.map(|s| format!(" mAP50-95 {:.4} mAP50 {:.4}", s[0], s[1])).unwrap_or_default()
        ));
        if let Err(e) = plots::draw(&run.path, &run.records()) {
            tracing::warn!("could not draw the plots: {e:#}");
        }
        let validated = record.map.is_some();
        last = Some(record);
        if STOP.load(Ordering::SeqCst) {
            interrupted = true;
        }
        // Early stopping: `patience` epochs since the best validated fitness (0: never).
        if !interrupted
            && validated
            && m.run.patience > 0
            && let Some(best) = state.best_epoch
            && epoch - best >= m.run.patience as usize
            && epoch + 1 < epochs
        {
            let line = format!(
                "early stopping: no improvement in mAP50-95 for {} epochs (best {:.4} at epoch {}); patience={}",
                epoch - best,
                state.best_fitness.unwrap_or(0.0),
                best + 1,
                m.run.patience
            );
            eprintln!("{line}");
            run.log(&line);
            stopped_early = true;
        }
        if replica.agree_stop_after_epoch(interrupted || stopped_early) {
            break;
        }
    }
    Ok(TrainSummary { run_dir: run_path, epochs_run: state.next_epoch - first_epoch, last, best_fitness: state.best_fitness, interrupted, stopped_early })
}

impl Trainer<'_> {
    /// One epoch; returns the mean losses, images seen and how it ended.
    fn run_epoch(&mut self, loader: &libreyolo_stages::data::Loader, epoch: usize, epochs: usize) -> anyhow::Result<(step::StepLosses, usize, EpochEnd, Vec<StepRecord>)> {
        let total = loader.batches_per_epoch();
        let bar = progress::epoch_bar(epoch, epochs, total);
        if !self.replica.is_main() {
            bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        }
        let mut images = 0usize;
        let mut log = EpochLosses::default();
        // The last step's losses, queued on the device and read after the next step is queued.
        let mut pending: Option<PendingLosses> = None;
        let started = Instant::now();
        let batches = loader.epoch(epoch as u64);
        let mut i = 0;
        loop {
            if let Some(p) = self.profiler.as_mut() {
                p.begin_step();
            }
            let next = match (&self.fixed_batch, i < total) {
                (Some(b), true) => Ok(b.clone()),
                _ => batches.recv(),
            };
            let Ok(batch) = next else {
                if let Some(p) = self.profiler.as_mut() {
                    p.abandon_step();
                }
                break;
            };
            if self.loaded.manifest.data.fixed_batch && self.fixed_batch.is_none() {
                self.fixed_batch = Some(batch.clone());
            }
            if let Some(p) = self.profiler.as_mut() {
                p.fetched();
            }
            let last_micro = (i + 1) % self.accumulate == 0 || i + 1 == total;
            let size = batch.size;
            if let Some(sampler) = self.host_sampler.as_mut() {
                sampler.start()?;
            }
            let values = self.run_step(batch, last_micro)?;
            if last_micro {
                self.grad_accumulator.clear();
            }
            images += size;
            if let Some(loss) = &values.loss {
                if let Some(p) = self.profiler.as_mut() {
                    p.enter("readback");
                }
                // This step's losses are queued; the previous step's are read now, after this
                // step was queued (the host no longer waits for a step before queuing the next).
                let queued = PendingLosses { queued: step::queue_losses(loss), step: i, lr: self.schedule.at(self.iteration).0, iteration: self.iteration };
                log.record(pending.replace(queued), &self.replica, epoch)?;
                if let Some(p) = self.profiler.as_mut() {
                    p.exit();
                }
                let (sum, n) = (&log.sum, log.steps.len().max(1) as f64);
                bar.set_message(format!(
                    "box {:.3} dfl {:.3} cls {:.3} lr {:.5} {:.1} img/s{}",
                    sum.box_loss / n,
                    sum.dfl_loss / n,
                    sum.cls_loss / n,
                    self.schedule.at(self.iteration).0,
                    images as f64 / started.elapsed().as_secs_f64(),
                    progress::memory(&self.device)
                ));
            }
            if let Some(sampler) = self.host_sampler.as_mut()
                && sampler.step_ended()?
            {
                self.host_sampler = None;
            }
            bar.inc(1);
            i += 1;
            if self.profiler.as_mut().map(|p| p.end_step()) == Some(profile::Progress::Done) {
                log.record(pending.take(), &self.replica, epoch)?;
                if self.close_profile()? {
                    bar.abandon();
                    return Ok((log.mean(), images, EpochEnd::ProfileOnly, log.steps));
                }
            }
            self.replica.step_done();
            if self.replica.should_stop(i, STOP.load(Ordering::SeqCst)) {
                log.record(pending.take(), &self.replica, epoch)?;
                bar.abandon();
                return Ok((log.mean(), images, EpochEnd::Interrupted, log.steps));
            }
        }
        log.record(pending.take(), &self.replica, epoch)?;
        bar.finish();
        Ok((log.mean(), images, EpochEnd::Complete, log.steps))
    }

    /// Validation's forward: the EMA weights (or the model's without EMA), read at call time, so
    /// a captured validation graph follows their in-place updates.
    fn validation_forward(&self) -> ForwardFn<'static> {
        let (network, compute) = (self.model.network.clone(), self.precision.compute);
        match &self.ema {
            Some(ema) => {
                let ema = ema.clone();
                Rc::new(move |x| crate::capture::forward::run(&network, &ema.borrow().store, compute, x))
            }
            None => {
                let params = self.model.params.clone();
                Rc::new(move |x| crate::capture::forward::run(&network, &params.borrow(), compute, x))
            }
        }
    }

    /// The window is complete: analyse, print, write the artifacts and drop the probes.
    /// Returns whether the run stops here (`profile.then_stop`).
    fn close_profile(&mut self) -> anyhow::Result<bool> {
        let (Some(profiler), Some(out)) = (self.profiler.take(), self.profile_out.take()) else { return Ok(false) };
        let p = profiler.finish();
        let path = profile::artifacts::write(&out.dir, &p, out.trace)?;
        eprintln!("\n{}", profile::report(&p));
        eprintln!("  wrote {} (and profile_summary.json, {}timeline.html)", path.display(), if out.trace { "profile_trace.json, " } else { "" });
        if !out.then_stop {
            eprintln!("Profile window complete; training continues without the probes");
        }
        Ok(out.then_stop)
    }

    fn save(&self, path: &std::path::Path, state: &TrainState) -> anyhow::Result<()> {
        let mut state = state.clone();
        state.iteration = self.iteration;
        state.ema_updates = self.ema.as_ref().map(|e| e.borrow().updates).unwrap_or(0);
        state.loss_scale = self.precision.scaler.as_ref().map(|s| s.borrow().read());
        let params = self.model.params.borrow();
        let ema = self.ema.as_ref().map(|e| e.borrow());
        checkpoint::save(path, &params, ema.as_ref().map(|e| &e.store), self.optim.borrow().state(&params), &state)
    }

    /// Loads `run_dir`'s `weights/last` (model, EMA, optimizer, counters).
    fn resume(&mut self, run_dir: &std::path::Path) -> anyhow::Result<TrainState> {
        let path = run_dir::weights_in(run_dir, "last");
        let state = checkpoint::read_state(&path)?;
        checkpoint::load_weights(&mut self.model.params.borrow_mut(), &path, "train_model.")?;
        if let Some(ema) = self.ema.as_ref() {
            let mut ema = ema.borrow_mut();
            checkpoint::load_weights(&mut ema.store, &path, "model.")?;
            ema.updates = state.ema_updates;
        }
        let opt = checkpoint::load_optimizer(&path, &self.device)?;
        self.optim.borrow_mut().load_state(&self.model.params.borrow(), opt);
        self.optim.borrow_mut().resume_steps(state.iteration as u64);
        self.iteration = state.iteration;
        if let (Some(s), Some(scale)) = (self.precision.scaler.as_ref(), state.loss_scale) {
            *s.borrow_mut() = LossScale::new(scale, &self.device);
        }
        Ok(state)
    }
}

/// The YOLOv9 loss of the manifest's `[loss]` settings for `network`'s head and `nc` classes.
pub(crate) fn yolo9_loss(m: &crate::manifest::Manifest, nc: usize, network: &libreyolo_families::Network) -> Yolo9Loss {
    let reg_max = network.head().reg_max;
    Yolo9Loss {
        nc,
        reg_max,
        box_gain: m.loss.box_gain,
        dfl_gain: m.loss.dfl_gain,
        cls_gain: m.loss.cls_gain,
        assigner: AssignerConfig { topk: m.loss.topk, alpha: m.loss.alpha, beta: m.loss.beta, reg_max },
    }
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
pub fn resolve_batch(loaded: &LoadedManifest, nc: usize, resolved: &ResolvedDevice, world: usize, processes: bool) -> anyhow::Result<usize> {
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
    let per_gpu = match autobatch::probe(loaded, nc, &device, &precision, total).and_then(|points| {
        autobatch::fit(&points, total, autobatch::FRACTION).map_err(anyhow::Error::msg)
    }) {
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

/// A step's losses queued on the device, with what its `steps.csv` row needs.
struct PendingLosses {
    queued: step::QueuedLosses,
    step: usize,
    lr: f64,
    iteration: usize,
}

/// The losses of an epoch's steps, as read back (the sum kept for the progress bar's mean).
#[derive(Default)]
struct EpochLosses {
    sum: step::StepLosses,
    steps: Vec<StepRecord>,
}

impl EpochLosses {
    /// Reads `pending`'s losses (waiting for its step; the replicas' mean), refuses a loss that
    /// is not finite, naming its step, and adds its row.
    fn record(&mut self, pending: Option<PendingLosses>, replica: &Replica, epoch: usize) -> anyhow::Result<()> {
        let Some(PendingLosses { queued, step, lr, iteration }) = pending else { return Ok(()) };
        let l = queued.read(replica);
        if !(l.box_loss.is_finite() && l.dfl_loss.is_finite() && l.cls_loss.is_finite()) {
            anyhow::bail!("the loss is not finite at epoch {} step {} (box {}, dfl {}, cls {})", epoch + 1, step + 1, l.box_loss, l.dfl_loss, l.cls_loss);
        }
        self.steps.push(StepRecord { iteration, box_loss: l.box_loss, dfl_loss: l.dfl_loss, cls_loss: l.cls_loss, lr });
        self.sum.box_loss += l.box_loss;
        self.sum.dfl_loss += l.dfl_loss;
        self.sum.cls_loss += l.cls_loss;
        Ok(())
    }

    fn mean(&self) -> step::StepLosses {
        let n = self.steps.len().max(1) as f64;
        step::StepLosses { box_loss: self.sum.box_loss / n, dfl_loss: self.sum.dfl_loss / n, cls_loss: self.sum.cls_loss / n }
    }
}
