//! The captured training segment (forward + loss + backward in one graph, the whole step with
//! optimizer and EMA, or LibreYOLO's forward and backward graphs with the loss eager between)
//! on the CPU, through
//! burn's software graphs (`LIBREYOLO_CAPTURE_SOFTWARE`: a replay re-runs the recorded closure):
//! the capture plumbing — shape counting in the executor, stable inputs refreshed per batch,
//! BatchNorm statistics and optimizer updates outside the graph, the capture-time check against
//! eager — gives a training run identical to eager, bit for bit. Hardware graphs are checked on
//! the GPU (docs/history/).

use std::path::{Path, PathBuf};
use std::process::Command;

/// COCO128 beside this checkout (the shipped manifests leave the dataset to the command line).
fn coco128() -> String {
    format!("data={}", PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/coco128/coco128.yaml").display())
}

fn train(project: &Path, name: &str, extra: &[&str]) -> (bool, String) {
    train_with(project, name, extra, &[])
}

fn train_with(project: &Path, name: &str, extra: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    train_manifest("manifests/yolo9t.toml", project, name, extra, env)
}

fn train_manifest(manifest: &str, project: &Path, name: &str, extra: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_libreyolo-run"))
        .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."))
        .envs(env.iter().copied())
        .env("LIBREYOLO_LOG", "info")
        .env("LIBREYOLO_CAPTURE_SOFTWARE", "1")
        // Eager unless a test asks for graphs (the shipped `auto` captures on software graphs).
        .args([manifest, "cuda_graph=false", "epochs=1", "imgsz=64", "batch=16", "device=cpu", "workers=2", "val=false", "exist_ok=true"])
        .arg(coco128())
        .arg(format!("project={}", project.display()))
        .arg(format!("name={name}"))
        .args(extra)
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_captured_segment_trains_exactly_like_eager() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, log) = train(dir.path(), "eager", &[]);
    assert!(ok, "{log}");
    let (ok, log) = train(dir.path(), "graph", &["cuda_graph=true", "stage.optimizer.capture=false", "stage.ema.capture=false", "capture.threshold=3"]);
    assert!(ok, "{log}");
    // 8 steps of one shape: steps 1-2 eager, the 3rd captures, the rest replay.
    assert_eq!(log.matches("cuda_graph: captured training step [forward, loss, backward(forward+loss)] at input shape [16, 3, 64, 64]").count(), 1, "{log}");
    assert!(!log.contains("falling back to eager"), "{log}");
    let weights = |name: &str| std::fs::read(dir.path().join(name).join("weights/last.safetensors")).unwrap();
    assert!(weights("eager") == weights("graph"), "weights, EMA and optimizer state after 8 steps differ from eager");
    let losses = |name: &str| {
        std::fs::read_to_string(dir.path().join(name).join("results.csv")).unwrap().lines().nth(1).unwrap().split(',').take(4).collect::<Vec<_>>().join(",")
    };
    assert_eq!(losses("eager"), losses("graph"));

    // The whole step in one graph: optimizer and EMA included, their scalars from device
    // buffers, the capture's warm-up updates undone.
    let whole = ["cuda_graph=true"];
    let (ok, log) = train(dir.path(), "whole", &whole);
    assert!(ok, "{log}");
    assert_eq!(
        log.matches("cuda_graph: captured training step [forward, loss, backward(forward+loss), optimizer, ema] at input shape [16, 3, 64, 64]").count(),
        1,
        "{log}"
    );
    assert!(weights("eager") == weights("whole"), "the whole-step graph's weights, EMA and optimizer state differ from eager");
    assert_eq!(losses("eager"), losses("whole"));

    // The dry run that compiles a step's kernels first (engine/src/precompile.rs), forced on the
    // CPU, where it runs the whole step for real: the engine must undo it completely.
    let cache = dir.path().join("kernels");
    let (ok, log) = train_with(dir.path(), "dry", &whole, &[("LIBREYOLO_PRECOMPILE", "force"), ("LIBREYOLO_KERNEL_CACHE", cache.to_str().unwrap())]);
    assert!(ok, "{log}");
    assert_eq!(log.matches("by a dry run").count(), 1, "one dry run, for the one input shape: {log}");
    assert!(weights("whole") == weights("dry"), "a dry run changed the training");
    assert_eq!(losses("whole"), losses("dry"));
    // The default eager step too: its first batch dry-runs forward, loss, backward and update
    // as one segment (the same functions the eager stages call), then trains for real.
    let (ok, log) = train_with(dir.path(), "dry-eager", &[], &[("LIBREYOLO_PRECOMPILE", "force"), ("LIBREYOLO_KERNEL_CACHE", cache.to_str().unwrap())]);
    assert!(ok, "{log}");
    assert_eq!(log.matches("eager step on [16, 3, 64, 64]").count(), 1, "one dry run, for the one input shape: {log}");
    assert!(weights("eager") == weights("dry-eager"), "a dry run changed the eager training");
    assert_eq!(losses("eager"), losses("dry-eager"));

    // fp16's dynamic loss scale, forced on in f32 (`LIBREYOLO_LOSS_SCALE=dynamic`): scaling the
    // loss by 2^16 and the gradients back is exact in f32, so eager with it trains exactly like
    // eager without, and the whole step, which holds the scale and its skip decision on the
    // device (no read back), exactly like both.
    let scaled = [("LIBREYOLO_LOSS_SCALE", "dynamic")];
    let (ok, log) = train_with(dir.path(), "eager-scaled", &[], &scaled);
    assert!(ok, "{log}");
    assert!(log.contains("dynamic loss scaling"), "{log}");
    // The checkpoints differ in the scaler state they record; every tensor is equal.
    let tensors = |name: &str| {
        let bytes = weights(name);
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let mut out: Vec<(String, Vec<u8>)> = st.tensors().into_iter().map(|(k, v)| (k, v.data().to_vec())).collect();
        out.sort();
        out
    };
    assert!(tensors("eager") == tensors("eager-scaled"), "loss scaling changed the eager training");
    let (ok, log) = train_with(dir.path(), "whole-scaled", &whole, &scaled);
    assert!(ok, "{log}");
    assert_eq!(
        log.matches("cuda_graph: captured training step [forward, loss, backward(forward+loss), optimizer, ema] at input shape [16, 3, 64, 64]").count(),
        1,
        "{log}"
    );
    assert!(tensors("eager-scaled") == tensors("whole-scaled"), "the whole step with the loss scale differs from eager");
    assert!(weights("eager-scaled") == weights("whole-scaled"), "the scaler state differs");
    // A scale the first steps overflow (1e38: their gradients become inf / NaN): those steps
    // are skipped and the scale halves until the gradients fit (6 steps here), eagerly after
    // reading each verdict, in the whole step on the device with nothing read. A skipped step
    // that moved anything would put NaN into the whole step's state: both runs agree in every
    // tensor and the scale.
    let overflow = [("LIBREYOLO_LOSS_SCALE", "dynamic:1e38")];
    let (ok, log) = train_with(dir.path(), "eager-overflow", &[], &overflow);
    assert!(ok, "{log}");
    let (ok, log) = train_with(dir.path(), "whole-overflow", &whole, &overflow);
    assert!(ok, "{log}");
    assert!(!log.contains("falling back to eager"), "{log}");
    assert!(weights("eager-overflow") == weights("whole-overflow"), "skipped steps differ between eager and the whole step");
    let bytes = weights("whole-overflow");
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let state: serde_json::Value = serde_json::from_str(&meta.metadata().as_ref().unwrap()["libreyolo_run.train_state"]).unwrap();
    let scale = state["loss_scale"].as_f64().unwrap();
    assert!(scale <= (1e38f32 / 2.0) as f64 && scale > 1e30, "no step was skipped, or all were: {state}");
    assert!(tensors("whole-overflow") != tensors("whole-scaled"));
    assert_eq!(losses("eager"), losses("whole-scaled"));
    // AdamW's bias corrections depend on how many steps it took: its count lives on the
    // device, so a skipped step leaves it as it was in the whole step as eagerly (torch's
    // `state['step']` when `GradScaler` skips `optimizer.step()`).
    let adamw = ["optimizer=adamw", "lr0=0.001"];
    let (ok, log) = train_with(dir.path(), "eager-overflow-adamw", &adamw, &overflow);
    assert!(ok, "{log}");
    let (ok, log) = train_with(dir.path(), "whole-overflow-adamw", &[&whole[..], &adamw[..]].concat(), &overflow);
    assert!(ok, "{log}");
    assert_eq!(log.matches("cuda_graph: captured training step").count(), 1, "{log}");
    assert!(weights("eager-overflow-adamw") == weights("whole-overflow-adamw"), "AdamW's skipped steps differ between eager and the whole step");

    // The shipped plan, LibreYOLO's contract: forward and backward captured, the loss eager
    // between them, its gradients written into the backward's upstream buffers.
    let contract = ["cuda_graph=true", "stage.loss.capture=false", "stage.optimizer.capture=false", "stage.ema.capture=false"];
    let (ok, log) = train(dir.path(), "contract", &contract);
    assert!(ok, "{log}");
    assert_eq!(
        log.matches("cuda_graph: captured training step [forward] loss, backward(loss) [backward(forward)] at input shape [16, 3, 64, 64]").count(),
        1,
        "{log}"
    );
    assert!(!log.contains("ignored") && !log.contains("falling back to eager"), "{log}");
    assert!(weights("eager") == weights("contract"), "the two-graph run's weights, EMA and optimizer state differ from eager");
    assert_eq!(losses("eager"), losses("contract"));

    // A seam inside the network, moved by the manifest alone: the backbone and neck in the two
    // graphs, the heads (main and PGI) run eagerly with the loss between them; their
    // gradients and BatchNorm statistics join the graphs' in the eager update. The heads'
    // backward is a graph of its own, so sums over branches round differently (the gradients
    // agree to 1e-4 of their size: `segment::tests::a_seam_inside_the_network_gives_the_
    // gradients_of_the_whole_forward`); a randomly initialised network amplifies that over the
    // steps, so here the first step is exact and the epoch within 2%.
    let (ok, log) = train(dir.path(), "seam", &[&contract[..], &["stage.forward.until=neck.elan_down2"]].concat());
    assert!(ok, "{log}");
    assert_eq!(
        log.matches("cuda_graph: captured training step [forward(..neck.elan_down2)] forward(neck.elan_down2..), loss, backward(forward(neck.elan_down2..)+loss) [backward(forward(..neck.elan_down2))] at input shape [16, 3, 64, 64]").count(),
        1,
        "{log}"
    );
    assert!(!log.contains("ignored") && !log.contains("falling back to eager"), "{log}");
    let first_step = |name: &str| std::fs::read_to_string(dir.path().join(name).join("steps.csv")).unwrap().lines().nth(1).unwrap().to_string();
    assert_eq!(first_step("eager"), first_step("seam"));
    let epoch = |name: &str| -> Vec<f64> { losses(name).split(',').skip(1).map(|v| v.parse().unwrap()).collect() };
    for (e, s) in epoch("eager").iter().zip(epoch("seam")) {
        assert!((e - s).abs() / e < 0.02, "epoch losses {:?} (eager) vs {:?} (seam)", epoch("eager"), epoch("seam"));
    }

    // The contract with the update captured after the backward (a third graph on the GPU):
    // optimizer and EMA marked with the backward, the loss eager.
    let (ok, log) = train(dir.path(), "contract-update", &["cuda_graph=true", "stage.loss.capture=false"]);
    assert!(ok, "{log}");
    assert_eq!(
        log.matches("cuda_graph: captured training step [forward] loss, backward(loss) [backward(forward), optimizer, ema] at input shape [16, 3, 64, 64]")
            .count(),
        1,
        "{log}"
    );
    assert!(!log.contains("ignored") && !log.contains("falling back to eager"), "{log}");
    assert!(weights("eager") == weights("contract-update"), "the update graph's weights, EMA and optimizer state differ from eager");
    assert_eq!(losses("eager"), losses("contract-update"));
}

