//! `predict` end to end on the CPU: LibreYOLO weights detect on a folder of COCO128 images, writing annotated copies and predictions.json in original-image pixels; bad
//! sources and weights are clear errors.

use std::path::PathBuf;
use std::process::Command;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_libreyolo-run"));
    c.current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")).env("LIBREYOLO_LOG", "warn");
    c
}

fn coco128_images() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/coco128");
    std::fs::read_dir(&root).unwrap();
    root.join("images/train2017")
}

/// LibreYOLO's YOLOv9-t weights from the parity fixture: a plain state dict (no checkpoint), so
/// the class names come from the manifest's dataset.
fn fixture_weights() -> PathBuf {
    let dir =
        std::env::var_os("LIBREYOLO_PARITY_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/parity"));
    dir.join("yolo9t_nc80.safetensors")
}

#[test]
fn predict_writes_annotated_images_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let weights = fixture_weights();

    // A folder of three images.
    let source = dir.path().join("images");
    std::fs::create_dir_all(&source).unwrap();
    let mut names: Vec<_> = std::fs::read_dir(coco128_images()).unwrap().map(|e| e.unwrap().path()).collect();
    names.sort();
    for p in names.iter().take(3) {
        std::fs::copy(p, source.join(p.file_name().unwrap())).unwrap();
    }
    std::fs::write(source.join("notes.txt"), "not an image").unwrap();
    let target = dir.path().join("pred");
    let out = bin()
        .args(["predict", "manifests/yolo9t.toml", "imgsz=320", "device=cpu", "conf=0.001"])
        .arg(format!("weights={}", weights.display()))
        .arg(format!("source={}", source.display()))
        .arg(format!("out={}", target.display()))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("predicted 3 image(s)"), "{stdout}");

    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(target.join("predictions.json")).unwrap()).unwrap();
    let images = json.as_array().unwrap();
    assert_eq!(images.len(), 3);
    for im in images {
        let (w, h) = (im["width"].as_f64().unwrap(), im["height"].as_f64().unwrap());
        let dets = im["detections"].as_array().unwrap();
        assert!(!dets.is_empty() && dets.len() <= 300, "{} detections", dets.len());
        let mut last = f64::MAX;
        for d in dets {
            let b: Vec<f64> = d["xyxy"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
            assert!(0.0 <= b[0] && b[0] < b[2] && b[2] <= w && 0.0 <= b[1] && b[1] < b[3] && b[3] <= h, "box {b:?} outside {w}x{h}");
            let s = d["score"].as_f64().unwrap();
            assert!(s > 0.001 && s <= last, "scores sorted and above conf");
            last = s;
            assert!(d["name"].as_str().is_some_and(|n| !n.is_empty()));
        }
        let stem = PathBuf::from(im["image"].as_str().unwrap()).file_stem().unwrap().to_owned();
        let annotated = image::open(target.join(stem).with_extension("jpg")).unwrap();
        assert_eq!((annotated.width() as f64, annotated.height() as f64), (w, h), "annotated copies keep the original size");
    }

    // cuda_graph=true on the CPU: one line, and the run goes on eager with the same output.
    let graphed = dir.path().join("graphed");
    let out = bin()
        .args(["predict", "manifests/yolo9t.toml", "imgsz=320", "device=cpu", "conf=0.001", "cuda_graph=true"])
        .arg(format!("weights={}", weights.display()))
        .arg(format!("source={}", source.display()))
        .arg(format!("out={}", graphed.display()))
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("cuda_graph requested but running eager for yolo9 (device is not CUDA)"), "{stderr}");
    assert!(stdout.contains("cuda_graph: 0 graph(s) [], 3 eager run(s) (device is not CUDA)"), "{stdout}");
    assert_eq!(std::fs::read(graphed.join("predictions.json")).unwrap().len(), std::fs::read(target.join("predictions.json")).unwrap().len());

    // max_det caps the detections of each image.
    let capped = dir.path().join("capped");
    let out = bin()
        .args(["predict", "manifests/yolo9t.toml", "imgsz=320", "device=cpu", "conf=0.5", "max_det=5"])
        .arg(format!("weights={}", weights.display()))
        .arg(format!("source={}", source.display()))
        .arg(format!("out={}", capped.display()))
        .output()
        .unwrap();
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(capped.join("predictions.json")).unwrap()).unwrap();
    for im in json.as_array().unwrap() {
        let dets = im["detections"].as_array().unwrap();
        assert!(dets.len() <= 5 && dets.iter().all(|d| d["score"].as_f64().unwrap() > 0.5));
    }
}

#[test]
fn predict_errors_name_what_is_wrong() {
    let out = bin().args(["predict", "manifests/yolo9t.toml", "device=cpu", "source=nowhere"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("predict needs `weights=PATH`"));
    let out = bin().args(["predict", "manifests/yolo9t.toml", "device=cpu", "weights=w.safetensors"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("predict needs `source=PATH`"));
    let out = bin().args(["predict", "manifests/yolo9t.toml", "device=cpu", "weights=w.safetensors", "source=/no/such/dir"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("source=/no/such/dir does not exist"));
    let out = bin().args(["predict", "manifests/yolo9t.toml", "device=cpu", "cuda_graph=sometimes", "weights=w", "source=."]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("Invalid cuda_graph=sometimes. Expected true, false or 'auto'."));
    let out = bin().args(["predict", "manifests/yolo9t.toml", "device=cpu", "conf=2", "weights=w", "source=."]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("must lie in [0, 1]"));
    let out = bin().args(["predict", "manifests/yolo9t.toml", "device=cpu", "weights=/no/w.safetensors", "source=manifests"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("loading weights=/no/w.safetensors") || stderr.contains("holds no images"), "{stderr}");
}
