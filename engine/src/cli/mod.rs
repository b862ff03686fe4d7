//! The `libreyolo-run` command line.

mod bench;
mod data;
mod doctor;
mod dry_run;
mod export;
mod parity;
mod predict;
mod profile;
mod val;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::dag::StepDag;
use crate::manifest::{self, Diagnostic};

/// Trains YOLO-family detectors from declarative TOML manifests.
#[derive(Debug, Parser)]
#[command(name = "libreyolo-run", version, args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    train: TrainArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Train from a manifest (the default command).
    Train(TrainArgs),
    /// Check the compute device: enumeration, a tensor op checked against the CPU, and a
    /// captured CUDA graph replayed on new inputs.
    Doctor(doctor::DoctorArgs),
    /// Check the network, loss and gradients against LibreYOLO's parity fixture on a device.
    Parity(parity::ParityArgs),
    /// Time the network or the loss on a device (warm-up reported apart).
    Bench(bench::BenchArgs),
    /// Preview augmented batches or time the data loader.
    Data(data::DataArgs),
    /// Detect objects in an image or a folder: annotated images and predictions.json.
    Predict(predict::PredictArgs),
    /// Export trained weights for deployment: the fused network and its decode as ONNX.
    Export(export::ExportArgs),
    /// Profile training steps (phases, kernels, verdict) or read a profile.json.
    Profile(profile::ProfileArgs),
    /// COCO mAP of weights (ours or LibreYOLO's) on the dataset's val split.
    Val(val::ValArgs),
}

