//! `libreyolo-run export MANIFEST weights=PATH [format=onnx] [imgsz=640] [half=false]
//! [dynamic=true] [batch=1] [opset=13] [nms=false conf=0.25 iou=0.45 max_det=300] [out=PATH]
//! [key=value ...]`.
//!
//! `format`, `half`, `dynamic`, `batch`, `opset`, `nms`, `conf`, `iou`, `max_det` and `out`
//! belong to export (LibreYOLO's names and defaults); every other `key=value` is a manifest
//! setting (`weights`, `imgsz`, ...).

use std::path::PathBuf;

use clap::Args;

use super::Failure;
use crate::export::{self, ExportOptions, Format, ModelInfo};
use crate::manifest;

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The manifest describing the network (e.g. manifests/yolo9t.toml).
    #[arg(value_name = "MANIFEST")]
    manifest: PathBuf,
    /// `weights=PATH` (required), `format=onnx`, `half=false`, `dynamic=true` (a symbolic batch
    /// axis), `batch=1` (when not dynamic), `opset=13`, `nms=false` (LibreYOLO's embedded NMS,
    /// with `conf=0.25`, `iou=0.45`, `max_det=300`; batch 1), `out=PATH` (default: the weights'
    /// path with the format's extension), and manifest settings such as `imgsz=640`.
    #[arg(value_name = "KEY=VALUE")]
    settings: Vec<String>,
}

/// Export's own settings, split off the manifest overrides.
struct Own {
    format: Format,
    half: bool,
    dynamic: bool,
    batch: usize,
    opset: i64,
    out: Option<PathBuf>,
    nms: bool,
    thresholds: super::Thresholds,
}

fn split(settings: &[String]) -> anyhow::Result<(Own, Vec<String>)> {
    let mut own = Own { format: Format::Onnx, half: false, dynamic: true, batch: 1, opset: 13, out: None, nms: false, thresholds: Default::default() };
    let rest = super::split_settings(settings, |k, v| {
        let boolean = || -> anyhow::Result<bool> {
            match v.trim().to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" => Ok(true),
                "false" | "0" | "no" => Ok(false),
                _ => anyhow::bail!("`{k}` expects true or false, got `{v}`"),
            }
        };
        let integer = || -> anyhow::Result<i64> {
            v.trim().parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| anyhow::anyhow!("`{k}` expects a positive integer, got `{v}`"))
        };
        if own.thresholds.take(k, v)? {
            return Ok(true);
        }
        match k {
            "format" => own.format = Format::parse(v).map_err(anyhow::Error::msg)?,
            "half" => own.half = boolean()?,
            "dynamic" => own.dynamic = boolean()?,
            "batch" => own.batch = integer()? as usize,
            "opset" => own.opset = integer()?,
            "out" | "output_path" => own.out = Some(PathBuf::from(v)),
            "nms" => own.nms = boolean()?,
            "simplify" => {} // LibreYOLO's onnxsim pass: the recorded graph has nothing to simplify.
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok((own, rest))
}

pub fn run(args: &ExportArgs) -> Result<(), Failure> {
    let (own, overrides) = split(&args.settings)?;
    let loaded = manifest::load(&args.manifest, &overrides)?;
    let m = &loaded.manifest;
    let weights = super::required_weights(&loaded, "export")?;
    let (names, nc) = super::weights_classes(&loaded, &weights);
    // The graph is recorded, never run: the weights stay on the CPU whatever `device` says.
    let (network, params) = super::eval_network(&loaded, nc, &weights, &burn::tensor::Device::flex())?;
    let names = (0..nc).map(|i| names.get(i).cloned().unwrap_or_else(|| i.to_string())).collect();
    let info = ModelInfo { resize: m.data.resize, ..ModelInfo::new(&network, &m.model.family, &m.model.size, names) };
    // The manifest's loader has checked that imgsz is a multiple of the network's stride.
    let (h, w) = (m.run.imgsz.height(), m.run.imgsz.width());
    let dynamic = own.dynamic && !own.nms;
    if own.dynamic && own.nms {
        tracing::warn!("embedded NMS uses a fixed batch-1 graph: exporting with dynamic=false");
    }
    let nms = own.nms.then_some(export::onnx::Nms { conf: own.thresholds.conf, iou: own.thresholds.iou, max_det: own.thresholds.max_det });
    let options = ExportOptions { format: own.format, imgsz: (h, w), half: own.half, dynamic, batch: own.batch, opset: own.opset, nms };
    let out = own.out.unwrap_or_else(|| weights.with_extension("onnx"));
    let start = std::time::Instant::now();
    let done = export::export(&network, &params, &info, &options, &out)?;
    let shape = |d: &[Option<usize>]| d.iter().map(|x| x.map_or("batch".to_string(), |n| n.to_string())).collect::<Vec<_>>().join("x");
    println!(
        "exported {} {} to {} in {:.1}s: {} nodes, {:.1} MB, images {} -> output {}{}{}",
        m.model.family,
        m.model.size,
        out.display(),
        start.elapsed().as_secs_f64(),
        done.nodes,
        done.bytes as f64 / 1e6,
        shape(&done.input),
        shape(&done.output),
        if own.half { " (f16)" } else { "" },
        if own.nms { " + raw (embedded NMS)" } else { "" }
    );
    Ok(())
}
