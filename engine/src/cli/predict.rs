//! `libreyolo-run predict MANIFEST weights=PATH source=IMAGE_OR_FOLDER [key=value ...]`.
//!
//! `source`, `conf`, `iou`, `max_det` and `out` belong to predict; every other `key=value` is a
//! manifest setting (`weights`, `imgsz`, `device`, `amp`, ...), validated like training's.

use std::path::PathBuf;

use clap::Args;

use super::Failure;
use crate::capture::{CaptureManager, GraphMode};
use crate::manifest;
use crate::predict::{self, PredictConfig};
use libreyolo_stages::val::nms::NmsConfig;

#[derive(Debug, Args)]
pub struct PredictArgs {
    /// The manifest describing the network (e.g. manifests/yolo9t.toml).
    #[arg(value_name = "MANIFEST")]
    manifest: PathBuf,
    /// `weights=PATH` and `source=PATH` (required), `conf=0.25`, `iou=0.45`, `max_det=300`,
    /// `out=DIR` (default runs/predict/predict, numbered), and manifest settings.
    #[arg(value_name = "KEY=VALUE")]
    settings: Vec<String>,
}

/// Predict's own settings, split off the manifest overrides.
struct Own {
    source: Option<PathBuf>,
    nms: super::Thresholds,
    out: Option<PathBuf>,
    cuda_graph: GraphMode,
}

fn split(settings: &[String]) -> anyhow::Result<(Own, Vec<String>)> {
    let mut own = Own { source: None, nms: Default::default(), out: None, cuda_graph: GraphMode::Off };
    let rest = super::split_settings(settings, |k, v| {
        if own.nms.take(k, v)? {
            return Ok(true);
        }
        match k {
            "source" => own.source = Some(PathBuf::from(v)),
            "out" => own.out = Some(PathBuf::from(v)),
            "cuda_graph" => own.cuda_graph = GraphMode::parse(v).map_err(anyhow::Error::msg)?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok((own, rest))
}

pub fn run(args: &PredictArgs) -> Result<(), Failure> {
    let (own, overrides) = split(&args.settings)?;
    let loaded = manifest::load(&args.manifest, &overrides)?;
    let m = &loaded.manifest;
    let Some(source) = own.source else {
        return Err(anyhow::anyhow!("predict needs `source=PATH` (an image or a folder of images)").into());
    };
    let weights = super::required_weights(&loaded, "predict")?;
    let files = predict::sources(&source)?;
    crate::kernel_cache::configure();
    let resolved = super::run_device(&loaded)?;
    let device = resolved.devices().remove(0);

    let (names, nc) = super::weights_classes(&loaded, &weights);
    let (network, params) = super::eval_network(&loaded, nc, &weights, &device)?;

    let precision = crate::train::precision::Precision::new(m, resolved.backend, &device)?;
    let cfg = PredictConfig {
        nms: NmsConfig { conf: own.nms.conf, iou: own.nms.iou, max_det: own.nms.max_det, max_candidates: m.val.max_candidates },
        imgsz: (m.run.imgsz.height(), m.run.imgsz.width()),
        resize: m.data.resize,
        compute: precision.compute,
        crop_pct: m.augment.crop_pct,
        interpolation: m.augment.interpolation,
    };
    let out = own.out.unwrap_or_else(|| {
        // Beside the training runs: runs/train -> runs/predict/predict, predict2, ...
        let runs = m.run.project.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(&m.run.project);
        crate::train::run_dir::numbered(&runs.join("predict"), "predict")
    });
    let start = std::time::Instant::now();
    // LibreYOLO's GraphRunner: at most 8 graphs; `true` captures a shape on first use, `auto`
    // on its third; a failure logs once and the rest runs eager.
    let mut graphs = match own.cuda_graph {
        GraphMode::Off => CaptureManager::disabled("predict forward", "cuda_graph=false".into()),
        _ if resolved.backend != crate::device::Backend::Cuda => {
            let reason = "device is not CUDA".to_string();
            tracing::warn!("cuda_graph requested but running eager for {} ({reason})", m.model.family);
            CaptureManager::disabled("predict forward", reason)
        }
        mode => CaptureManager::new("predict forward", mode.threshold(), 8),
    };
    let results = predict::run(&network, &params, &names, &files, &out, &device, &cfg, &mut graphs)?;
    if own.cuda_graph != GraphMode::Off {
        let info = graphs.info();
        let captured: Vec<String> = info.captured.iter().map(|g| format!("{:?} {} x{} replays", g.key.dims, g.key.dtype, g.replays)).collect();
        println!(
            "cuda_graph: {} graph(s) [{}], {} eager run(s){}",
            info.graph_count,
            captured.join("; "),
            info.eager_runs,
            info.fallback_reason.map(|r| format!(" ({r})")).unwrap_or_default()
        );
    }
    let n: usize = results.iter().filter_map(|r| r.detections.as_ref()).map(Vec::len).sum();
    for r in results.iter().filter(|r| r.top.is_some()) {
        let top: Vec<String> = r.top.iter().flatten().map(|c| format!("{} {:.2}", c.name, c.score)).collect();
        println!("{}: {}", r.image.display(), top.join(", "));
    }
    let found = if crate::train::validate::Task::of(&network) == crate::train::validate::Task::Classify {
        format!("top {} classes each", predict::TOP_K)
    } else {
        format!("{n} detection(s) (conf {}, iou {})", own.nms.conf, own.nms.iou)
    };
    println!(
        "predicted {} image(s) on {} in {:.2}s: {found}; wrote {}",
        results.len(),
        resolved.describe(),
        start.elapsed().as_secs_f64(),
        out.join("predictions.json").display()
    );
    Ok(())
}
