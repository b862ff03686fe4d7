//! One replica's trainer: the model, the update state (optimizer, EMA, schedule), the step's
//! stages built from the DAG, its compiled program and executor (with the capture manager when
//! something is captured), and the probes.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use anyhow::Context;
use burn::tensor::Device;
use libreyolo_stages::data::Batch;
use libreyolo_stages::ema::{DecayScalars, Ema};
use libreyolo_stages::optim::{AdamW, Groups, Optimizer, Scalars, Sgd};
use libreyolo_stages::schedule::{self, Schedule};
use libreyolo_stages::stage::{Build, Group, Model, Parallel, Stage, Update};

use super::checkpoint::{self, TrainState};
use super::precision::{LossScale, Precision};
use super::replica::Replica;
use super::{accumulation, run_dir};
use crate::capture::CaptureManager;
use crate::dag::StepDag;
use crate::device::{Backend, ResolvedDevice};
use crate::manifest::{CaptureMode, LoadedManifest, Optimizer as OptimizerKind, Scheduler};
use crate::profile::Profiler;
use crate::profile::host_sampler::HostSampler;
use crate::step::{Core, Executor, Options, Program};

pub struct Trainer<'a> {
    pub loaded: &'a LoadedManifest,
    pub dag: &'a StepDag,
    pub device: Device,
    pub model: Model,
    pub update: Update,
    pub precision: Precision,
    pub exec: Executor,
    /// This trainer's place in a data-parallel run (alone: rank 0 of 1).
    pub replica: Replica,
    pub probes: Probes,
    /// `data.fixed_batch`: the batch every step trains on.
    pub fixed_batch: Option<Batch>,
    /// Growing target rows under capture (`data.label_rows`, set with the loaders' rows).
    pub grown_rows: Option<GrownRows>,
}

/// The most target rows a batch of a growing run has held ([`LabelRows::Growing`]).
///
/// [`LabelRows::Growing`]: libreyolo_stages::data::LabelRows::Growing
#[derive(Debug, Default)]
pub struct GrownRows(usize);

impl GrownRows {
    /// A batch of `rows`: `(before, rows)` when it holds more than any batch before it but the
    /// first (the graphs recorded at `before` rows will not be replayed again).
    pub fn rise(&mut self, rows: usize) -> Option<(usize, usize)> {
        let before = self.0;
        self.0 = before.max(rows);
        (rows > before && before > 0).then_some((before, rows))
    }
}

/// What watches the steps.
#[derive(Default)]
pub struct Probes {
    /// The profiler while its window is open (`profile=true`); `None` costs one branch a stage.
    pub profiler: Option<Profiler>,
    /// Where the profile is written, and whether the run stops after it.
    pub profile_out: Option<ProfileOut>,
    /// `LIBREYOLO_HOST_PROFILE`: the host's stacks sampled over the first steps.
    pub host_sampler: Option<HostSampler>,
}

pub struct ProfileOut {
    pub dir: std::path::PathBuf,
    pub trace: bool,
    pub then_stop: bool,
}

impl Group for Replica {
    fn devices(&self) -> Option<&[Device]> {
        self.group_devices()
    }

    fn average_gradients(&self, grads: libreyolo_stages::stage::Grads) -> libreyolo_stages::stage::Grads {
        Replica::average_gradients(self, grads)
    }
}

/// What a run allows to capture: `capture.enabled`, unless the device, gradient accumulation or
/// a one-process multi-GPU run rules it out (the one line logged as `cuda_graph=true ignored`).
pub fn program_options(loaded: &LoadedManifest, backend: Backend, world: usize, processes: bool, accumulate: usize) -> Options {
    let m = &loaded.manifest;
    let software = std::env::var_os(crate::capture::one_graph::SOFTWARE_ENV).is_some();
    let refused = if backend != Backend::Cuda && !software {
        Some("device is not CUDA".to_string())
    } else if accumulate > 1 {
        Some(format!("gradient accumulation ({accumulate} micro-batches per step) is not captured"))
    } else if world > 1 && !processes {
        Some(format!("{world} GPUs driven by one process capture concurrently in one CUDA context; launch one process per GPU (RANK / WORLD_SIZE) to capture"))
    } else {
        None
    };
    let capture = crate::compile::capture_wanted(&m.capture, backend, world);
    Options { capture, refused, parallel: Parallel { world, sync_bn: m.run.sync_bn }, accumulate }
}

