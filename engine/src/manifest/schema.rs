//! The manifest schema: every setting a run reads, with LibreYOLO's YOLOv9 defaults.
//!
//! Sections deny unknown keys, so a typo is an error (with a suggestion) instead of a silently
//! ignored setting. Defaults follow `YOLO9Config` of LibreYOLO 1.6 (reference section a).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::values::{AmpDtype, CacheMode, DeviceRequest, ImgSize, LabelRowsSetting, Optimizer, Scheduler};

/// One training run: settings, the network, and the step DAG.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    #[serde(default)]
    pub run: RunSettings,
    #[serde(default)]
    pub data: DataSettings,
    pub model: ModelSettings,
    #[serde(default)]
    pub precision: PrecisionSettings,
    #[serde(default)]
    pub optim: OptimSettings,
    #[serde(default)]
    pub schedule: ScheduleSettings,
    #[serde(default)]
    pub ema: EmaSettings,
    #[serde(default)]
    pub augment: AugmentSettings,
    /// Settings of the loss stage's kind (its own section: `loss.yolo9`'s gains and assigner),
    /// checked by that kind when the DAG is built.
    #[serde(default)]
    pub loss: toml::Table,
    #[serde(default)]
    pub val: ValSettings,
    #[serde(default)]
    pub capture: CaptureSettings,
    #[serde(default)]
    pub profile: ProfileSettings,
    /// The step DAG, in manifest order (`[[stage]]` tables).
    #[serde(rename = "stage")]
    pub stages: Vec<StageSpec>,
}

/// `[run]`: the run as a whole.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunSettings {
    pub epochs: u32,
    /// Global batch (split across GPUs); -1 asks for AutoBatch.
    pub batch: i64,
    pub imgsz: ImgSize,
    pub device: DeviceRequest,
    pub seed: u64,
    /// Runs are written to `project/name`.
    pub project: PathBuf,
    pub name: String,
    pub exist_ok: bool,
    pub resume: bool,
    pub patience: u32,
    pub save_period: u32,
    /// Multi-GPU: BatchNorm statistics all-reduced across ranks (on for YOLOv9, as LibreYOLO).
    pub sync_bn: bool,
    /// Bit-reproducible training on CUDA (Ultralytics' `deterministic`): full sums reduce in a
    /// fixed order instead of with float atomics, so two runs of the same settings on the same
    /// GPU give the same weights. ~3% slower (H200, YOLOv9-t b8 whole step).
    pub deterministic: bool,
    /// The weight gradient's kernel on tensor cores (`WeightGradientKernel`): `"vectors"`
    /// (default), `"gather"` or `"cuda-cores"`.
    pub weight_gradient: super::values::WeightGradientKernel,
}

impl Default for RunSettings {
    fn default() -> Self {
        Self {
            epochs: 300,
            batch: 16,
            imgsz: ImgSize::Square(640),
            device: DeviceRequest::Auto,
            seed: 0,
            project: PathBuf::from("runs/train"),
            name: "exp".into(),
            exist_ok: false,
            resume: false,
            patience: 50,
            save_period: 10,
            sync_bn: true,
            deterministic: false,
            weight_gradient: super::values::WeightGradientKernel::Vectors,
        }
    }
}

/// `[data]`: where the images come from and how they are loaded.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataSettings {
    /// A LibreYOLO / Ultralytics dataset YAML, relative to the manifest's folder; the shipped
    /// manifests leave it to the command line (`data=path/to/data.yaml`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<PathBuf>,
    #[serde(default = "defaults::workers")]
    pub workers: usize,
    #[serde(default)]
    pub cache: CacheMode,
    /// Per-image cap on ground-truth boxes (the rest are dropped, and counted).
    #[serde(default = "defaults::max_labels")]
    pub max_labels: usize,
    /// How many target rows a training batch holds: `max_labels` ("fixed"), its largest label
    /// count rounded up to a power of two ("batch"), or "auto": fixed when the step is captured.
    #[serde(default)]
    pub label_rows: LabelRowsSetting,
    /// How an image meets the input in training, validation and predict: "letterbox" (the
    /// default) or "stretch" (LibreYOLO's DETR families).
    #[serde(default)]
    pub resize: libreyolo_stages::data::augment::resize::Resize,
    /// Benchmarks: every step trains on the epoch's first batch again (the step time in
    /// isolation, without the loader; LibreYOLO's documented way of timing a step).
    #[serde(default)]
    pub fixed_batch: bool,
}

impl Default for DataSettings {
    fn default() -> Self {
        Self {
            dataset: None,
            workers: defaults::workers(),
            cache: CacheMode::default(),
            max_labels: defaults::max_labels(),
            label_rows: LabelRowsSetting::default(),
            resize: Default::default(),
            fixed_batch: false,
        }
    }
}

