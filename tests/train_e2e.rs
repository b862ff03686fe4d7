//! Training end to end on the CPU: a short COCO128 run whose loss decreases and which writes
//! every artifact; a run killed with SIGKILL resumes, by its name alone, where its last epoch
//! ended.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_libreyolo-run"));
    c.current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")).env("LIBREYOLO_LOG", "warn");
    c
}

/// COCO128 beside this checkout (the shipped manifests leave the dataset to the command line).
fn coco128() -> String {
    format!("data={}", PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/coco128/coco128.yaml").display())
}

/// A small, fast configuration: 64 px, batch 16, validation every epoch.
fn small(project: &Path, name: &str, epochs: u32) -> Vec<String> {
    vec![
        "manifests/yolo9t.toml".into(),
        coco128(),
        format!("project={}", project.display()),
        format!("name={name}"),
        format!("epochs={epochs}"),
        "imgsz=64".into(),
        "batch=16".into(),
        "device=cpu".into(),
        "workers=2".into(),
        "cache=ram".into(),
        "eval_interval=1".into(),
        "no_aug_epochs=0".into(),
        "warmup_epochs=0".into(),
    ]
}

fn csv_rows(run: &Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(run.join("results.csv")).unwrap_or_default().lines().skip(1).map(|l| l.split(',').map(str::to_string).collect()).collect()
}

#[test]
fn a_short_run_learns_and_writes_every_artifact() {
    let dir = tempfile::tempdir().unwrap();
    let out = bin().args(small(dir.path(), "run", 3)).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let run = dir.path().join("run");
    for f in ["manifest.toml", "results.csv", "metrics.jsonl", "train.log", "losses.png", "metrics.png", "weights/last.safetensors", "weights/best.safetensors"]
    {
        assert!(run.join(f).exists(), "missing {f}\n{stderr}");
    }
    let rows = csv_rows(&run);
    assert_eq!(rows.len(), 3);
    let total = |r: &Vec<String>| r[1].parse::<f64>().unwrap() + r[2].parse::<f64>().unwrap() + r[3].parse::<f64>().unwrap();
    eprintln!("losses per epoch: {:?}", rows.iter().map(total).collect::<Vec<_>>());
    assert!(total(&rows[2]) < total(&rows[0]), "the loss does not decrease: {rows:?}");
    // steps.csv: one row per step of every epoch, whose mean is the epoch's loss.
    let steps: Vec<Vec<f64>> =
        std::fs::read_to_string(run.join("steps.csv")).unwrap().lines().skip(1).map(|l| l.split(',').map(|v| v.parse().unwrap()).collect()).collect();
    let per_epoch = steps.len() / 3;
    assert!(per_epoch > 0 && steps.len() == 3 * per_epoch, "{} step rows", steps.len());
    let first: Vec<&Vec<f64>> = steps.iter().filter(|r| r[0] == 0.0).collect();
    let mean_box = first.iter().map(|r| r[3]).sum::<f64>() / first.len() as f64;
    assert!((mean_box - rows[0][1].parse::<f64>().unwrap()).abs() < 1e-4, "steps.csv box mean {mean_box} vs results.csv {:?}", rows[0]);
    // Validation ran every epoch and produced the 12 COCO numbers.
    assert!(rows.iter().all(|r| r.len() == 19 && !r[7].is_empty()), "{rows:?}");
    // The checkpoint carries the training state and can seed `model.weights`.
    let out = bin().args(small(dir.path(), "again", 1)).arg(format!("weights={}", run.join("weights/last.safetensors").display())).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_killed_run_resumes_from_its_last_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("killed");
    let mut child = bin().args(small(dir.path(), "killed", 3)).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    // Kill it (SIGKILL) once the first epoch is on disk, in the middle of the second.
    let start = Instant::now();
    while csv_rows(&run).is_empty() {
        assert!(start.elapsed() < Duration::from_secs(600), "the first epoch never finished");
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the run ended early: {status}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    child.kill().unwrap();
    let _ = child.wait();
    let done_before = csv_rows(&run).len();
    assert!((1..3).contains(&done_before));

    // Resumed by its name alone: the rest (the dataset, 64 px, the CPU) comes from the run's
    // resolved manifest.toml.
    let args = ["manifests/yolo9t.toml".to_string(), format!("project={}", dir.path().display()), "name=killed".into(), "resume=true".into()];
    let out = bin().args(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("resume: the settings of {}", run.join("manifest.toml").display())), "{stderr}");
    assert!(stderr.contains(&format!("resuming {} at epoch {}", run.display(), done_before + 1)), "{stderr}");
    let epochs: Vec<String> = csv_rows(&run).iter().map(|r| r[0].clone()).collect();
    assert_eq!(epochs, vec!["0", "1", "2"], "each epoch recorded exactly once");
}

#[test]
fn resume_without_a_checkpoint_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = small(dir.path(), "nothing", 1);
    args.push("resume=true".into());
    let out = bin().args(&args).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("has no weights/last.safetensors to resume from"), "{stderr}");
}

