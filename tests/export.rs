//! `export` against an ONNX runtime independent of burn (tract): the exported model of each
//! family, run by tract, gives what our eval forward (`predict`'s raw output) gives on the parity
//! fixtures' images, and the same detections after NMS; its metadata is LibreYOLO's; unsupported
//! formats and opsets are clear errors.
//!
//! Only the fixtures' images: the fixtures' weights are a perturbed random initialisation, not
//! trained ones, and on natural images YOLOv9-t's maps grow to ~1e15, where f32 rounding alone flips
//! class logits, so a comparison there tests nothing.

use std::path::{Path, PathBuf};

use burn::tensor::{Device, FloatDType, Tensor};
use libreyolo_families::{Ctx, Network, ParamStore};
use libreyolo_run::export::{self, ExportOptions, Format, ModelInfo};
use libreyolo_run::parity::fixture::{self, Fixture, fixture_network, max_abs_diff, project_dir};
use libreyolo_stages::val::nms::{self, Det, NmsConfig};
use onnx_protobuf::Message;
use tract_onnx::prelude::{self as tract, DatumExt, Framework, InferenceModelExt, IntoRunnable, tvec};

fn options(imgsz: u32, dynamic: bool, batch: usize) -> ExportOptions {
    ExportOptions { format: Format::Onnx, imgsz: (imgsz, imgsz), half: false, dynamic, batch, opset: 13, nms: None }
}

fn info(network: &Network, family: &str) -> ModelInfo {
    let names = (0..network.head().nc()).map(|i| format!("class{i}")).collect();
    ModelInfo::new(network, family, "t", names)
}

/// The exported model's output on `images` as tract computes it.
fn tract_run(path: &Path, images: &Tensor<4>) -> (Vec<usize>, Vec<f32>) {
    tract_outputs(path, images).swap_remove(0)
}

/// Every output of the model on `images`, in order.
fn tract_outputs(path: &Path, images: &Tensor<4>) -> Vec<(Vec<usize>, Vec<f32>)> {
    let dims = images.dims();
    let input = tract::tract_ndarray::Array4::from_shape_vec((dims[0], dims[1], dims[2], dims[3]), fixture::read(images).1).unwrap();
    run_model(path, f32::fact(dims), tract::Tensor::from(input))
}

/// The same for a half-precision model: the images as f16.
fn tract_run_half(path: &Path, images: &Tensor<4>) -> (Vec<usize>, Vec<f32>) {
    let dims = images.dims();
    let values = fixture::read(images).1.into_iter().map(tract::f16::from_f32).collect();
    let input = tract::tract_ndarray::Array4::from_shape_vec((dims[0], dims[1], dims[2], dims[3]), values).unwrap();
    run_model(path, tract::f16::fact(dims), tract::Tensor::from(input)).swap_remove(0)
}

fn run_model(path: &Path, fact: tract::TypedFact, input: tract::Tensor) -> Vec<(Vec<usize>, Vec<f32>)> {
    let model = tract_onnx::onnx().model_for_path(path).unwrap().with_input_fact(0, fact.into()).unwrap().into_optimized().unwrap().into_runnable().unwrap();
    let out = model.run(tvec!(input.into())).unwrap();
    out.iter()
        .map(|o| {
            let view = o.to_plain_array_view::<f32>().unwrap();
            (view.shape().to_vec(), view.iter().copied().collect())
        })
        .collect()
}

/// Our eval output: the fused forward `predict` runs, then what the export ends with.
fn ours(network: &Network, params: &ParamStore, images: &Tensor<4>) -> (Vec<usize>, Vec<f32>) {
    let cx = Ctx::eval_fused(params, None);
    let maps = network.forward(images.clone(), &cx, false).main;
    if network.head().as_classifier().is_some() {
        let [b, nc, _, _] = maps[0].dims();
        let (shape, v) = fixture::read(&maps[0].clone().reshape([b, nc]));
        return (shape, v);
    }
    let [_, _, h, w] = images.dims();
    fixture::read(&network.head().eval(&maps, [h, w]).cast(FloatDType::F32))
}