/// `[model]`: which network to build.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSettings {
    pub family: String,
    /// Size label of the topology (`t`, `s`, ...), recorded in checkpoints.
    pub size: String,
    /// Number of classes; taken from the dataset when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nc: Option<u32>,
    /// Initial weights (safetensors with LibreYOLO key names); random init when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<PathBuf>,
    /// Weight of the PGI auxiliary head's loss; 0 removes the branch.
    #[serde(default = "defaults::aux_weight")]
    pub aux_weight: f64,
    /// Parameters not trained (torch's `requires_grad = False`): those whose name matches one
    /// of these regular expressions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub freeze: Vec<String>,
    /// The topology: layers in order, each a block of the family's library.
    pub layers: Vec<libreyolo_families::LayerSpec>,
}

/// `[precision]`: mixed precision.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PrecisionSettings {
    /// Mixed precision on CUDA (compute in `dtype`, f32 master weights). Ignored on CPU.
    pub amp: bool,
    pub dtype: AmpDtype,
}

impl Default for PrecisionSettings {
    fn default() -> Self {
        Self { amp: true, dtype: AmpDtype::Fp16 }
    }
}

/// `[optim]`: the optimizer stage.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OptimSettings {
    pub optimizer: Optimizer,
    pub lr0: f64,
    pub momentum: f64,
    pub weight_decay: f64,
    pub nesterov: bool,
    /// Nominal batch size for gradient accumulation (`round(nbs / batch)` micro-batches).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nbs: Option<u32>,
    /// Global gradient-norm clipping; 0 turns it off.
    pub clip_max_norm: f64,
    /// Parameter groups (`[[optim.groups]]`, stages/src/optim/groups.rs); none: weight decay by
    /// role.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<ParamGroup>,
}

impl Default for OptimSettings {
    fn default() -> Self {
        Self { optimizer: Optimizer::Sgd, lr0: 0.01, momentum: 0.937, weight_decay: 5e-4, nesterov: true, nbs: None, clip_max_norm: 0.0, groups: vec![] }
    }
}

/// One `[[optim.groups]]` entry: the parameters whose names match every regular expression of
/// `names` take its learning-rate scale and weight decay (first group wins).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamGroup {
    pub names: Vec<String>,
    #[serde(default = "unit_scale")]
    pub lr_scale: f64,
    /// The base `optim.weight_decay` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_decay: Option<f64>,
}

fn unit_scale() -> f64 {
    1.0
}

/// `[schedule]`: learning-rate and momentum schedule, advanced after every optimizer step.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScheduleSettings {
    pub scheduler: Scheduler,
    pub warmup_epochs: f64,
    pub warmup_lr_start: f64,
    pub warmup_momentum: f64,
    pub min_lr_ratio: f64,
}

impl Default for ScheduleSettings {
    fn default() -> Self {
        Self { scheduler: Scheduler::Linear, warmup_epochs: 3.0, warmup_lr_start: 1e-4, warmup_momentum: 0.8, min_lr_ratio: 0.01 }
    }
}

/// `[ema]`: exponential moving average of all float state.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmaSettings {
    pub enabled: bool,
    /// Final decay; the effective decay is `decay * (1 - exp(-updates / tau))`.
    pub decay: f64,
    pub tau: f64,
}

impl Default for EmaSettings {
    fn default() -> Self {
        Self { enabled: true, decay: 0.9999, tau: 2000.0 }
    }
}

/// `[augment]`: training augmentation.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AugmentSettings {
    #[serde(alias = "mosaic")]
    pub mosaic_prob: f64,
    #[serde(alias = "mixup")]
    pub mixup_prob: f64,
    /// Whose augmentation pipeline: "yolo9" (LibreYOLO's YOLOv9, the default) or "yolox" — its
    /// MixUp and box filters.
    pub pipeline: libreyolo_stages::data::sample::Pipeline,
    pub degrees: f64,
    pub translate: f64,
    pub shear: f64,
    pub perspective: f64,
    pub mosaic_scale: [f64; 2],
    pub mixup_scale: [f64; 2],
    pub hsv_prob: f64,
    #[serde(alias = "fliplr")]
    pub flip_prob: f64,
    pub flipud: f64,
    /// Mosaic is closed for the last this-many epochs.
    pub no_aug_epochs: u32,
    /// Classification: the random resized crop's area range (LibreYOLO's `scale`).
    pub crop_scale: [f64; 2],
    /// Classification: evaluation resizes to `imgsz / crop_pct`, then centre-crops.
    pub crop_pct: f64,
    /// Classification: how the crops are resampled ("bilinear" | "bicubic").
    pub interpolation: libreyolo_stages::data::image::Interpolation,
}

impl Default for AugmentSettings {
    fn default() -> Self {
        Self {
            mosaic_prob: 1.0,
            mixup_prob: 0.0,
            pipeline: Default::default(),
            degrees: 0.0,
            translate: 0.1,
            shear: 0.0,
            perspective: 0.0,
            mosaic_scale: [0.5, 1.5],
            mixup_scale: [0.5, 1.5],
            hsv_prob: 1.0,
            flip_prob: 0.5,
            flipud: 0.0,
            no_aug_epochs: 15,
            crop_scale: [0.5, 1.0],
            crop_pct: libreyolo_stages::data::classify::CROP_PCT,
            interpolation: Default::default(),
        }
    }
}