#[test]
fn ctrl_c_saves_last_and_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("stopped");
    let child = bin().args(small(dir.path(), "stopped", 50)).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let start = Instant::now();
    while csv_rows(&run).is_empty() {
        assert!(start.elapsed() < Duration::from_secs(600), "the first epoch never finished");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(300));
    // SIGINT, as Ctrl-C in a terminal sends it.
    let status = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "Ctrl-C must exit cleanly: {:?}\n{stderr}", out.status);
    assert!(stderr.contains("interrupt: finishing this step, saving weights/last"), "{stderr}");
    assert!(stdout.contains("interrupted: continue with `resume=true"), "{stdout}");
    assert!(run.join("weights/last.safetensors").exists());
    assert!(csv_rows(&run).len() < 50);
    let log = std::fs::read_to_string(run.join("train.log")).unwrap();
    assert!(log.contains("weights/last saved") || log.contains("epoch "), "{log}");
}

#[test]
fn patience_stops_a_run_that_no_longer_improves() {
    let dir = tempfile::tempdir().unwrap();
    // A learning rate of ~0 keeps mAP50-95 at its first value: no epoch improves on it.
    let mut args = small(dir.path(), "patient", 8);
    args.extend(["patience=2".into(), "lr0=1e-12".into(), "batch=32".into()]);
    let out = bin().args(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("early stopping: no improvement in mAP50-95 for 2 epochs (best 0.0000 at epoch 1); patience=2"), "{stderr}");
    let run = dir.path().join("patient");
    assert_eq!(csv_rows(&run).len(), 3, "epochs 1-3 recorded, then stopped");
    assert!(run.join("weights/last.safetensors").exists());
}

