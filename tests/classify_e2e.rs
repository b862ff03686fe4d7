//! Classification end to end on the CPU: an ImageFolder dataset written here (three classes an
//! untrained network cannot tell apart but a few steps can), a narrow ResNet trained from the
//! shipped `classify-base.toml` settings, top-1/top-5 recorded each epoch, `val` on the best
//! weights giving the training's figures, and the whole step captured (burn's software graphs)
//! training exactly like eager.

use std::path::{Path, PathBuf};
use std::process::Command;

use image::{Rgb, RgbImage};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_libreyolo-run"));
    c.current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")).env("LIBREYOLO_LOG", "warn");
    c
}

/// `root/{train,val}/{red,green,blue}/*.png`: noisy images whose dominant channel is the class,
/// of varied sizes (the crops and the centre crop resize them).
fn imagefolder(root: &Path, train: usize, val: usize) {
    colour_folders(root, &["blue", "green", "red"], train, val);
}

/// `root/{train,val}/CLASS/*.png` for each colour of `classes` ("red", "green", "blue").
fn colour_folders(root: &Path, classes: &[&str], train: usize, val: usize) {
    let mut seed = 7u64;
    let mut next = move || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) as u32
    };
    for (split, n) in [("train", train), ("val", val)] {
        for class in classes {
            let channel = ["red", "green", "blue"].iter().position(|c| c == class).unwrap();
            let dir = root.join(split).join(class);
            std::fs::create_dir_all(&dir).unwrap();
            for i in 0..n {
                let (w, h) = (40 + next() % 40, 40 + next() % 40);
                let img = RgbImage::from_fn(w, h, |_, _| {
                    let mut px = [0u8; 3];
                    for (k, v) in px.iter_mut().enumerate() {
                        // The class's channel: 150-250.
                        *v = if k == channel { 150 + (next() % 100) as u8 } else { (next() % 120) as u8 };
                    }
                    Rgb(px)
                });
                img.save(dir.join(format!("{i}.png"))).unwrap();
            }
        }
    }
}

/// A manifest in `dir` of the narrow ResNet of the parity fixture on the shipped settings.
fn narrow_manifest(dir: &Path) -> PathBuf {
    let layers = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/resnet_narrow_layers.toml");
    let topology = std::fs::read_to_string(&layers).unwrap();
    let manifest = dir.join("narrow.toml");
    let base = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../manifests/classify-base.toml");
    std::fs::write(
        &manifest,
        format!("extends = {:?}\n[run]\nname = \"narrow\"\n[model]\nfamily = \"resnet\"\nsize = \"narrow\"\n{topology}", base.display().to_string()),
    )
    .unwrap();
    manifest
}

