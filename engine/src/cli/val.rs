//! `libreyolo-run val MANIFEST weights=PATH [json=PATH] [save_json=PATH] [key=value ...]`: the
//! metrics of a set of weights on the dataset's `val` split, exactly as validation during
//! training computes them, like LibreYOLO's `model.val(data=...)`: for a detector COCO mAP
//! (letterbox, eval forward in the manifest's compute dtype, the head's candidates, class-aware
//! NMS, COCO evaluation), for a classifier top-1/top-5 accuracy (centre crop).
//!
//! `weights` takes our checkpoints (their EMA weights), safetensors state dicts with
//! LibreYOLO's key names, and LibreYOLO's own `.pt` checkpoints, so one validator can score
//! both engines' weights. Every other `key=value` is a manifest setting (`data`, `imgsz`,
//! `batch`, `device`, `precision.dtype`, `precision.amp=false` for f32, `val.conf`, ...).

use std::path::PathBuf;

use clap::Args;

use super::Failure;
use crate::data::{self, Split};
use crate::manifest;
use crate::train::{nominal_batch, precision::Precision, validate};

#[derive(Debug, Args)]
pub struct ValArgs {
    /// The manifest describing the network and the dataset (e.g. manifests/yolo9t.toml).
    #[arg(value_name = "MANIFEST")]
    manifest: PathBuf,
    /// `weights=PATH` (required), `json=PATH` (the metrics as JSON), `save_json=PATH` (every
    /// detection, in LibreYOLO's predictions.json form), and manifest settings.
    #[arg(value_name = "KEY=VALUE")]
    settings: Vec<String>,
}

pub fn run(args: &ValArgs) -> Result<(), Failure> {
    let (mut json, mut save_json) = (None, None);
    let overrides: Vec<String> = args
        .settings
        .iter()
        .filter(|s| match s.split_once('=') {
            Some(("json", path)) => {
                json = Some(PathBuf::from(path));
                false
            }
            Some(("save_json", path)) => {
                save_json = Some(PathBuf::from(path));
                false
            }
            _ => true,
        })
        .cloned()
        .collect();
    let loaded = manifest::load(&args.manifest, &overrides)?;
    let m = &loaded.manifest;
    let weights = super::required_weights(&loaded, "val")?;
    crate::kernel_cache::configure();
    let resolved = super::run_device(&loaded)?;
    let device = resolved.devices().remove(0);
    let cfg = data::config(&loaded)?;
    let nc = data::classes(&loaded, &cfg)?;
    if let Ok(state) = crate::train::checkpoint::read_state(&weights)
        && state.nc != nc
    {
        return Err(
            anyhow::anyhow!("weights={} were trained for {} classes, but the dataset `{}` has {nc}", weights.display(), state.nc, cfg.yaml.display()).into()
        );
    }
    let (network, params) = super::eval_network(&loaded, nc, &weights, &device)?;
    let task = validate::Task::of(&network);
    // Before the split is scanned: a dataset of the other task is an error at once.
    data::check_layout(&loaded, &cfg, task)?;
    let dataset = data::open(&loaded, &cfg, Split::Val)?;
    let precision = Precision::new(m, resolved.backend, &device)?;

    let loader = data::loader(&loaded, dataset.clone(), nominal_batch(m.run.batch), data::transforms(&loaded, cfg.layout).val, (0, 1));
    let nms = validate::nms_config(&m.val);
    let start = std::time::Instant::now();
    let out = validate::run(&network, &loader, &device, &nms, &mut |x| crate::capture::forward::run(&network, &params, precision.compute, x))?;
    let (seconds, dets, names) = (start.elapsed().as_secs_f64(), out.detections, task.metric_names());
    let detections = dets.len();
    let dtype = precision.compute.map(|d| format!("{d:?}")).unwrap_or_else(|| "F32".into());
    let found = if task == validate::Task::Detect { format!(", {detections} detections") } else { String::new() };
    println!("val: {} images of {} on {} ({dtype}){found} in {seconds:.1}s", dataset.len(), cfg.yaml.display(), resolved.describe());
    println!("  {}", task.summary(&out.metrics, 3, "  "));
    if let Some(path) = save_json {
        // LibreYOLO's predictions.json: image_id (the split's index), category_id (the class),
        // bbox [x, y, w, h] in original pixels, score.
        let rows: Vec<serde_json::Value> =
            dets.iter().map(|d| serde_json::json!({"image_id": d.image, "category_id": d.category, "bbox": d.bbox, "score": d.score})).collect();
        std::fs::write(&path, serde_json::to_string(&rows).map_err(anyhow::Error::from)?)
            .map_err(|e| anyhow::anyhow!("writing save_json={}: {e}", path.display()))?;
        println!("  wrote {} ({detections} detections)", path.display());
    }
    if let Some(path) = json {
        let metrics: serde_json::Map<String, serde_json::Value> =
            names.iter().zip(&out.metrics).map(|(name, v)| (format!("metrics/{name}"), serde_json::json!(v))).collect();
        let doc = serde_json::json!({
            "weights": weights, "data": cfg.yaml, "images": dataset.len(), "detections": detections,
            "compute_dtype": dtype, "seconds": seconds, "metrics": metrics,
        });
        std::fs::write(&path, serde_json::to_string_pretty(&doc).map_err(anyhow::Error::from)? + "\n")
            .map_err(|e| anyhow::anyhow!("writing json={}: {e}", path.display()))?;
        println!("  wrote {}", path.display());
    }
    Ok(())
}