/// A stage that computes something else once mosaic closes (YOLOX's loss gains its L1 branch)
/// asks for new graphs: they are dropped at the first epoch without mosaic and captured again
/// at the threshold, and the run still trains exactly like eager.
#[test]
fn a_stage_can_have_its_graphs_captured_again_when_mosaic_closes() {
    let dir = tempfile::tempdir().unwrap();
    let two_epochs = ["epochs=2", "no_aug_epochs=1"];
    let (ok, log) = train(dir.path(), "eager", &two_epochs);
    assert!(ok, "{log}");
    let mut graphed = two_epochs.to_vec();
    graphed.extend(["cuda_graph=true", "stage.optimizer.capture=false", "stage.ema.capture=false", "stage.loss.recapture_on=[\"mosaic_close\"]"]);
    let (ok, log) = train(dir.path(), "graph", &graphed);
    assert!(ok, "{log}");
    assert_eq!(
        log.matches("cuda_graph: capture invalidated (mosaic closed at epoch 2; stage `loss` asked to re-capture); will re-capture").count(),
        1,
        "{log}"
    );
    assert_eq!(log.matches("cuda_graph: captured training step [forward, loss, backward(forward+loss)] at input shape [16, 3, 64, 64]").count(), 2, "{log}");
    let weights = |name: &str| std::fs::read(dir.path().join(name).join("weights/last.safetensors")).unwrap();
    assert!(weights("eager") == weights("graph"), "re-captured graphs trained differently from eager");
}