fn export_to(dir: &Path, name: &str, network: &Network, params: &ParamStore, family: &str, o: &ExportOptions) -> PathBuf {
    let path = dir.join(format!("{name}.onnx"));
    export::export(network, params, &info(network, family), o, &path).unwrap_or_else(|e| panic!("{name}: {e:#}"));
    path
}

/// Detections of each image of a `(B, 4 + nc, A)` output at predict's thresholds.
fn detections(network: &Network, shape: &[usize], values: &[f32], imgsz: u32) -> Vec<Vec<Det>> {
    let (nc, a) = (shape[1] - 4, shape[2]);
    let cfg = NmsConfig { conf: 0.25, iou: 0.45, max_det: 300, max_candidates: 30_000 };
    let labels = network.detector("the test").unwrap().labels();
    values.chunks(shape[1] * a).map(|pred| nms::detect(pred, nc, labels, a, [1.0; 2], (imgsz, imgsz), &cfg)).collect()
}

/// Asserts that each image's detections in `a` and `b` are the same set (class, score to 1e-4,
/// box to 1e-2 px), in any order: near-equal scores (a few 1e-6 apart) may swap places between
/// two runtimes' roundings. Returns the number of detections.
fn same_detections(a: &[Vec<Det>], b: &[Vec<Det>]) -> usize {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.len(), y.len(), "detection counts differ");
        let mut unmatched: Vec<&Det> = y.iter().collect();
        for p in x {
            let same = |q: &&Det| p.class == q.class && (p.score - q.score).abs() < 1e-4 && p.xyxy.iter().zip(q.xyxy).all(|(u, v)| (u - v).abs() < 1e-2);
            let at = unmatched.iter().position(same).unwrap_or_else(|| panic!("{p:?} has no counterpart"));
            unmatched.swap_remove(at);
        }
    }
    a.iter().map(Vec::len).sum()
}

fn yolo9t_fixture() -> (Network, ParamStore, Fixture) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let loaded = libreyolo_run::manifest::load(&root.join("manifests/yolo9t.toml"), &[]).unwrap();
    let (network, mut params) = libreyolo_run::network::build(&loaded, 80, false, &Device::flex()).unwrap();
    libreyolo_families::weights::load_safetensors(&mut params, &fixture::default_dir().join("yolo9t_nc80.safetensors"), false).unwrap();
    (network, params, Fixture::io(&fixture::default_dir()).unwrap())
}

/// YOLOv9-t with LibreYOLO's fixture weights: tract runs the batch-dynamic export on the
/// fixture's two images (LibreYOLO's own decode is in the fixture too) and a static batch-1
/// export on each; every output is within 1e-4 of our eval forward and the detections match.
#[test]
fn yolo9t_export_matches_our_eval_and_libreyolo_on_the_fixture_images() {
    let dir = tempfile::tempdir().unwrap();
    let (network, params, io) = yolo9t_fixture();
    let images = io.images(&Device::flex());
    let imgsz = images.dims()[2] as u32;
    let dynamic = export_to(dir.path(), "dynamic", &network, &params, "yolo9", &options(imgsz, true, 1));
    let (want_shape, want) = ours(&network, &params, &images);
    let (shape, got) = tract_run(&dynamic, &images);
    assert_eq!(shape, want_shape);
    let diff = max_abs_diff(&got, &want);
    assert!(diff <= 1e-4, "tract vs our eval: max |diff| {diff}");
    let libreyolo = max_abs_diff(&got, &io.get("eval_pred").to_f32());
    assert!(libreyolo <= 1e-4, "tract vs LibreYOLO's eval_pred: max |diff| {libreyolo}");
    let n = same_detections(&detections(&network, &shape, &got, imgsz), &detections(&network, &want_shape, &want, imgsz));
    assert!(n > 0, "no detections to compare");

    let single = export_to(dir.path(), "static", &network, &params, "yolo9", &options(imgsz, false, 1));
    let row = want.len() / 2;
    for i in 0..2 {
        let one = images.clone().narrow(0, i, 1);
        let (shape, got) = tract_run(&single, &one);
        assert_eq!(shape, [1, want_shape[1], want_shape[2]]);
        let diff = max_abs_diff(&got, &want[i * row..(i + 1) * row]);
        assert!(diff <= 1e-4, "static export, image {i}: max |diff| {diff}");
    }
}