/// The optimizer the manifest names, with its parameter groups (checked by the manifest's
/// validation).
fn optimizer(loaded: &LoadedManifest) -> Box<dyn Optimizer> {
    let m = &loaded.manifest;
    let groups = groups(&m.optim);
    match m.optim.optimizer {
        OptimizerKind::Sgd => Box::new(Sgd::new(groups, m.optim.nesterov)),
        OptimizerKind::Adamw => Box::new(AdamW::new(groups)),
    }
}

/// `[optim]`'s parameter groups (none: weight decay by role).
pub fn groups(o: &crate::manifest::OptimSettings) -> Groups {
    let group = |g: &crate::manifest::ParamGroup| libreyolo_stages::optim::Group {
        names: g.names.iter().map(|n| regex::Regex::new(n).expect("validated with the manifest")).collect(),
        lr_scale: g.lr_scale,
        weight_decay: g.weight_decay,
    };
    Groups { weight_decay: o.weight_decay, groups: o.groups.iter().map(group).collect() }
}

/// One line per declared parameter group: its patterns, what it sets, how many of `params` it
/// takes (a group that takes none is most likely a misspelt pattern: a warning).
fn log_groups(o: &crate::manifest::OptimSettings, params: &libreyolo_families::ParamStore) {
    let counts = groups(o).counts(params.entries().iter().filter(|e| e.trains()).map(|e| e.name.as_str()));
    for (g, n) in o.groups.iter().zip(counts) {
        let decay = g.weight_decay.map_or(format!("weight decay {}", o.weight_decay), |w| format!("weight decay {w}"));
        let line = format!("optimizer group {:?}: lr x{}, {decay}, {n} parameters", g.names, g.lr_scale);
        if n == 0 { tracing::warn!("{line}: no parameter's name matches") } else { tracing::info!("{line}") }
    }
}

/// The learning-rate schedule of `iters_per_epoch` optimizer steps an epoch.
fn schedule(loaded: &LoadedManifest, iters_per_epoch: usize) -> Schedule {
    let m = &loaded.manifest;
    Schedule {
        kind: match m.schedule.scheduler {
            Scheduler::Linear => schedule::Kind::Linear,
            Scheduler::Cos => schedule::Kind::Cos,
            Scheduler::Yoloxwarmcos => schedule::Kind::YoloxWarmCos { plateau_epochs: m.augment.no_aug_epochs as usize },
            Scheduler::Constant => schedule::Kind::Constant,
        },
        lr0: m.optim.lr0,
        momentum: m.optim.momentum,
        warmup_epochs: m.schedule.warmup_epochs,
        warmup_lr_start: m.schedule.warmup_lr_start,
        warmup_momentum: m.schedule.warmup_momentum,
        min_lr_ratio: m.schedule.min_lr_ratio,
        epochs: m.run.epochs as usize,
        iters_per_epoch,
    }
}

/// The manifest's network with its initial weights (`model.weights`, or a fresh init) on `device`.
pub fn model(loaded: &LoadedManifest, nc: usize, device: &Device) -> anyhow::Result<Model> {
    let m = &loaded.manifest;
    let with_aux = m.model.aux_weight > 0.0;
    let (network, mut params) = crate::network::build(loaded, nc, with_aux, &Device::flex())?;
    if let Some(w) = &m.model.weights {
        // Weights made for another class count train on this dataset with a fresh head, as
        // LibreYOLO rebuilds it (`_rebuild_for_new_classes`); anything else must fit.
        let fit = libreyolo_families::weights::Fit { partial: false, classes: Some(nc) };
        let report = checkpoint::load_any(&mut params, w, fit).with_context(|| format!("loading model.weights {}", w.display()))?;
        if !report.kept_init.is_empty() {
            tracing::warn!(
                "model.weights {}: made for another class count; {} tensor(s) of the head start from a fresh init for {nc} classes: {}",
                w.display(),
                report.kept_init.len(),
                report.kept_init.join("; ")
            );
        }
    }
    if !m.model.freeze.is_empty() {
        let patterns: Vec<regex::Regex> = m.model.freeze.iter().map(|n| regex::Regex::new(n).expect("validated with the manifest")).collect();
        let n = params.freeze(|name| patterns.iter().any(|r| r.is_match(name)));
        let line = format!("model.freeze {:?}: {n} parameters frozen", m.model.freeze);
        if n == 0 { tracing::warn!("{line} (no parameter's name matches)") } else { tracing::info!("{line}") }
    }
    params.to_device(device);
    Ok(Model { network: Rc::new(network), params: Rc::new(RefCell::new(params)), nc, with_aux })
}