/// `data.label_rows = "batch"` under capture: each batch's target rows (its largest label count,
/// rounded up to a power of two) are part of the graph's key, so a run captures one graph per
/// row count it meets (up to `max_graphs`), and trains exactly as eager with the fixed rows.
#[test]
fn a_graph_per_label_row_count_trains_like_eager() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, log) = train(dir.path(), "eager", &[]);
    assert!(ok, "{log}");
    let (ok, log) = train(dir.path(), "rows", &["cuda_graph=true", "capture.threshold=1", "capture.max_graphs=8", "data.label_rows=batch"]);
    assert!(ok, "{log}");
    let captured: Vec<&str> = log.lines().filter(|l| l.contains("cuda_graph: captured training step")).collect();
    assert!(captured.len() >= 2 && captured.iter().all(|l| l.contains("other inputs [[16, ")), "{log}");
    assert!(!captured.iter().any(|l| l.contains("[16, 300, 5]")), "the fixed rows were captured: {log}");
    assert!(!log.contains("falling back to eager"), "{log}");
    let weights = |name: &str| std::fs::read(dir.path().join(name).join("weights/last.safetensors")).unwrap();
    assert!(weights("eager") == weights("rows"), "a graph per row count trained differently from eager");
}

/// The default rows under capture (`data.label_rows = "auto"`, growing on one GPU): every
/// batch holds the most rows a batch before it needed, at least 64, so the run's graphs are the
/// few counts it rises through, in rising order, each replacing the last, and it trains exactly
/// as eager.
#[test]
fn growing_label_rows_capture_rising_counts_and_train_like_eager() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, log) = train(dir.path(), "eager", &[]);
    assert!(ok, "{log}");
    let (ok, log) = train(dir.path(), "grow", &["cuda_graph=true", "capture.threshold=1"]);
    assert!(ok, "{log}");
    let rows: Vec<usize> = log
        .lines()
        .filter(|l| l.contains("cuda_graph: captured training step"))
        .map(|l| l.split("other inputs [[16, ").nth(1).and_then(|r| r.split(',').next()).unwrap().parse().unwrap())
        .collect();
    // Powers of two from 64 up (not the 300 fixed rows), each captured once, rising.
    assert!(!rows.is_empty() && rows[0] >= 64 && rows.iter().all(|r| r.is_power_of_two()) && rows.windows(2).all(|w| w[0] < w[1]), "{rows:?}\n{log}");
    // One graph at a time (the manifest's max_graphs is 1): each rise drops the last count's.
    assert_eq!(log.matches("cuda_graph: capture invalidated (the target rows grew from").count(), rows.len() - 1, "{log}");
    assert!(!log.contains("falling back to eager") && !log.contains("max_graphs"), "{log}");
    let weights = |name: &str| std::fs::read(dir.path().join(name).join("weights/last.safetensors")).unwrap();
    assert!(weights("eager") == weights("grow"), "growing rows under capture trained differently from eager");
}