/// `half=true`: f16 input and arithmetic, f32 output, at f16's precision of the f32 model
/// (boxes to 0.25 px on a 256 px image, scores to 2e-3).
#[test]
fn yolo9t_half_export_runs_in_f16() {
    let dir = tempfile::tempdir().unwrap();
    let (network, params, io) = yolo9t_fixture();
    // One image: tract's f16 convolutions on the CPU are slow (~30 s an image).
    let images = io.images(&Device::flex()).narrow(0, 0, 1);
    let imgsz = images.dims()[2] as u32;
    let mut o = options(imgsz, true, 1);
    o.half = true;
    let path = export_to(dir.path(), "half", &network, &params, "yolo9", &o);
    let (want_shape, want) = ours(&network, &params, &images);
    let (shape, got) = tract_run_half(&path, &images);
    assert_eq!(shape, want_shape);
    let (boxes, scores) = worst_boxes_and_scores(&got, &want, &shape);
    assert!(boxes <= 0.25 && scores <= 2e-3, "f16 export vs f32 eval: boxes {boxes} px, scores {scores}");
    let f32_bytes = std::fs::metadata(export_to(dir.path(), "full", &network, &params, "yolo9", &options(imgsz, true, 1))).unwrap().len();
    let f16_bytes = std::fs::metadata(&path).unwrap().len();
    assert!(f16_bytes * 10 < f32_bytes * 6, "f16 weights: {f16_bytes} bytes vs {f32_bytes}");
}

/// `nms=true` (LibreYOLO's embedded NMS, batch 1): the first output's rows are the detections
/// `predict`'s NMS finds on the second output (the decode), best first, then zeros.
#[test]
fn yolo9t_embedded_nms_gives_predicts_detections() {
    let dir = tempfile::tempdir().unwrap();
    let (network, params, io) = yolo9t_fixture();
    let imgsz = io.images(&Device::flex()).dims()[2] as u32;
    let cfg = NmsConfig { conf: 0.37, iou: 0.45, max_det: 300, max_candidates: 30_000 };
    let mut o = options(imgsz, false, 1);
    o.nms = Some(export::onnx::Nms { conf: cfg.conf, iou: cfg.iou, max_det: cfg.max_det });
    let path = export_to(dir.path(), "nms", &network, &params, "yolo9", &o);
    let labels = network.detector("the test").unwrap().labels();
    for i in 0..2 {
        let image = io.images(&Device::flex()).narrow(0, i, 1);
        let mut outputs = tract_outputs(&path, &image);
        let (raw_shape, raw) = outputs.pop().unwrap();
        let (shape, rows) = outputs.pop().unwrap();
        assert_eq!(shape, [1, 300, 6]);
        let want = nms::detect(&raw, raw_shape[1] - 4, labels, raw_shape[2], [1.0; 2], (imgsz, imgsz), &cfg);
        assert!(!want.is_empty() && want.len() < 300, "image {i}: {} detections; the test wants some, fewer than max_det", want.len());
        let got: Vec<Det> = rows.chunks(6).filter(|r| r[4] > 0.0).map(|r| Det { xyxy: [r[0], r[1], r[2], r[3]], score: r[4], class: r[5] as usize }).collect();
        assert!(got.windows(2).all(|w| w[0].score >= w[1].score), "best first");
        assert!(rows[got.len() * 6..].iter().all(|&x| x == 0.0), "zeros after the detections");
        same_detections(&[got], &[want]);
    }
}

