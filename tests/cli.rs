//! The binary end to end: `--dry-run` prints the plan, errors exit non-zero with one report.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    run_with_env(args, &[])
}

fn run_with_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    Command::new(env!("CARGO_BIN_EXE_libreyolo-run"))
        .args(args)
        .current_dir(root)
        .env("LIBREYOLO_LOG", "warn")
        .envs(env.iter().copied())
        .output()
        .expect("the binary runs")
}

/// COCO128 beside this checkout (the shipped manifests leave the dataset to the command line).
fn coco128() -> String {
    format!("data={}", PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/coco128/coco128.yaml").display())
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn dry_run_prints_settings_device_and_plan() {
    let out = run(&["manifests/yolo9t.toml", "--dry-run", "cuda_graph=true", "device=cpu", "deterministic=true", "compile=max-autotune"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("## settings (resolved)"), "{stdout}");
    assert!(stdout.contains("deterministic = true"), "Ultralytics' name resolves to run.deterministic: {stdout}");
    assert!(stdout.contains("lr0 = 0.01"), "{stdout}");
    assert!(stdout.contains("cpu (flex) - device=cpu"), "{stdout}");
    // The shipped marking: the whole step captured (forward through EMA), one graph.
    assert!(stdout.contains("7 stages, 3 segments, 2 seams"), "{stdout}");
    assert!(stdout.contains("#2 captured [forward, loss, backward, optimizer, ema]"), "{stdout}");
    assert!(stdout.contains("this build: cuda_graph=true ignored (device is not CUDA)"), "{stdout}");
    assert!(stdout.contains("compile=max-autotune ignored (the device is not CUDA)"), "{stdout}");
    assert!(stdout.contains("#2 | #3  optimizer.params"), "{stdout}");
    assert!(stdout.contains("## program"), "{stdout}");
    // LibreYOLO's contract is one marking away.
    let out = run_with_env(
        &[
            "manifests/yolo9t.toml",
            "--dry-run",
            "cuda_graph=true",
            "device=cpu",
            "stage.loss.capture=false",
            "stage.optimizer.capture=false",
            "stage.ema.capture=false",
        ],
        &[("LIBREYOLO_CAPTURE_SOFTWARE", "1")],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("this build: captures 2 graph(s) per input shape: [forward] loss, backward(loss) [backward(forward)]"), "{stdout}");
}

#[test]
fn dry_run_auto_device_works_without_a_gpu() {
    let out = run(&["manifests/yolo9t.toml", "--dry-run"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("device=auto"), "{stdout}");
}

#[test]
fn manifest_errors_exit_2_with_one_report() {
    let out = run(&["manifests/yolo9t.toml", "--dry-run", "epoch=3"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stderr.matches("error:").count(), 1, "{stderr}");
    assert!(stderr.contains("did you mean `epochs`"), "{stderr}");

    let out = run(&["does/not/exist.toml", "--dry-run"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("cannot read manifest `does/not/exist.toml`"), "{stderr}");

    // A dataset that cannot be read, found when training starts: the same one report, at `data=`.
    let dir = tempfile::tempdir().unwrap();
    let out =
        run(&["manifests/yolo9t.toml", &format!("data={}", dir.path().display()), "device=cpu", "epochs=1", &format!("project={}", dir.path().display())]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.matches("error").count(), 1, "{stderr}");
    assert!(stderr.contains("needs a `train/` folder") && stderr.contains("command line"), "{stderr}");

    // A dataset of the other task, before any split is scanned or any run directory made.
    let out = run(&["manifests/resnet18.toml", &coco128(), "device=cpu", "epochs=1", &format!("project={}", dir.path().display())]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.matches("error").count(), 1, "{stderr}");
    assert!(stderr.contains("this network classifies images, but the dataset") && stderr.contains("command line"), "{stderr}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing written");
}

#[test]
fn missing_gpu_is_a_clear_error() {
    if libreyolo_run::device::cuda_device_count() > 0 {
        return; // only meaningful on a machine without CUDA
    }
    let out = run(&["manifests/yolo9t.toml", "--dry-run", "device=0"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("no CUDA device is available"), "{stderr}");
}

#[test]
fn doctor_passes_on_the_cpu() {
    let out = run(&["doctor", "--device", "cpu"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("\"passed\": true"), "{stdout}");
    assert!(stdout.contains("\"graph_replays_distinct\": true"), "{stdout}");
    assert!(stderr.contains("in-place updates (SGD, AdamW, EMA of 19 tensors, running statistic) max rel err"), "{stderr}");
    assert!(stdout.contains("\"in_place_updates_max_rel_err\""), "{stdout}");
}

#[test]
fn cuda_graph_on_the_cpu_logs_one_line_and_trains_eager() {
    let dir = tempfile::tempdir().unwrap();
    let project = format!("project={}", dir.path().display());
    let out = run(&[
        "manifests/yolo9t.toml",
        &coco128(),
        "cuda_graph=true",
        "compile=reduce-overhead",
        "device=cpu",
        "epochs=1",
        "imgsz=64",
        "batch=32",
        "val=false",
        &project,
    ]);
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stderr.matches("cuda_graph=true ignored (device is not CUDA); training runs eager.").count(), 1, "{stderr}");
    // LibreYOLO's compile is CUDA-only too: one warning, and training goes on.
    assert_eq!(stderr.matches("compile=reduce-overhead ignored (the device is not CUDA); training runs with the default kernels.").count(), 1, "{stderr}");
}

#[test]
fn autobatch_on_the_cpu_uses_the_default_batch() {
    let dir = tempfile::tempdir().unwrap();
    let project = format!("project={}", dir.path().display());
    let out = run(&["manifests/yolo9t.toml", &coco128(), "batch=-1", "device=cpu", "epochs=1", "imgsz=64", "val=false", &project]);
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("AutoBatch (batch=-1) needs a CUDA device; using the default batch=16"), "{stderr}");
    assert!(stderr.contains("batch 16, 8 steps/epoch"), "{stderr}");
}

#[test]
fn a_bad_convolution_kernel_policy_is_an_error_before_anything_runs() {
    let out = run_with_env(&["manifests/yolo9t.toml", "--dry-run"], &[("BURN_CONV_KERNELS", "fastest")]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("BURN_CONV_KERNELS=\"fastest\"") && stderr.contains("`fixed:NAME,...`"), "{stderr}");
    assert!(stdout.is_empty(), "nothing ran: {stdout}");
}

/// A torchrun-style launch is checked before anything trains: ranks on one machine, a GPU each.
#[test]
fn launcher_ranks_that_cannot_train_here_are_clear_errors() {
    if libreyolo_run::device::cuda_device_count() > 0 {
        return; // only meaningful on a machine without CUDA
    }
    let env = |rank: &'static str, local: &'static str| {
        [("RANK", rank), ("LOCAL_RANK", local), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29517")]
    };
    let out = run_with_env(&["manifests/yolo9t.toml", "epochs=1", "device=cpu"], &env("1", "0"));
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("RANK=1 but LOCAL_RANK=0: multi-node launches are not supported"), "{stderr}");
    let out = run_with_env(&["manifests/yolo9t.toml", "epochs=1", "device=cpu"], &env("0", "0"));
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("WORLD_SIZE=2 asks for one GPU per rank, but this machine has 0 CUDA device(s)"), "{stderr}");
    // A half-set environment names what is missing.
    let out = run_with_env(&["manifests/yolo9t.toml", "epochs=1", "device=cpu"], &[("RANK", "0"), ("WORLD_SIZE", "2")]);
    let (_, stderr) = text(&out);
    assert!(stderr.contains("but not LOCAL_RANK, MASTER_ADDR, MASTER_PORT"), "{stderr}");
}

/// Under a torchrun-style launch each rank captures what holds no collective: LibreYOLO's two
/// graphs and the update graph when BatchNorm stays per rank, the update alone with
/// SyncBatchNorm, saying why the rest runs eager. (Software graphs stand in for CUDA so that
/// the program is shown on the CPU.)
#[test]
fn dry_run_shows_what_a_data_parallel_rank_captures() {
    let launch =
        [("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29531"), ("LIBREYOLO_CAPTURE_SOFTWARE", "1")];
    let plan = |sync_bn: &str| {
        let out = run_with_env(&["manifests/yolo9t.toml", "--dry-run", "device=cpu", "cuda_graph=true", sync_bn], &launch);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stderr}");
        stdout
    };
    // The loss all-reduces its normaliser, so it stays eager between LibreYOLO's two graphs; the
    // gradient all-reduce runs eager before the update's graph.
    let stdout = plan("sync_bn=false");
    assert!(
        stdout.contains("this build: captures 3 graph(s) per input shape: [forward] loss, backward(loss) [backward(forward)] grad.sync [optimizer, ema]"),
        "{stdout}"
    );
    assert!(stdout.contains("note: stage `loss` runs eager: the loss all-reduces its normaliser over the GPUs"), "{stdout}");
    // With SyncBatchNorm the forward (and so its backward) stays eager too; the update is captured.
    let stdout = plan("sync_bn=true");
    assert!(
        stdout.contains("note: stage `forward` runs eager: SyncBatchNorm all-reduces inside the forward; with several GPUs capture needs `sync_bn=false`"),
        "{stdout}"
    );
    assert!(stdout.contains("this build: captures 1 graph(s) per input shape: [optimizer, ema]"), "{stdout}");
}

/// The shipped manifests leave the dataset to the command line: training without one says how
/// to give it, naming the manifest.
#[test]
fn training_without_a_dataset_says_how_to_give_one() {
    let dir = tempfile::tempdir().unwrap();
    let project = format!("project={}", dir.path().display());
    let out = run(&["manifests/yolo9t.toml", "device=cpu", "epochs=1", &project]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("no dataset: this manifest leaves `data.dataset` to the command line"), "{stderr}");
    assert!(stderr.contains("data=path/to/data.yaml"), "{stderr}");
}

/// The dry run names the dataset and builds the network for its classes (the YAML or the class
/// folders, no image read), or says there is none.
#[test]
fn dry_run_names_the_dataset_and_its_classes() {
    let dir = tempfile::tempdir().unwrap();
    for class in ["cat", "dog"] {
        std::fs::create_dir_all(dir.path().join("train").join(class)).unwrap();
    }
    let data = format!("data={}", dir.path().display());
    let out = run(&["manifests/resnet18.toml", "--dry-run", "device=cpu", &data]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("(an ImageFolder directory, 2 classes)") && stdout.contains("(nc=2)"), "{stdout}");
    let out = run(&["manifests/resnet18.toml", "--dry-run", "device=cpu"]);
    let (stdout, _) = text(&out);
    assert!(stdout.contains("no dataset (give `data=`); nc=80"), "{stdout}");
}

#[test]
fn parity_checks_a_narrow_classifier_fixture_on_any_device() {
    let out = run(&["parity", "--classifier", "resnet_narrow", "--device", "cpu"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("\"eval_logits_rel\"") && stdout.contains("\"grads_max_rel\""), "{stdout}");
    assert!(stdout.contains("parity: every figure within the fixture's tolerances"), "{stdout}");
    // A fixture that is not there: an error naming the file, no panic.
    let out = run(&["parity", "--classifier", "no_such_fixture", "--device", "cpu"]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("no_such_fixture_io.safetensors"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn export_writes_an_onnx_model_and_refuses_what_it_cannot_write() {
    let dir = tempfile::tempdir().unwrap();
    let weights = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/parity/yolo9t_nc80.safetensors");
    let weights = format!("weights={}", weights.display());
    let out_path = dir.path().join("nested/yolo9t.onnx");
    let out = run(&["export", "manifests/yolo9t.toml", &weights, "imgsz=128", &format!("out={}", out_path.display())]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("images batchx3x128x128 -> output batchx84x336"), "{stdout}");
    assert!(std::fs::metadata(&out_path).unwrap().len() > 1_000_000);
    // A static batch is written as asked.
    let out = run(&["export", "manifests/yolo9t.toml", &weights, "imgsz=128", "dynamic=false", "batch=3", &format!("out={}", out_path.display())]);
    let (stdout, _) = text(&out);
    assert!(stdout.contains("images 3x3x128x128 -> output 3x84x336"), "{stdout}");
    // LibreYOLO's embedded NMS: batch 1, its (1, max_det, 6) rows first, the decode second.
    let out = run(&["export", "manifests/yolo9t.toml", &weights, "imgsz=128", "nms=true", "max_det=100", &format!("out={}", out_path.display())]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("images 1x3x128x128 -> output 1x100x6 + raw (embedded NMS)"), "{stdout}");
    // Unsupported requests and bad values: one clear line, nothing written, no panic.
    for (arg, says) in [
        ("format=engine", "format=engine is not supported: this build exports onnx"),
        ("nms=true batch=2", "embedded NMS needs a fixed batch of 1"),
        ("conf=1.5", "`conf` must lie in [0, 1]"),
        ("half=maybe", "`half` expects true or false"),
        ("imgsz=100", "imgsz must be a multiple of 32"),
        ("opset=19", "opset=19 is not supported"),
    ] {
        let refused = dir.path().join("refused.onnx");
        let mut args = vec!["export", "manifests/yolo9t.toml", &weights];
        args.extend(arg.split(' '));
        let out_arg = format!("out={}", refused.display());
        args.push(&out_arg);
        let out = run(&args);
        let (_, stderr) = text(&out);
        assert!(!out.status.success(), "{arg} was accepted");
        assert!(stderr.contains(says) && !stderr.contains("panicked"), "{arg}: {stderr}");
        assert!(!refused.exists(), "{arg} wrote a file");
    }
    let out = run(&["export", "manifests/yolo9t.toml"]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success() && stderr.contains("weights="), "{stderr}");
}