/// YOLOX from its shipped manifest: the whole step captured, SimOTA included (LibreYOLO runs
/// it eagerly); at mosaic close `loss.yolox` adds its L1 term, so its kind re-captures without
/// any manifest marking; the run equals eager bit for bit, and the L1 term appears only then.
#[test]
fn yolox_captures_its_whole_step_and_recaptures_when_l1_starts() {
    let dir = tempfile::tempdir().unwrap();
    let two_epochs = ["epochs=2", "no_aug_epochs=1"];
    let (ok, log) = train_manifest("manifests/yoloxt.toml", dir.path(), "eager", &two_epochs, &[]);
    assert!(ok, "{log}");
    let graphed = [&two_epochs[..], &["cuda_graph=true"]].concat();
    let (ok, log) = train_manifest("manifests/yoloxt.toml", dir.path(), "graph", &graphed, &[]);
    assert!(ok, "{log}");
    assert_eq!(log.matches("capture invalidated (mosaic closed at epoch 2; stage `loss` asked to re-capture)").count(), 1, "{log}");
    let captured = "cuda_graph: captured training step [forward, loss, backward(forward+loss), optimizer, ema] at input shape [16, 3, 64, 64]";
    assert_eq!(log.matches(captured).count(), 2, "{log}");
    assert!(!log.contains("falling back to eager"), "{log}");
    let weights = |name: &str| std::fs::read(dir.path().join(name).join("weights/last.safetensors")).unwrap();
    assert!(weights("eager") == weights("graph"), "the captured YOLOX step trained differently from eager");
    let results = std::fs::read_to_string(dir.path().join("graph/results.csv")).unwrap();
    let mut rows = results.lines();
    let header: Vec<&str> = rows.next().unwrap().split(',').collect();
    assert_eq!(&header[1..5], ["train/iou_loss", "train/obj_loss", "train/cls_loss", "train/l1_loss"]);
    let l1: Vec<f64> = rows.map(|r| r.split(',').nth(4).unwrap().parse().unwrap()).collect();
    assert!(l1[0] == 0.0 && l1[1] > 0.0, "L1 only after mosaic closes: {l1:?}");
}