#[test]
fn a_classifier_trains_on_an_imagefolder_and_val_reproduces_its_accuracy() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("colours");
    imagefolder(&data, 16, 6);
    let manifest = narrow_manifest(dir.path());
    let args: Vec<String> = vec![
        manifest.display().to_string(),
        format!("data={}", data.display()),
        format!("project={}", dir.path().display()),
        "name=run".into(),
        "epochs=4".into(),
        "imgsz=32".into(),
        "batch=8".into(),
        "device=cpu".into(),
        "workers=2".into(),
        "lr0=0.01".into(),
    ];
    let out = bin().args(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stderr}", String::from_utf8_lossy(&out.stdout));
    let run = dir.path().join("run");
    for f in ["results.csv", "metrics.jsonl", "losses.png", "metrics.png", "weights/best.safetensors"] {
        assert!(run.join(f).exists(), "missing {f}\n{stderr}");
    }
    let csv = std::fs::read_to_string(run.join("results.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    assert_eq!(header[1], "train/ce_loss", "{csv}");
    let top1_col = header.iter().position(|h| *h == "metrics/accuracy_top1").unwrap_or_else(|| panic!("no top-1 column: {csv}"));
    let rows: Vec<Vec<f64>> = csv.lines().skip(1).map(|l| l.split(',').map(|v| v.parse().unwrap_or(f64::NAN)).collect()).collect();
    assert_eq!(rows.len(), 4, "{csv}");
    eprintln!("{csv}");
    assert!(rows[3][1] < rows[0][1], "the loss does not decrease:\n{csv}");
    let best_top1 = rows.iter().map(|r| r[top1_col]).fold(0.0, f64::max);
    // Three classes: chance is 1/3; the dominant channel is easy to learn.
    assert!(best_top1 > 0.6, "top-1 {best_top1} after training:\n{csv}");
    assert!(rows.iter().all(|r| r[top1_col + 1] == 1.0), "top-5 of three classes is every image:\n{csv}");

    // `val` on the best weights gives the best epoch's figures.
    let json = dir.path().join("val.json");
    let mut val = vec!["val".to_string(), manifest.display().to_string(), format!("data={}", data.display()), "imgsz=32".into(), "device=cpu".into()];
    val.push(format!("weights={}", run.join("weights/best.safetensors").display()));
    val.push(format!("json={}", json.display()));
    let out = bin().args(&val).output().unwrap();
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let metrics: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let top1 = metrics["metrics"]["metrics/accuracy_top1"].as_f64().unwrap();
    assert!((top1 - best_top1).abs() < 1e-9, "val top-1 {top1} vs the best epoch's {best_top1}");

    // `predict` lists each image's classes, best first, with their probabilities.
    let out_dir = dir.path().join("predicted");
    let source = data.join("val/red");
    let out = bin()
        .args(["predict", manifest.to_str().unwrap(), "imgsz=32", "device=cpu"])
        .arg(format!("weights={}", run.join("weights/best.safetensors").display()))
        .arg(format!("source={}", source.display()))
        .arg(format!("out={}", out_dir.display()))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("predicted 6 image(s)") && stdout.contains(": red "), "{stdout}");
    let preds: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out_dir.join("predictions.json")).unwrap()).unwrap();
    let images = preds.as_array().unwrap();
    assert_eq!(images.len(), 6);
    for im in images {
        let top = im["top"].as_array().unwrap();
        assert_eq!(top.len(), 3, "three classes: {im}");
        let scores: Vec<f64> = top.iter().map(|c| c["score"].as_f64().unwrap()).collect();
        assert!(scores.windows(2).all(|w| w[0] >= w[1]) && (scores.iter().sum::<f64>() - 1.0).abs() < 1e-4, "{scores:?}");
        assert!(im.get("detections").is_none(), "{im}");
    }
    let red = images.iter().filter(|im| im["top"][0]["name"] == "red").count();
    assert!(red as f64 / 6.0 >= best_top1 - 0.5, "{red} of 6 red images predicted red");

    // Fine-tuning: the three-class weights train on a two-class dataset, the head's tensors
    // sized for three classes starting fresh (as LibreYOLO rebuilds the head), the rest loaded.
    let two = dir.path().join("two");
    colour_folders(&two, &["green", "red"], 8, 2);
    let mut tune = args.clone();
    tune[1] = format!("data={}", two.display());
    tune[3] = "name=tuned".into();
    tune.push(format!("model.weights={}", run.join("weights/best.safetensors").display()));
    tune.push("epochs=1".into());
    let out = bin().env("LIBREYOLO_LOG", "warn").args(&tune).output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("made for another class count; 2 tensor(s) of the head start from a fresh init for 2 classes"), "{log}");
    assert!(log.contains("fc.weight: network [2, ") && log.contains("fc.bias: network [2], file [3]"), "{log}");
}

#[test]
fn a_detection_dataset_for_a_classifier_is_a_clear_error() {
    let coco = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/coco128/coco128.yaml");
    let out = bin().args(["manifests/resnet18.toml", &format!("data={}", coco.display()), "device=cpu", "epochs=1", "imgsz=32", "workers=1"]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("ImageFolder"), "{text}");
}

#[test]
fn the_captured_classification_step_trains_exactly_like_eager() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("colours");
    imagefolder(&data, 16, 2);
    let manifest = narrow_manifest(dir.path());
    let train = |name: &str, capture: &str| {
        let out = bin()
            .env("LIBREYOLO_LOG", "info")
            .env("LIBREYOLO_CAPTURE_SOFTWARE", "1")
            .args([manifest.to_str().unwrap(), &format!("data={}", data.display()), &format!("project={}", dir.path().display())])
            .args([&format!("name={name}"), &format!("cuda_graph={capture}"), "epochs=1", "imgsz=32", "batch=8", "device=cpu", "workers=2", "val=false"])
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{log}");
        (std::fs::read(dir.path().join(name).join("weights/last.safetensors")).unwrap(), log)
    };
    let (eager, _) = train("eager", "false");
    // 6 steps of one shape: steps 1-2 eager, the 3rd captures the whole step, the rest replay.
    let (graph, log) = train("graph", "true");
    assert_eq!(
        log.matches("cuda_graph: captured training step [forward, loss, backward(forward+loss), optimizer, ema] at input shape [8, 3, 32, 32]").count(),
        1,
        "{log}"
    );
    assert!(!log.contains("falling back to eager"), "{log}");
    assert!(eager == graph, "the captured step's weights, EMA and AdamW state differ from eager");
}