#[derive(Debug, Args)]
struct TrainArgs {
    /// The run's manifest, e.g. manifests/yolo9t.toml.
    #[arg(required = true, value_name = "MANIFEST")]
    manifest: Option<PathBuf>,
    /// Settings overrides as key=value (`epochs=100`, `data=my.yaml`, `capture.threshold=5`,
    /// `stage.forward.capture=false`).
    #[arg(value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Print the resolved settings, the device and the step plan, then exit.
    #[arg(long)]
    dry_run: bool,
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    init_logging();
    let cli = Cli::parse();
    if let Err(msg) = crate::kernel_cache::check_conv_kernels().and(crate::fusion_search::max_blocks().map(drop)).and(crate::capture::one_graph::check_env()) {
        eprintln!("error: {msg}");
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Some(Command::Doctor(args)) => doctor::run(&args),
        Some(Command::Parity(args)) => parity::run(&args),
        Some(Command::Bench(args)) => bench::run(&args),
        Some(Command::Data(args)) => data::run(&args),
        Some(Command::Predict(args)) => predict::run(&args),
        Some(Command::Profile(args)) => profile::run(&args),
        Some(Command::Export(args)) => export::run(&args),
        Some(Command::Val(args)) => val::run(&args),
        Some(Command::Train(args)) => train(&args),
        None => train(&cli.train),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Manifest(d)) => {
            eprintln!("{}", d.render_for_stderr());
            ExitCode::from(2)
        }
        Err(Failure::Run(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Why a command failed: a bad manifest (exit 2) or a failure while running (exit 1).
pub enum Failure {
    Manifest(Box<Diagnostic>),
    Run(anyhow::Error),
}

impl From<Diagnostic> for Failure {
    fn from(d: Diagnostic) -> Self {
        Failure::Manifest(Box::new(d))
    }
}

impl From<anyhow::Error> for Failure {
    /// A manifest error that reached here through training (its dataset, its network) is shown
    /// as one, unless something wrapped it with more context.
    fn from(e: anyhow::Error) -> Self {
        if e.chain().count() > 1 {
            return Failure::Run(e);
        }
        match e.downcast::<Diagnostic>() {
            Ok(d) => Failure::Manifest(Box::new(d)),
            Err(e) => Failure::Run(e),
        }
    }
}

/// The manifest's `run.device`, resolved; an unusable one is an error at that key.
fn run_device(loaded: &manifest::LoadedManifest) -> Result<crate::device::ResolvedDevice, Diagnostic> {
    crate::device::resolve(&loaded.manifest.run.device)
        .map_err(|msg| loaded.source.error_at(&manifest::KeyPath::dotted("run.device"), manifest::Part::Value, msg))
}

/// Splits a command's own `key=value` settings off the manifest overrides: `own` is given each
/// setting's trimmed key and its value and says whether it took it; the rest, in order, are
/// the overrides (and so is anything without `=`).
fn split_settings(settings: &[String], mut own: impl FnMut(&str, &str) -> anyhow::Result<bool>) -> anyhow::Result<Vec<String>> {
    let mut rest = vec![];
    for s in settings {
        match s.split_once('=') {
            Some((k, v)) if own(k.trim(), v)? => {}
            _ => rest.push(s.clone()),
        }
    }
    Ok(rest)
}

/// `conf`, `iou` and `max_det`: the NMS settings of `predict` and of `export nms=true`, with
/// LibreYOLO's defaults.
#[derive(Debug, Clone, Copy)]
struct Thresholds {
    conf: f32,
    iou: f32,
    max_det: usize,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self { conf: 0.25, iou: 0.45, max_det: 300 }
    }
}

impl Thresholds {
    /// Reads `key=value` when the key is one of the three (`Ok(true)`), in range.
    fn take(&mut self, key: &str, value: &str) -> anyhow::Result<bool> {
        let v = value.trim();
        let fraction = || -> anyhow::Result<f32> {
            v.parse::<f32>().ok().filter(|x| (0.0..=1.0).contains(x)).ok_or_else(|| anyhow::anyhow!("`{key}` must lie in [0, 1], got `{value}`"))
        };
        match key {
            "conf" => self.conf = fraction()?,
            "iou" => self.iou = fraction()?,
            "max_det" => {
                self.max_det = v.parse().ok().filter(|n| *n > 0).ok_or_else(|| anyhow::anyhow!("`max_det` expects a positive integer, got `{value}`"))?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// The `weights=PATH` an evaluating command (`predict`, `val`) cannot run without.
fn required_weights(loaded: &manifest::LoadedManifest, command: &str) -> Result<PathBuf, Failure> {
    loaded.manifest.model.weights.clone().ok_or_else(|| {
        anyhow::anyhow!(
            "{command} needs `weights=PATH` (a checkpoint such as runs/train/NAME/weights/best.safetensors, a state dict with LibreYOLO's key names, or a LibreYOLO .pt)"
        )
        .into()
    })
}

/// The class names and count `weights` were trained for: a checkpoint knows them; a plain
/// state dict takes the manifest's `model.nc` and the dataset's names (COCO's 80 without either).
fn weights_classes(loaded: &manifest::LoadedManifest, weights: &std::path::Path) -> (Vec<String>, usize) {
    let state = crate::train::checkpoint::read_state(weights).ok();
    let names: Vec<String> = match &state {
        Some(s) => s.names.clone(),
        None => crate::data::config(loaded).map(|c| c.names).unwrap_or_default(),
    };
    let nc = state.as_ref().map(|s| s.nc).or(loaded.manifest.model.nc.map(|n| n as usize)).unwrap_or(if names.is_empty() {
        crate::network::DEFAULT_NC
    } else {
        names.len()
    });
    (names, nc)
}

/// The manifest's network (without the training-only PGI branch) with `nc` classes and the
/// weights of `weights` (a checkpoint's EMA weights, a state dict, or a LibreYOLO `.pt`), on
/// `device`.
fn eval_network(
    loaded: &manifest::LoadedManifest,
    nc: usize,
    weights: &std::path::Path,
    device: &burn::tensor::Device,
) -> Result<(libreyolo_families::Network, libreyolo_families::ParamStore), Failure> {
    let (network, mut params) = crate::network::build(loaded, nc, false, &burn::tensor::Device::flex())?;
    crate::train::checkpoint::load_any(&mut params, weights, Default::default())
        .map_err(|e| anyhow::anyhow!("loading weights={}: {e:#}", weights.display()))?;
    params.to_device(device);
    Ok((network, params))
}

fn train(args: &TrainArgs) -> Result<(), Failure> {
    let path = args.manifest.as_deref().expect("clap requires MANIFEST");
    let loaded = crate::train::run_dir::resumed(manifest::load(path, &args.overrides)?, &args.overrides)?;
    crate::device::apply_kernel_settings(&loaded.manifest.run);
    let dag = StepDag::build(&loaded)?;
    let device = run_device(&loaded)?;
    // The classes: `model.nc`, else the dataset's (its YAML or class folders, no image read).
    let dataset = loaded.manifest.data.dataset.as_ref().map(|_| crate::data::config(&loaded));
    let dataset_nc = dataset.as_ref().and_then(|d| d.as_ref().ok()).map(|c| c.nc());
    let nc = loaded.manifest.model.nc.map(|n| n as usize).or(dataset_nc).unwrap_or(crate::network::DEFAULT_NC);
    let with_aux = loaded.manifest.model.aux_weight > 0.0;
    let (network, params) = crate::network::build(&loaded, nc, with_aux, &burn::tensor::Device::flex())?;
    if args.dry_run {
        let data = match &dataset {
            None => format!("no dataset (give `data=`); nc={nc} for the network below"),
            Some(Ok(c)) => format!("{} ({}, {} classes)", c.yaml.display(), dry_run::layout_name(c.layout), c.nc()),
            Some(Err(d)) => format!("cannot be read:\n{}", d.render(false)),
        };
        print!("{}", dry_run::report(&loaded, &dag, &device, &params, nc, &data));
        return Ok(());
    }
    // A dataset of the other task is refused before any split is scanned.
    if let Some(cfg) = dataset.transpose()? {
        crate::data::check_layout(&loaded, &cfg, crate::train::validate::Task::of(&network))?;
    }
    let m = &loaded.manifest;
    let launch = crate::distributed::launch().map_err(anyhow::Error::msg)?;
    if let Some(launch) = &launch {
        launch.check(crate::device::cuda_device_count()).map_err(anyhow::Error::msg)?;
    }
    let world = crate::distributed::world_size(launch.as_ref(), device.ids.len());
    if world > 1 {
        crate::distributed::require_nccl().map_err(anyhow::Error::msg)?;
        if launch.as_ref().is_none_or(|l| l.rank == 0)
            && let Some(w) = crate::distributed::sync_bn_warning(m.run.sync_bn, crate::train::nominal_batch(m.run.batch), world)
        {
            tracing::warn!("{w}");
        }
    }
    let summary = match launch {
        // A torchrun-style launch: this process is one rank, on cuda:LOCAL_RANK, whatever `device` says.
        Some(launch) => {
            if launch.world_size > 1 {
                let id = crate::distributed::rendezvous::exchange(&launch, std::time::Duration::from_secs(300), cubecl_cuda::nccl::nccl_mint_unique_id)
                    .map_err(anyhow::Error::msg)?;
                cubecl_cuda::nccl::nccl_use_unique_id(id).map_err(anyhow::Error::msg)?;
            }
            let ranks = crate::device::ResolvedDevice {
                backend: crate::device::Backend::Cuda,
                ids: (0..launch.world_size).collect(),
                reason: format!("rank {} of {} (RANK/WORLD_SIZE from the launcher)", launch.rank, launch.world_size),
            };
            let summary = crate::train::train_process(&loaded, &dag, &ranks, launch.rank)?;
            if launch.rank != 0 {
                return Ok(()); // rank 0 reports
            }
            summary
        }
        None => crate::train::train(&loaded, &dag, &device)?,
    };
    match &summary.last {
        Some(r) => println!(
            "done: {} epoch(s) in {}; last epoch {}{}",
            summary.epochs_run,
            summary.run_dir.display(),
            r.losses.iter().map(|(n, v)| format!("{n} {v:.4}")).collect::<Vec<_>>().join(" "),
            summary.best_fitness.map(|b| format!("; best {} {b:.4}", summary.fitness)).unwrap_or_default()
        ),
        None => println!("no epoch completed; run directory {}", summary.run_dir.display()),
    }
    if summary.interrupted {
        let name = summary.run_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        println!("interrupted: continue with `resume=true name={name}` (the run's settings come from its manifest.toml)");
    }
    Ok(())
}

/// Log lines on stderr, filtered by `LIBREYOLO_LOG` (tracing's directives); plain text when stderr
/// is a file, so logs of remote runs can be searched. The backend's launch-failure lines of a
/// capture pass are counted instead ([`crate::capture::quiet`]).
fn init_logging() {
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_env("LIBREYOLO_LOG").unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = subscriber(filter, std::io::stderr, std::io::IsTerminal::is_terminal(&std::io::stderr())).try_init();
}

/// The log set-up of [`init_logging`], writing to `writer`.
fn subscriber<W>(filter: tracing_subscriber::EnvFilter, writer: W, ansi: bool) -> impl tracing::Subscriber + Send + Sync
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use crate::capture::quiet;
    use tracing::subscriber::Interest;
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::{FilterExt, LevelFilter};
    use tracing_subscriber::layer::{Context, Filter, SubscriberExt};
    /// The lines a capture pass holds back (`Held(true)`), or the others (`Held(false)`).
    /// Whether a pass runs changes from one line to the next: nothing is cached per call site.
    struct Held(bool);
    impl<S> Filter<S> for Held {
        fn enabled(&self, m: &tracing::Metadata<'_>, _: &Context<'_, S>) -> bool {
            quiet::holds(m.target(), m.level()) == self.0
        }
        fn callsite_enabled(&self, _: &'static tracing::Metadata<'static>) -> Interest {
            Interest::sometimes()
        }
        // A hint either way: `And` with a filter of none has none, and a subscriber without one
        // hands every `log::trace!` of the backend to tracing (the log bridge's level follows it).
        fn max_level_hint(&self) -> Option<LevelFilter> {
            Some(if self.0 { LevelFilter::WARN } else { LevelFilter::TRACE })
        }
    }
    /// Counts the lines it is given.
    struct CountHeld;
    impl<S: tracing::Subscriber> Layer<S> for CountHeld {
        fn on_event(&self, _: &tracing::Event<'_>, _: Context<'_, S>) {
            quiet::count_held();
        }
    }
    let output = tracing_subscriber::fmt::layer().with_writer(writer).with_ansi(ansi).with_target(false).with_filter(filter.and(Held(false)));
    tracing_subscriber::registry().with(output).with(CountHeld.with_filter(Held(true)))
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_capture_pass_counts_the_backends_launch_failures_instead_of_printing_them() {
        let _turn = crate::capture::quiet::TEST_TURN.lock().unwrap_or_else(|e| e.into_inner());
        let buf = Buf::default();
        let writer = buf.clone();
        let subscriber = super::subscriber(tracing_subscriber::EnvFilter::new("info"), move || writer.clone(), false);
        // The level the log bridge and tracing's call sites check first stays LIBREYOLO_LOG's.
        assert_eq!(tracing::Subscriber::max_level_hint(&subscriber), Some(tracing_subscriber::filter::LevelFilter::INFO));
        let _ = tracing_log::LogTracer::init();
        let held = tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(target: "cubecl_runtime::logging::server", "launch failed before the pass");
            let ((), held) = crate::capture::quiet::holding(|| {
                for _ in 0..2 {
                    tracing::warn!(target: "cubecl_runtime::logging::server", "launch failed in the pass");
                }
                // The backend's own way: the `log` crate, bridged as `init_logging` bridges it.
                log::warn!(target: "cubecl_runtime::logging::server", "launch failed in the pass, through log");
                tracing::warn!(target: "libreyolo_run::step::record", "our own warning in the pass");
            });
            tracing::warn!(target: "cubecl_runtime::logging::server", "launch failed after the pass");
            held
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert_eq!(held, 3, "{text}");
        assert!(!text.contains("failed in the pass"), "{text}");
        for shown in ["failed before the pass", "our own warning in the pass", "failed after the pass"] {
            assert!(text.contains(shown), "{shown}: {text}");
        }
    }
}