/// The update state of a run: the optimizer (its state allocated), its device scalars, the EMA
/// and the schedule.
pub fn update(loaded: &LoadedManifest, model: &Model, device: &Device, accumulate: usize, iters_per_epoch: usize) -> Update {
    let m = &loaded.manifest;
    let mut optim = optimizer(loaded);
    log_groups(&m.optim, &model.params.borrow());
    // Every step, the first included, runs the same optimizer operations on the same buffers.
    optim.init_state(&model.params.borrow());
    let ema = m.ema.enabled.then(|| Rc::new(RefCell::new(Ema::new(&model.params.borrow(), m.ema.decay, m.ema.tau))));
    Update {
        optim: Rc::new(RefCell::new(optim)),
        scalars: Rc::new(RefCell::new(Scalars::new(0.0, 0.0, device))),
        ema,
        ema_scalars: Rc::new(RefCell::new(DecayScalars::new(0.0, device))),
        schedule: Rc::new(schedule(loaded, iters_per_epoch)),
        iteration: Rc::new(Cell::new(0)),
        accumulate,
        clip_max_norm: m.optim.clip_max_norm,
    }
}

/// Builds each stage of `dag` (then the engine's `grad.sync`) for a run.
pub fn stages(
    loaded: &LoadedManifest,
    dag: &StepDag,
    model: &Model,
    update: &Update,
    precision: &Precision,
    group: Rc<dyn Group>,
    device: &Device,
) -> anyhow::Result<Vec<Rc<dyn Stage>>> {
    let m = &loaded.manifest;
    let manifest = toml::Table::try_from(m).expect("the manifest serializes");
    let world = group.devices().map_or(1, <[Device]>::len);
    let build = |name: &str, kind: &libreyolo_stages::stage::Kind| {
        let b = Build {
            stage: name,
            manifest: &manifest,
            device: device.clone(),
            model: model.clone(),
            update: update.clone(),
            compute: precision.compute,
            scaler: precision.scaler.clone(),
            group: group.clone(),
            parallel: Parallel { world, sync_bn: m.run.sync_bn },
        };
        (kind.build)(&b).with_context(|| format!("building stage `{name}` (kind `{}`)", kind.name))
    };
    let mut out = dag.stages.iter().map(|s| build(&s.name, s.kind)).collect::<anyhow::Result<Vec<_>>>()?;
    out.push(build("grad.sync", &libreyolo_stages::kinds::grad_sync::KIND)?);
    Ok(out)
}

impl<'a> Trainer<'a> {
    /// What the network's head does: how the run validates and what it records.
    pub fn task(&self) -> super::validate::Task {
        super::validate::Task::of(&self.model.network)
    }