/// `val` scores a checkpoint exactly as the training's validation scored the same weights: one
/// epoch validated with a confidence low enough for an untrained head to give detections, then
/// `val` on `best` (the EMA weights of that epoch) with the same settings.
#[test]
fn val_reproduces_the_training_validation_of_its_weights() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = small(dir.path(), "run", 1);
    args.push("val.conf=0.00001".into());
    let out = bin().args(&args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run = dir.path().join("run");
    let row = &csv_rows(&run)[0];
    let trained: Vec<f64> = row[7..10].iter().map(|v| v.parse().unwrap()).collect();
    assert!(trained[1] > 0.0, "the untrained head found nothing to score: {row:?}");

    let json = dir.path().join("val.json");
    let detections = dir.path().join("predictions.json");
    let mut val_args: Vec<String> = vec!["val".into()];
    val_args.extend(args.iter().filter(|a| !a.starts_with("project=") && !a.starts_with("name=") && !a.starts_with("epochs=")).cloned());
    val_args.push(format!("weights={}", run.join("weights/best.safetensors").display()));
    val_args.push(format!("json={}", json.display()));
    val_args.push(format!("save_json={}", detections.display()));
    let out = bin().args(&val_args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let metrics: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for (i, key) in ["metrics/mAP50-95", "metrics/mAP50", "metrics/mAP75"].iter().enumerate() {
        let v = metrics["metrics"][key].as_f64().unwrap();
        assert!((v - trained[i]).abs() < 1e-6, "{key}: val {v} vs training {}\n{stdout}", trained[i]);
    }
    let dets: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(&detections).unwrap()).unwrap();
    assert_eq!(dets.len() as u64, metrics["detections"].as_u64().unwrap());
    assert!(dets.iter().all(|d| d["bbox"].as_array().map(|b| b.len()) == Some(4) && d["score"].as_f64().unwrap() > 0.00001));

    // A class count the dataset does not have is refused, as training refuses it.
    let mut wrong = val_args.clone();
    wrong.push("model.nc=3".into());
    let out = bin().args(&wrong).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("model.nc = 3 but the dataset"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// RT-DETR-r18 trains from its shipped manifest: the labels reach the decoder (its denoising
/// groups) through the forward's optional input, the Hungarian loss runs eager after the
/// encoder's seam, gradients are clipped and AdamW steps. 128 px is the smallest size whose
/// maps hold the decoder's 300 queries.
#[test]
fn rtdetr_trains_from_its_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "manifests/rtdetrr18.toml".to_string(),
        coco128(),
        format!("project={}", dir.path().display()),
        "name=rtdetr".into(),
        "epochs=1".into(),
        "imgsz=128".into(),
        "batch=8".into(),
        "device=cpu".into(),
        "workers=2".into(),
        "cache=ram".into(),
        // LibreYOLO's stem freeze for a pretrained start (the manifest trains from scratch)
        r"model.freeze=['^backbone\.conv1\.']".into(),
    ];
    // The dry run that compiles a step's kernels ahead (forced here; on by default on CUDA) must
    // not run a step whose loss matches on the host: it would read what the dry run never wrote.
    let kernels = dir.path().join("kernels");
    let out = bin().args(args).env("LIBREYOLO_LOG", "info").env("LIBREYOLO_PRECOMPILE", "force").env("LIBREYOLO_KERNEL_CACHE", &kernels).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("no dry run ahead of its first run (`loss` reads the host"), "{stderr}");
    // LibreYOLO's stem freeze and parameter groups: the counts of its RTDETRModel's trainable
    // parameters under its trainer's rules (40, 20, 159 with the stem's 9 frozen; 46, 23, 159
    // from scratch)
    assert!(stderr.contains(": 9 parameters frozen"), "{stderr}");
    for line in [
        r#"optimizer group ["backbone", "norm|bn"]: lr x0.05, weight decay 0, 40 parameters"#,
        r#"optimizer group ["backbone"]: lr x0.05, weight decay 0.0001, 20 parameters"#,
        r#"optimizer group ["encoder|decoder", "norm|bias"]: lr x1, weight decay 0, 159 parameters"#,
    ] {
        assert!(stderr.contains(line), "missing `{line}`: {stderr}");
    }
    let run = dir.path().join("rtdetr");
    let steps = std::fs::read_to_string(run.join("steps.csv")).unwrap();
    let mut lines = steps.lines();
    assert_eq!(lines.next(), Some("epoch,step,iteration,vfl_loss,bbox_loss,giou_loss,lr"), "the loss's own terms");
    let rows: Vec<Vec<f64>> = lines.map(|l| l.split(',').map(|v| v.parse().unwrap()).collect()).collect();
    assert_eq!(rows.len(), 16, "128 images at batch 8");
    assert!(rows.iter().all(|r| r[3..6].iter().all(|v| v.is_finite() && *v > 0.0)), "{steps}");
    assert!(rows.iter().all(|r| r[6] == 1e-4), "the constant schedule: {steps}");
    assert!(run.join("weights/last.safetensors").exists());
    // Validation ran (the decoder's top-k postprocess) and gave the 12 COCO numbers.
    let results = csv_rows(&run);
    assert_eq!(results.len(), 1, "one epoch, validated");
    let coco: Vec<f64> = results[0][results[0].len() - 12..].iter().map(|v| v.parse().unwrap()).collect();
    assert!(coco.iter().all(|v| (0.0..=1.0).contains(v)), "COCO stats in [0, 1]: {coco:?}");
}