#[test]
fn a_plan_this_build_cannot_capture_says_why_and_trains_eager() {
    let dir = tempfile::tempdir().unwrap();
    // A backward captured without its forward: an eager forward's tape is new every step, so
    // its backward cannot be a graph.
    let (ok, log) = train(
        dir.path(),
        "backward-only",
        &["cuda_graph=true", "stage.forward.capture=false", "stage.loss.capture=false", "stage.optimizer.capture=false", "stage.ema.capture=false"],
    );
    assert!(ok, "{log}");
    assert_eq!(log.matches("cuda_graph=true ignored (the backward of forward+loss runs eager: its forward ran eager, so it has no graph to differentiate); training runs eager.").count(), 1, "{log}");
    // Gradient accumulation is not captured.
    let (ok, log) = train(dir.path(), "accumulate", &["cuda_graph=true", "nbs=64"]);
    assert!(ok, "{log}");
    assert!(log.contains("cuda_graph=true ignored (gradient accumulation (4 micro-batches per step) is not captured); training runs eager."), "{log}");
}

/// Validation in a captured run replays its own graphs (the batch shape and the last partial
/// one) and scores exactly like eager validation: LibreYOLO's weights from the parity fixture
/// give real detections to compare.
#[test]
fn validation_replays_its_forward_like_eager() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = std::env::var_os("LIBREYOLO_PARITY_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/parity"))
        .join("yolo9t_nc80.safetensors");
    let weights = format!("weights={}", fixture.display());
    let common = ["val=true", "eval_interval=1", "batch=48", "aux_weight=0", weights.as_str()];
    let (ok, log) = train(dir.path(), "eager", &common);
    assert!(ok, "{log}");
    let mut graphed = common.to_vec();
    graphed.extend(["cuda_graph=true"]);
    let (ok, log) = train(dir.path(), "graph", &graphed);
    assert!(ok, "{log}");
    assert!(log.contains("cuda_graph: captured validation forward at input shape [48, 3, 64, 64]"), "{log}");
    assert!(log.contains("cuda_graph: captured validation forward at input shape [32, 3, 64, 64]"), "{log}");
    // Everything but the timing columns (images/s, seconds) is equal, detections included.
    let row = |name: &str| -> Vec<String> {
        let text = std::fs::read_to_string(dir.path().join(name).join("results.csv")).unwrap();
        let cells: Vec<String> = text.lines().nth(1).unwrap().split(',').map(str::to_string).collect();
        cells.iter().enumerate().filter(|(i, _)| *i != 5 && *i != 6).map(|(_, c)| c.clone()).collect()
    };
    let (eager, graph) = (row("eager"), row("graph"));
    assert_eq!(eager, graph);
    assert!(eager[6].parse::<f64>().unwrap() > 0.0, "mAP50 should be above 0 with these weights: {eager:?}");
}

