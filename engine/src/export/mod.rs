//! Export of a trained network for deployment (`libreyolo-run export`): the fused inference
//! graph as burn records it ([`graph`]), written as ONNX ([`onnx`]) with LibreYOLO's metadata.

pub mod graph;
pub mod onnx;

use std::path::Path;

use anyhow::Context;
use burn::tensor::FloatDType;
use libreyolo_families::{Network, ParamStore};
use libreyolo_stages::data::augment::resize::Resize;
use onnx_protobuf::Message;

/// A deployment format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Onnx,
}

impl Format {
    /// The formats this build writes.
    pub const NAMES: [&str; 1] = ["onnx"];

    /// LibreYOLO's name of a format (its spellings) as one this build writes.
    pub fn parse(name: &str) -> Result<Format, String> {
        match name.trim().to_ascii_lowercase().as_str() {
            "onnx" => Ok(Format::Onnx),
            other => Err(format!(
                "format={other} is not supported: this build exports {} (TensorRT, OpenVINO and the other runtimes build from the ONNX file)",
                Self::NAMES.join(", ")
            )),
        }
    }
}

/// The opsets an ONNX export can target: Resize and ReduceSum's input axes need 13, and
/// ReduceMean/ReduceMax move their axes to an input at 18.
pub const OPSETS: std::ops::RangeInclusive<i64> = 13..=17;

/// How to export.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    pub format: Format,
    /// Input size (height, width).
    pub imgsz: (u32, u32),
    /// f16 weights, input and arithmetic (the output stays f32).
    pub half: bool,
    /// A symbolic batch axis (LibreYOLO's default); otherwise `batch` images.
    pub dynamic: bool,
    pub batch: usize,
    pub opset: i64,
    /// LibreYOLO's embedded NMS (detectors, batch 1, not dynamic): the model's first output is
    /// then `(1, max_det, 6)` detections, its second the decode (`raw`).
    pub nms: Option<onnx::Nms>,
}

/// What the exported model says of itself, in LibreYOLO's `metadata_props` keys.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    pub family: String,
    pub size: String,
    /// `detect` or `classify`.
    pub task: &'static str,
    pub names: Vec<String>,
    /// The largest stride of a detector's maps (1 for a classifier).
    pub stride: usize,
    /// The input contract: a letterbox writes LibreYOLO's `letterbox_pad`, a stretch (its DETR
    /// families) writes none.
    pub resize: Resize,
}

impl ModelInfo {
    /// `network`'s: its task and largest stride, with `names` (one per class).
    pub fn new(network: &Network, family: &str, size: &str, names: Vec<String>) -> ModelInfo {
        let detector = network.head().as_detector();
        ModelInfo {
            family: family.into(),
            size: size.into(),
            task: if detector.is_some() { "detect" } else { "classify" },
            names,
            stride: detector.map_or(1, |d| d.strides().iter().copied().max().unwrap_or(1)),
            resize: Resize::Letterbox,
        }
    }
}

/// What an export wrote.
#[derive(Debug, Clone)]
pub struct Exported {
    pub nodes: usize,
    pub bytes: usize,
    /// Input and output shapes (batch first; `None` when dynamic).
    pub input: Vec<Option<usize>>,
    pub output: Vec<Option<usize>>,
}