    /// The trainer of `replica` for a run at global `batch`, `iters_per_epoch` optimizer steps an
    /// epoch.
    pub fn new(
        loaded: &'a LoadedManifest,
        dag: &'a StepDag,
        resolved: &ResolvedDevice,
        nc: usize,
        batch: usize,
        iters_per_epoch: usize,
        replica: Replica,
    ) -> anyhow::Result<Self> {
        let m = &loaded.manifest;
        let device = replica.device().clone();
        let precision = Precision::new(m, resolved.backend, &device)?;
        let model = model(loaded, nc, &device)?;
        // LibreYOLO's accumulation counts the global batch.
        let update = update(loaded, &model, &device, accumulation(m.optim.nbs, batch), iters_per_epoch);
        let world = replica.world();
        let opts = program_options(loaded, resolved.backend, world, replica.is_process(), update.accumulate);
        let program = Program::compile(dag, &opts);
        if replica.is_main() {
            if let Some(why) = &program.why_eager {
                // `auto` trains eager where capture does not apply, saying so only on a GPU.
                match m.capture.enabled {
                    CaptureMode::On => tracing::warn!("cuda_graph=true ignored ({why}); training runs eager."),
                    CaptureMode::Off if opts.capture => {
                        tracing::warn!("compile={}: CUDA graphs disabled ({why}); training runs eager.", m.capture.compile)
                    }
                    _ if resolved.backend == Backend::Cuda => tracing::info!("cuda_graph=auto: training runs eager ({why})"),
                    _ => {}
                }
            } else {
                for note in &program.notes {
                    tracing::info!("cuda_graph: {note}");
                }
            }
        }
        let stages = stages(loaded, dag, &model, &update, &precision, Rc::new(replica.clone()), &device)?;
        let core = Core::new(program, dag, stages, device.clone(), precision.compute, std::env::var_os(crate::capture::one_graph::SOFTWARE_ENV).is_some());
        let graphs = core.program.region.as_ref().map(|_| {
            CaptureManager::new(&format!("training step {}", core.program.describe_region()), m.capture.threshold, m.capture.max_graphs as usize)
                .agreeing(replica.capture_agreement())
        });
        let mut exec = Executor::new(core, graphs);
        if exec.graphs.is_some() {
            // Every captured graph reads the parameters (validation's, the EMA weights) at the
            // addresses it recorded, and a captured update writes them: each update must keep
            // its tensor's buffer, whatever the fusion backend would pick.
            model.params.borrow_mut().set_stable_buffers(true);
        }
        exec.precompile = crate::precompile::wanted(resolved.backend, world)
            .map(|mode| (crate::precompile::Precompile::load(mode, &crate::kernel_cache::cache_dir()), format!("{}-{}", m.model.family, m.model.size)));
        // One sampler per process (pprof's is process-wide): the main replica's.
        let host_sampler = if replica.is_main() { HostSampler::from_env()? } else { None };
        let probes = Probes { host_sampler, ..Default::default() };
        Ok(Self { loaded, dag, device, model, update, precision, exec, replica, probes, fixed_batch: None, grown_rows: None })
    }

    /// Whether the step's region is captured (graphs replayed once its shape repeats).
    pub fn captures(&self) -> bool {
        self.exec.graphs.is_some()
    }

    /// This step's learning rate.
    pub fn lr(&self) -> f64 {
        self.update.schedule.at(self.update.iteration.get()).0
    }

    pub fn save(&self, path: &std::path::Path, state: &TrainState) -> anyhow::Result<()> {
        let mut state = state.clone();
        state.iteration = self.update.iteration.get();
        state.ema_updates = self.update.ema.as_ref().map(|e| e.borrow().updates).unwrap_or(0);
        state.loss_scale = self.precision.scaler.as_ref().map(|s| s.borrow().read());
        let params = self.model.params.borrow();
        let ema = self.update.ema.as_ref().map(|e| e.borrow());
        checkpoint::save(path, &params, ema.as_ref().map(|e| &e.store), self.update.optim.borrow().state(&params), &state)
    }

    /// Loads `run_dir`'s `weights/last` (model, EMA, optimizer, counters).
    pub fn resume(&mut self, run_dir: &std::path::Path) -> anyhow::Result<TrainState> {
        let path = run_dir::weights_in(run_dir, "last");
        let state = checkpoint::read_state(&path)?;
        checkpoint::load_weights(&mut self.model.params.borrow_mut(), &path, "train_model.")?;
        if let Some(ema) = self.update.ema.as_ref() {
            let mut ema = ema.borrow_mut();
            checkpoint::load_weights(&mut ema.store, &path, "model.")?;
            ema.updates = state.ema_updates;
        }
        let opt = checkpoint::load_optimizer(&path, &self.device)?;
        let mut optim = self.update.optim.borrow_mut();
        optim.load_state(&self.model.params.borrow(), opt);
        optim.resume_steps(state.iteration as u64);
        // A resumed optimizer state is kept; missing entries are allocated.
        optim.init_state(&self.model.params.borrow());
        self.update.iteration.set(state.iteration);
        if let (Some(s), Some(scale)) = (self.precision.scaler.as_ref(), state.loss_scale) {
            *s.borrow_mut() = LossScale::new(scale, &self.device);
        }
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::GrownRows;

    /// The first batch sets the count; each rise after it says which graphs to drop; a batch
    /// that needs fewer rows changes nothing (the loader pads it to the count).
    #[test]
    fn grown_rows_report_each_rise_after_the_first_batch() {
        let mut g = GrownRows::default();
        assert_eq!(g.rise(64), None);
        assert_eq!(g.rise(64), None);
        assert_eq!(g.rise(128), Some((64, 128)));
        assert_eq!(g.rise(64), None);
        assert_eq!(g.rise(128), None);
        assert_eq!(g.rise(300), Some((128, 300)));
    }
}