/// COCO128 images letterboxed as `predict` does (320x320, batch 4) through YOLOv9-t with the
/// fixture's weights, its BatchNorms recalibrated on those images (see [`calibrate`]).
#[test]
fn yolo9t_export_matches_our_eval_on_coco128_images() {
    let dir = tempfile::tempdir().unwrap();
    let (network, mut params, _) = yolo9t_fixture();
    let images_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/coco128/images/train2017");
    let mut files: Vec<_> = std::fs::read_dir(&images_dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let cfg = libreyolo_run::predict::PredictConfig {
        nms: NmsConfig { conf: 0.25, iou: 0.45, max_det: 300, max_candidates: 30_000 },
        imgsz: (320, 320),
        resize: Default::default(),
        compute: None,
        crop_pct: 1.0,
        interpolation: Default::default(),
    };
    let decode = |f: &PathBuf| libreyolo_run::predict::preprocess(&libreyolo_stages::data::image::decode(f).unwrap(), &Device::flex(), &cfg).0;
    let images = Tensor::cat(files.iter().take(4).map(decode).collect(), 0);
    calibrate(&network, &mut params, &images);
    let path = export_to(dir.path(), "coco", &network, &params, "yolo9", &options(320, true, 1));
    let (want_shape, want) = ours(&network, &params, &images);
    let (shape, got) = tract_run(&path, &images);
    assert_eq!(shape, want_shape);
    // Scores to 1e-4; boxes to 1e-4 of the largest stride: a box side is a DFL expectation
    // (0 to 15) times its map's stride, so the expectation's rounding (~1e-5 between two
    // runtimes' accumulation orders) comes out up to 32 times larger in pixels.
    let (boxes, scores) = worst_boxes_and_scores(&got, &want, &shape);
    assert!(scores <= 1e-4 && boxes <= 32e-4, "tract vs our eval on COCO128: boxes {boxes} px, scores {scores}");
    let n = same_detections(&detections(&network, &shape, &got, 320), &detections(&network, &want_shape, &want, 320));
    assert!(n > 0, "no detections to compare");
}

/// The max |difference| of two `(B, 4 + nc, A)` outputs on the box rows and on the score rows.
fn worst_boxes_and_scores(a: &[f32], b: &[f32], shape: &[usize]) -> (f64, f64) {
    let (rows, anchors) = (shape[1], shape[2]);
    let mut worst = (0f64, 0f64);
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let d = (*x as f64 - *y as f64).abs();
        let slot = if (i / anchors) % rows < 4 { &mut worst.0 } else { &mut worst.1 };
        *slot = slot.max(d);
    }
    worst
}

/// Sets every BatchNorm's running statistics to its batch statistics on `images` (a training
/// forward, momentum 1), so that the eval forward on them is the training forward's, with every
/// layer's output normalised. The fixture's weights are a perturbed random initialisation made
/// for its own (synthetic) images: on natural images their maps grow to ~1e15, where f32
/// rounding alone decides class scores and no comparison means anything.
fn calibrate(network: &Network, params: &mut ParamStore, images: &Tensor<4>) {
    let cx = Ctx::train(params);
    drop(network.forward(images.clone(), &cx, false));
    let mut stats = cx.take_batch_stats();
    assert!(!stats.is_empty());
    stats.iter_mut().for_each(|s| s.momentum = 1.0);
    drop(cx);
    params.apply_batch_stats(stats);
}