/// `[val]`: validation during and after training.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ValSettings {
    pub enabled: bool,
    /// Validate every this-many epochs (and at the end).
    pub eval_interval: u32,
    pub conf: f64,
    pub iou: f64,
    pub max_det: usize,
    /// Candidates kept before NMS.
    pub max_candidates: usize,
}

impl Default for ValSettings {
    fn default() -> Self {
        Self { enabled: true, eval_interval: 10, conf: 0.001, iou: 0.65, max_det: 300, max_candidates: 30000 }
    }
}

/// `[capture]`: CUDA-graph capture of the stages marked `capture = true`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CaptureSettings {
    /// `true`, `false`, or `"auto"` (captured on CUDA, eager elsewhere).
    pub enabled: super::values::CaptureMode,
    /// A segment is captured once its input shape has been seen this many times.
    pub threshold: u32,
    /// Most graphs kept alive at once (one per input shape and segment).
    pub max_graphs: u32,
    /// LibreYOLO's `compile` (`compile=`): `false`, `true`, or a torch.compile mode, mapped to
    /// this engine's kernel selection, fusion search and capture (`crate::compile`).
    pub compile: super::values::CompileMode,
}

impl Default for CaptureSettings {
    fn default() -> Self {
        Self { enabled: super::values::CaptureMode::Auto, threshold: 3, max_graphs: 1, compile: super::values::CompileMode::Off }
    }
}

/// `[profile]`: the training profiler's window.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProfileSettings {
    pub enabled: bool,
    /// Steps run and discarded before measuring.
    pub warmup: u32,
    /// Measured steps: the first half unsynchronised, the second half synced per phase.
    pub steps: u32,
    pub trace: bool,
    /// Stop the run once the window is measured.
    pub then_stop: bool,
}

impl Default for ProfileSettings {
    fn default() -> Self {
        Self { enabled: false, warmup: 5, steps: 20, trace: true, then_stop: false }
    }
}

/// One `[[stage]]` of the step DAG.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageSpec {
    pub name: String,
    pub kind: String,
    /// Values this stage reads, as `stage.output` (or `stage` for its only output).
    #[serde(default)]
    pub inputs: Vec<String>,
    /// Replay this stage inside a CUDA graph when capture is on.
    #[serde(default)]
    pub capture: bool,
    /// Run events after which this captured stage computes something else, so the graphs
    /// holding it are dropped and captured again at the threshold (LibreYOLO's
    /// `invalidate_cuda_graph`; YOLOX's loss gains its L1 branch at `mosaic_close`).
    #[serde(default)]
    pub recapture_on: Vec<String>,
    /// `network.forward` only: a seam inside the network after this layer. The capture holds
    /// the layers up to it (forward and backward); the layers after it run eagerly with the
    /// loss, between the graphs (e.g. the backbone and neck captured, the heads eager).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

mod defaults {
    pub fn workers() -> usize {
        8
    }
    pub fn max_labels() -> usize {
        300
    }
    pub fn aux_weight() -> f64 {
        0.25
    }
}

/// The settings sections (every top-level table but the step DAG).
pub fn sections() -> impl Iterator<Item = &'static str> {
    super::introspect::fields_of::<Manifest>().iter().copied().filter(|s| *s != "stage")
}

/// The keys of a settings section, read from its struct.
pub fn section_keys(section: &str) -> Option<Vec<&'static str>> {
    use super::introspect::fields_of;
    // A section a stage kind owns: the keys of every built-in kind that reads it.
    let owned: Vec<&'static str> =
        libreyolo_stages::kinds::builtin().kinds().filter_map(|k| k.settings.filter(|s| s.section == section)).flat_map(|s| s.keys.iter().copied()).collect();
    if !owned.is_empty() {
        return Some(owned);
    }
    Some(
        match section {
            "run" => fields_of::<RunSettings>(),
            "data" => fields_of::<DataSettings>(),
            "model" => fields_of::<ModelSettings>(),
            "precision" => fields_of::<PrecisionSettings>(),
            "optim" => fields_of::<OptimSettings>(),
            "schedule" => fields_of::<ScheduleSettings>(),
            "ema" => fields_of::<EmaSettings>(),
            "augment" => fields_of::<AugmentSettings>(),
            "val" => fields_of::<ValSettings>(),
            "capture" => fields_of::<CaptureSettings>(),
            "profile" => fields_of::<ProfileSettings>(),
            _ => return None,
        }
        .to_vec(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_section_lists_its_keys() {
        for section in sections() {
            let keys = section_keys(section).unwrap_or_else(|| panic!("section_keys misses [{section}]"));
            assert!(!keys.is_empty(), "[{section}] has no keys");
        }
        assert!(section_keys("run").unwrap().contains(&"epochs"));
    }
}