/// The seam table (docs/manifest.md): markings of the YOLOv9-t step, each compiled into its
/// graphs and eager items, trained for one epoch through software graphs, each like eager:
/// bit for bit where the arithmetic is the same, within 2% over the epoch where a cut inside the
/// network sums its branches in another order (its first step exact; bit for bit against the
/// same program run eager).
/// A seam-table row: name, captured stages, extra overrides, graphs, the program's region.
type SeamRow = (&'static str, &'static [&'static str], &'static [&'static str], usize, &'static str);

#[test]
fn every_seam_of_the_table_trains_like_eager() {
    const STAGES: [&str; 5] = ["forward", "loss", "backward", "optimizer", "ema"];
    // (name, captured stages, extra overrides, graphs, the program's region)
    let table: [SeamRow; 11] = [
        ("whole step", &["forward", "loss", "backward", "optimizer", "ema"], &[], 1, "[forward, loss, backward(forward+loss), optimizer, ema]"),
        ("forward", &["forward"], &[], 2, "[forward] loss, backward(loss) [backward(forward)]"),
        ("forward+loss", &["forward", "loss"], &[], 2, "[forward, loss] [backward(forward+loss)]"),
        ("forward+loss+backward", &["forward", "loss", "backward"], &[], 1, "[forward, loss, backward(forward+loss)]"),
        ("loss", &["loss"], &[], 2, "[loss] [backward(loss)]"),
        ("contract+update", &["forward", "backward", "optimizer", "ema"], &[], 2, "[forward] loss, backward(loss) [backward(forward), optimizer, ema]"),
        ("backward+optimizer", &["backward", "optimizer"], &[], 1, "[optimizer]"),
        ("optimizer+ema", &["optimizer", "ema"], &[], 1, "[optimizer, ema]"),
        ("two segments", &["forward", "optimizer", "ema"], &[], 3, "[forward] loss, backward(loss) [backward(forward)] [optimizer, ema]"),
        (
            "until neck",
            &["forward", "backward"],
            &["stage.forward.until=neck.elan_down2"],
            2,
            "[forward(..neck.elan_down2)] forward(neck.elan_down2..), loss, backward(forward(neck.elan_down2..)+loss) [backward(forward(..neck.elan_down2))]",
        ),
        (
            "until neck, the rest captured",
            &["forward", "loss", "backward", "optimizer", "ema"],
            &["stage.forward.until=neck.elan_down2"],
            3,
            "[forward(..neck.elan_down2)] forward(neck.elan_down2..) [loss, backward(loss)] backward(forward(neck.elan_down2..)) [backward(forward(..neck.elan_down2)), optimizer, ema]",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let marks = |captured: &[&str]| -> Vec<String> { STAGES.iter().map(|s| format!("stage.{s}.capture={}", captured.contains(s))).collect() };
    let eager = marks(&[]);
    let (ok, log) = train(dir.path(), "eager", &eager.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(ok, "{log}");
    let weights = |name: &str| std::fs::read(dir.path().join(name).join("weights/last.safetensors")).unwrap();
    let epoch = |name: &str| -> Vec<f64> {
        let text = std::fs::read_to_string(dir.path().join(name).join("results.csv")).unwrap();
        text.lines().nth(1).unwrap().split(',').skip(1).take(3).map(|v| v.parse().unwrap()).collect()
    };
    let first_step = |name: &str| std::fs::read_to_string(dir.path().join(name).join("steps.csv")).unwrap().lines().nth(1).unwrap().to_string();
    for (i, (name, captured, extra, graphs, region)) in table.iter().enumerate() {
        let run = format!("seam{i}");
        let mut args: Vec<String> = vec!["cuda_graph=true".into(), "capture.threshold=2".into()];
        args.extend(marks(captured));
        args.extend(extra.iter().map(|e| e.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, log) = train(dir.path(), &run, &args);
        assert!(ok, "{name}: {log}");
        // The input shape is the first value the region reads (images, maps or gradients).
        let line = format!("cuda_graph: captured training step {region} at input shape [");
        assert_eq!(log.matches(&line).count(), 1, "{name}: expected `{line}` once in\n{log}");
        assert_eq!(region.matches('[').count(), *graphs, "{name}: the table's graph count");
        assert!(!log.contains("falling back to eager") && !log.contains("ignored"), "{name}: {log}");
        if extra.is_empty() {
            assert!(weights("eager") == weights(&run), "{name}: the weights, EMA and optimizer state differ from eager");
        } else {
            assert_eq!(first_step("eager"), first_step(&run), "{name}: the first step");
            for (e, s) in epoch("eager").iter().zip(epoch(&run)) {
                assert!((e - s).abs() / e < 0.02, "{name}: epoch losses {:?} (eager) vs {:?}", epoch("eager"), epoch(&run));
            }
            // The same program never captured (the threshold out of reach) sums the branches in
            // the replay's order: there the replays must be exact.
            let twin = format!("{run}_uncaptured");
            let (ok, log) = train(dir.path(), &twin, &[args.as_slice(), &["capture.threshold=1000000"]].concat());
            assert!(ok && !log.contains("cuda_graph: captured"), "{name}, uncaptured: {log}");
            assert!(weights(&twin) == weights(&run), "{name}: the replays differ from the same program run eager");
        }
    }
}

/// A capture window the backend refuses (it would have allocated inside; injected here by
/// `LIBREYOLO_CAPTURE_REFUSE`) does not end the pass, whose eager items a data-parallel run's
/// other replicas would be waiting in: the pass goes on to the region's end (void), and the whole
/// pass is tried once more after another warm-up run. Refused again, the run trains eager.
/// Either way the weights are eager's, bit for bit.
#[test]
fn a_refused_capture_window_is_passed_again_then_given_up() {
    let dir = tempfile::tempdir().unwrap();
    // Two graphs: `[forward] loss, backward(loss) [backward(forward)]`.
    let forward_row =
        ["stage.forward.capture=true", "stage.loss.capture=false", "stage.backward.capture=false", "stage.optimizer.capture=false", "stage.ema.capture=false"];
    let (ok, log) = train(dir.path(), "eager", &forward_row);
    assert!(ok, "{log}");
    let weights = |name: &str| std::fs::read(dir.path().join(name).join("weights/last.safetensors")).unwrap();
    let captured = [&forward_row[..], &["cuda_graph=true", "capture.threshold=2"]].concat();
    // One refusal: the first pass's first window; the second pass holds.
    let (ok, log) = train_with(dir.path(), "refused_once", &captured, &[("LIBREYOLO_CAPTURE_REFUSE", "1")]);
    assert!(ok, "{log}");
    assert!(log.contains("refused (the graph [forward] refused (LIBREYOLO_CAPTURE_REFUSE)); one more run"), "{log}");
    assert_eq!(log.matches("cuda_graph: captured training step").count(), 1, "{log}");
    assert!(!log.contains("falling back to eager"), "{log}");
    assert!(weights("eager") == weights("refused_once"), "refused once: the weights differ from eager");
    // Three: both windows of the first pass (the pass went on past the first), then the second
    // pass's first: the capture gives up and the run trains eager.
    let (ok, log) = train_with(dir.path(), "refused_thrice", &captured, &[("LIBREYOLO_CAPTURE_REFUSE", "3")]);
    assert!(ok, "{log}");
    assert!(log.contains("capture disabled, falling back to eager: graph capture failed: the graph [forward] refused"), "{log}");
    assert!(!log.contains("cuda_graph: captured training step"), "{log}");
    assert!(weights("eager") == weights("refused_thrice"), "refused thrice: the weights differ from eager");
    // Two: both windows of the first pass; the second pass holds, so the first went on to the end.
    let (ok, log) = train_with(dir.path(), "refused_twice", &captured, &[("LIBREYOLO_CAPTURE_REFUSE", "2")]);
    assert!(ok && log.matches("cuda_graph: captured training step").count() == 1, "{log}");
    assert!(weights("eager") == weights("refused_twice"), "refused twice: the weights differ from eager");
    // A bad value fails at start-up, naming the variable.
    let (ok, log) = train_with(dir.path(), "bad", &captured, &[("LIBREYOLO_CAPTURE_REFUSE", "some")]);
    assert!(!ok && log.contains("LIBREYOLO_CAPTURE_REFUSE=\"some\""), "{log}");
}

/// The first `n` images of COCO128 with their labels, as a dataset of their own in `dir`.
fn coco128_subset(dir: &Path, n: usize) -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/coco128");
    let (images, labels) = (dir.join("images"), dir.join("labels"));
    std::fs::create_dir_all(&images).unwrap();
    std::fs::create_dir_all(&labels).unwrap();
    let mut files: Vec<_> = std::fs::read_dir(src.join("images/train2017")).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    for image in files.into_iter().take(n) {
        let stem = image.file_stem().unwrap().to_string_lossy().into_owned();
        std::fs::copy(&image, images.join(image.file_name().unwrap())).unwrap();
        let label = src.join("labels/train2017").join(format!("{stem}.txt"));
        if label.exists() {
            std::fs::copy(&label, labels.join(format!("{stem}.txt"))).unwrap();
        }
    }
    let names: Vec<String> = std::fs::read_to_string(src.join("names.txt")).unwrap().lines().map(|l| format!("'{l}'")).collect();
    let yaml = dir.join("data.yaml");
    std::fs::write(&yaml, format!("path: .\ntrain: images\nval: images\nnc: {}\nnames: [{}]\n", names.len(), names.join(", "))).unwrap();
    yaml
}

/// RT-DETR's decoder captured: the denoising queries, drawn on the host by their own stage,
/// reach the forward's graph as inputs, and the Hungarian loss runs eager between the forward's
/// graph and the backward's, reading this step's labels (a host value, never held by a graph).
/// LibreYOLO's contract (the shipped marking: the network captured up to the encoder's last
/// layer) too. Each trains like eager: every step's loss terms within 1e-5 (the split backward
/// sums a map's gradients in another order than one backward does: the last printed digit).
#[test]
fn rtdetr_captures_its_decoder_and_trains_like_eager() {
    let dir = tempfile::tempdir().unwrap();
    let data = coco128_subset(&dir.path().join("data"), 32);
    let run = |name: &str, extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_libreyolo-run"))
            .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."))
            .env("LIBREYOLO_LOG", "info")
            .env("LIBREYOLO_CAPTURE_SOFTWARE", "1")
            .arg("manifests/rtdetrr18.toml")
            .arg(format!("data={}", data.display()))
            .args(["epochs=1", "imgsz=128", "batch=8", "device=cpu", "workers=2", "val=false", "capture.threshold=2"])
            .arg(format!("project={}", dir.path().display()))
            .arg(format!("name={name}"))
            .args(extra)
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{name}: {log}");
        assert!(!log.contains("falling back to eager"), "{name}: {log}");
        log
    };
    let steps = |name: &str| -> Vec<Vec<f64>> {
        let text = std::fs::read_to_string(dir.path().join(name).join("steps.csv")).unwrap();
        text.lines().skip(1).map(|l| l.split(',').skip(3).take(3).map(|v| v.parse().unwrap()).collect()).collect()
    };
    let like_eager = |name: &str| {
        let (eager, run) = (steps("eager"), steps(name));
        assert_eq!(eager.len(), 4, "32 images at batch 8");
        let close = eager.iter().flatten().zip(run.iter().flatten()).all(|(e, r)| (e - r).abs() <= 1e-5 * e.abs() + 2e-6);
        assert!(close && eager.len() == run.len(), "{name}: step losses {run:?}, eager {eager:?}");
    };
    run("eager", &["cuda_graph=false"]);
    // the decoder captured: the forward's cut taken out
    let log = run("decoder", &["cuda_graph=true", "stage.forward.until="]);
    let line = "cuda_graph: captured training step [forward] loss, backward(loss) [backward(forward), clip, optimizer, ema] at input shape [8, 3, 128, 128]";
    assert_eq!(log.matches(line).count(), 1, "expected `{line}` once in\n{log}");
    like_eager("decoder");
    let log = run("contract", &["cuda_graph=true"]);
    assert_eq!(log.matches("cuda_graph: captured training step [forward(..encoder.pan_blocks.1)]").count(), 1, "{log}");
    like_eager("contract");
}