/// Writes `network` with `params` to `out` as `options` asks (atomically: a temporary file
/// renamed into place).
pub fn export(network: &Network, params: &ParamStore, info: &ModelInfo, options: &ExportOptions, out: &Path) -> anyhow::Result<Exported> {
    let Format::Onnx = options.format;
    if !OPSETS.contains(&options.opset) {
        anyhow::bail!("opset={} is not supported: the exporter writes opsets {} to {}", options.opset, OPSETS.start(), OPSETS.end());
    }
    if options.nms.is_some() {
        if network.head().as_detector().is_none() {
            anyhow::bail!("nms=true applies to detectors; a {} model's output is class logits", info.task);
        }
        if network.detector("nms=true")?.labels() == libreyolo_families::block::Labels::TopK {
            anyhow::bail!("nms=true: a {} model needs no NMS (its postprocess is a top-k over its queries); export it without `nms`", info.family);
        }
        if options.dynamic || options.batch != 1 {
            anyhow::bail!("embedded NMS needs a fixed batch of 1 (dynamic=false batch=1), as LibreYOLO's");
        }
    }
    let batch = if options.dynamic { onnx::DYNAMIC_BATCH } else { options.batch };
    let (h, w) = (options.imgsz.0 as usize, options.imgsz.1 as usize);
    let dtype = options.half.then_some(FloatDType::F16);
    let captured = graph::record(network, params, [batch, 3, h, w], dtype)?;
    let onnx_options = onnx::OnnxOptions {
        opset: options.opset,
        dynamic_batch: options.dynamic,
        input_name: "images".into(),
        output_name: "output".into(),
        metadata: metadata(info, options),
        nms: options.nms,
    };
    let model = onnx::model(&captured, &onnx_options)?;
    let bytes = model.write_to_bytes().context("encoding the ONNX model")?;
    if let Some(dir) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    // Through a temporary file renamed into place: a crash leaves no partial model.
    crate::profile::artifacts::write_atomic(out, &bytes)?;
    let graph = model.graph.as_ref().expect("written above");
    let dims = |v: &onnx_protobuf::ValueInfoProto| -> Vec<Option<usize>> {
        let Some(onnx_protobuf::type_proto::Value::TensorType(t)) = &v.type_.value else { return vec![] };
        t.shape
            .dim
            .iter()
            .map(|d| match &d.value {
                Some(onnx_protobuf::tensor_shape_proto::dimension::Value::DimValue(n)) => Some(*n as usize),
                _ => None,
            })
            .collect()
    };
    Ok(Exported { nodes: graph.node.len(), bytes: bytes.len(), input: dims(&graph.input[0]), output: dims(&graph.output[0]) })
}

/// LibreYOLO's `metadata_props` (its keys and spellings: Python's `True`/`False`, JSON names),
/// plus `stride` and the exporting program.
fn metadata(info: &ModelInfo, o: &ExportOptions) -> Vec<(String, String)> {
    let names: serde_json::Map<String, serde_json::Value> = info.names.iter().enumerate().map(|(i, n)| (i.to_string(), n.clone().into())).collect();
    let py = |b: bool| if b { "True" } else { "False" }.to_string();
    let (h, w) = o.imgsz;
    [
        ("schema_version", "1.0".to_string()),
        ("exporter", format!("libreyolo-run {}", env!("CARGO_PKG_VERSION"))),
        ("model_family", info.family.clone()),
        ("size", info.size.clone()),
        ("model_size", info.size.clone()),
        ("task", info.task.to_string()),
        ("supported_tasks", serde_json::json!([info.task]).to_string()),
        ("default_task", info.task.to_string()),
        ("nc", info.names.len().to_string()),
        ("nb_classes", info.names.len().to_string()),
        ("names", serde_json::Value::Object(names).to_string()),
        ("imgsz", h.max(w).to_string()),
        ("imgsz_h", h.to_string()),
        ("imgsz_w", w.to_string()),
        ("stride", info.stride.to_string()),
        ("dynamic", py(o.dynamic)),
        ("precision", if o.half { "fp16" } else { "fp32" }.to_string()),
        ("half", py(o.half)),
        ("segmentation", "false".to_string()),
        ("obb", "false".to_string()),
    ]
    .into_iter()
    .chain((info.resize == Resize::Letterbox).then(|| ("letterbox_pad", "topleft".to_string())))
    .chain(o.nms.iter().flat_map(|n| {
        [
            ("nms", "true".to_string()),
            ("nms_conf", n.conf.to_string()),
            ("nms_iou", n.iou.to_string()),
            ("max_det", n.max_det.to_string()),
            ("nms_raw_output", "true".to_string()),
        ]
    }))
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}