/// YOLOX, ResNet, MobileNetV4 and RT-DETR (the narrow parity networks with LibreYOLO's
/// weights): the export's output on the fixture images is our eval's, and for the classifiers
/// LibreYOLO's logits.
#[test]
fn every_family_exports_and_runs_in_tract() {
    let dir = tempfile::tempdir().unwrap();
    for (name, io_name, family) in [
        ("yolox_narrow", "yolox_narrow_io", "yolox"),
        ("resnet_narrow", "resnet_narrow_io", "resnet"),
        ("mobilenetv4_narrow", "mobilenetv4_narrow_io", "mobilenetv4"),
        ("rtdetr_narrow", "rtdetr_narrow_io", "rtdetr"),
    ] {
        let io = Fixture::open(&project_dir().join(format!("{io_name}.safetensors"))).unwrap();
        // The YOLOX fixture has 3 classes; the others, as many as their logits.
        let nc = if family == "yolox" { 3 } else { *io.get("eval_logits").shape.last().unwrap() };
        let topology = if family == "yolox" { "yoloxnarrow" } else { name };
        let (network, mut params) = fixture_network(topology, nc);
        libreyolo_families::weights::load_safetensors(&mut params, &project_dir().join(format!("{name}.safetensors")), false).unwrap();
        let images = io.images(&Device::flex());
        let path = export_to(dir.path(), name, &network, &params, family, &options(images.dims()[2] as u32, true, 1));
        let (want_shape, want) = ours(&network, &params, &images);
        let (shape, got) = tract_run(&path, &images);
        assert_eq!(shape, want_shape, "{name}");
        let diff = max_abs_diff(&got, &want);
        assert!(diff <= 1e-4, "{name}: tract vs our eval: max |diff| {diff}");
        // LibreYOLO's YOLOX decode is (B, A, 5 + nc) and its RT-DETR's the raw logits and
        // boxes; ours is (B, 4 + nc, A), so only the classifiers' logits compare directly.
        if network.head().as_classifier().is_some() {
            let theirs = max_abs_diff(&got, &io.get("eval_logits").to_f32());
            assert!(theirs <= 1e-4, "{name}: tract vs LibreYOLO's logits: max |diff| {theirs}");
        }
    }
}

/// LibreYOLO's metadata keys; the symbolic batch; the model parses back.
#[test]
fn the_model_carries_libreyolo_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let (network, params, _) = yolo9t_fixture();
    let path = export_to(dir.path(), "meta", &network, &params, "yolo9", &options(64, true, 1));
    let model = onnx_protobuf::ModelProto::parse_from_bytes(&std::fs::read(&path).unwrap()).unwrap();
    let meta: std::collections::HashMap<_, _> = model.metadata_props.iter().map(|e| (e.key.as_str(), e.value.as_str())).collect();
    for (k, v) in [("model_family", "yolo9"), ("task", "detect"), ("nc", "80"), ("imgsz", "64"), ("stride", "32"), ("dynamic", "True"), ("precision", "fp32")] {
        assert_eq!(meta.get(k).copied(), Some(v), "metadata {k}");
    }
    let names: serde_json::Value = serde_json::from_str(meta["names"]).unwrap();
    assert_eq!(names["79"], "class79");
    let graph = model.graph.as_ref().unwrap();
    assert_eq!((graph.input[0].name.as_str(), graph.output[0].name.as_str()), ("images", "output"));
    assert_eq!(model.opset_import[0].version, 13);
    assert!(graph.node.iter().all(|n| n.op_type != "BatchNormalization"), "BatchNorm is folded into the convolutions");
}

/// Unsupported formats and opsets name what is supported; nothing is written.
#[test]
fn unsupported_requests_are_clear_errors() {
    let err = Format::parse("tensorrt").unwrap_err();
    assert!(err.contains("format=tensorrt") && err.contains("onnx"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let (network, params, _) = yolo9t_fixture();
    let mut o = options(64, true, 1);
    o.opset = 11;
    let path = dir.path().join("old.onnx");
    let err = export::export(&network, &params, &info(&network, "yolo9"), &o, &path).unwrap_err().to_string();
    assert!(err.contains("opset=11") && err.contains("13 to 17"), "{err}");
    assert!(!path.exists());
    // The embedded NMS follows a detector's decode, batch 1.
    let nms = Some(export::onnx::Nms { conf: 0.25, iou: 0.45, max_det: 300 });
    let (classifier, weights) = fixture_network("resnet_narrow", 10);
    let o = ExportOptions { nms, ..options(64, false, 1) };
    let err = export::export(&classifier, &weights, &info(&classifier, "resnet"), &o, &path).unwrap_err().to_string();
    assert!(err.contains("nms=true applies to detectors"), "{err}");
    let o = ExportOptions { nms, ..options(64, true, 1) };
    let err = export::export(&network, &params, &info(&network, "yolo9"), &o, &path).unwrap_err().to_string();
    assert!(err.contains("fixed batch of 1"), "{err}");
    assert!(!path.exists());
}
