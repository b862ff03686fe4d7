//! The training profiler on the CPU: `profile run` fills its window and writes valid artifacts
//! (profile.json, profile_summary.json, a trace in the trace-event format, a self-contained
//! timeline.html); the analysis commands read them; `profile=true` in a normal run measures its
//! window and training goes on.

use std::path::{Path, PathBuf};
use std::process::Command;

use libreyolo_run::profile::{artifacts, trace};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_libreyolo-run"));
    c.current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")).env("LIBREYOLO_LOG", "warn");
    c
}

/// COCO128 beside this checkout (the shipped manifests leave the dataset to the command line).
fn coco128() -> String {
    format!("data={}", PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/coco128/coco128.yaml").display())
}

fn small(project: &Path) -> Vec<String> {
    ["imgsz=64", "batch=8", "device=cpu", "workers=2", "cache=ram", "profile.warmup=2", "profile.steps=6"]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("project={}", project.display()), coco128()])
        .collect()
}

#[test]
fn profile_run_writes_valid_artifacts_and_a_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let out = bin().args(["profile", "run", "manifests/yolo9t.toml"]).args(small(dir.path())).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("Profile-only run"), "{stderr}");
    assert!(stderr.contains("verdict: "), "{stderr}");
    let run = dir.path().join("prof");

    // profile.json: the schema, the window split in halves, the phases of the manifest.
    let p = artifacts::read(&run.join("profile.json")).unwrap();
    assert_eq!((p.window.warmup, p.window.real_steps, p.window.synced_steps), (2, 3, 3));
    let phases: Vec<&str> = p.phases.iter().map(|r| r.phase.as_str()).collect();
    for ph in ["dataload", "data", "forward", "loss", "backward", "optimizer", "ema", "schedule", "readback"] {
        assert!(phases.contains(&ph), "phase {ph} missing from {phases:?}");
    }
    assert!(p.real.step_ms > 0.0 && p.real.img_per_s > 0.0);
    // `cuda_graph=auto` on the CPU: no graphs, so no step replayed one.
    assert!(!p.meta.capture && p.window.replayed_steps == 0);
    // Both from the real half (steps under half the median left out: the analysis unit tests).
    assert!(0.0 < p.real.step_ms_min && p.real.step_ms_min <= p.real.step_ms_median);
    assert!((p.real.img_per_s - 8.0 / (p.real.step_ms / 1000.0)).abs() < 1e-6);
    assert!(p.composition_total_ms > 0.0);
    // No kernel view on the CPU: utilisation is 0, so the verdict is host / launch unless the
    // loader took a fifth of the step.
    assert!(p.kernel_timing.is_none());
    let expected = if p.real.dataload_frac >= 0.2 { "dataloader" } else { "host / launch" };
    assert_eq!(p.bound, expected, "{}", p.bound_why);
    assert!(p.probe_overhead_us_per_step < 1000.0, "probes cost {} us per step", p.probe_overhead_us_per_step);

    // The trace follows the trace-event format and holds every measured step.
    let t: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(run.join("profile_trace.json")).unwrap()).unwrap();
    let n = trace::validate(&t).unwrap();
    let steps = t["traceEvents"].as_array().unwrap().iter().filter(|e| e["cat"] == "step").count();
    assert_eq!(steps, 6);
    assert!(n > 6 * 8);

    // The summary is JSON with the headline; the timeline embeds its data and needs no network.
    let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(run.join("profile_summary.json")).unwrap()).unwrap();
    assert_eq!(s["bound"], p.bound);
    let html = std::fs::read_to_string(run.join("timeline.html")).unwrap();
    let data = html.split("var DATA = ").nth(1).and_then(|r| r.split(";\n").next()).expect("embedded DATA");
    let data: serde_json::Value = serde_json::from_str(data).expect("DATA is JSON");
    assert_eq!(data["analysis"]["bound"], p.bound);
    assert!(data["events"].as_array().unwrap().len() > 6);
    assert!(!html.contains("http://") && !html.contains("https://"), "the page must not load anything");
    // Nothing else is written by a profile-only run.
    assert!(!run.join("weights/last.safetensors").exists());

    // The analysis commands read profile.json.
    let file = run.join("profile.json");
    let out = bin().args(["profile", "summary"]).arg(&file).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("verdict: {}", p.bound)));
    let out = bin().args(["profile", "phases"]).arg(&file).output().unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("forward") && table.contains("backward"), "{table}");
    let out = bin().args(["profile", "kernels", "--top", "5"]).arg(&file).output().unwrap();
    assert!(out.status.success());
    let out = bin().args(["profile", "summary"]).arg(run.join("profile_summary.json")).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a libreyolo-run profile.json"));
}

#[test]
fn profile_true_measures_its_window_then_training_continues() {
    let dir = tempfile::tempdir().unwrap();
    // data.fixed_batch: every step trains on the first batch (step time without the loader).
    let mut args: Vec<String> = vec![
        "manifests/yolo9t.toml".into(),
        coco128(),
        "name=run".into(),
        "epochs=2".into(),
        "val=false".into(),
        "profile=true".into(),
        "data.fixed_batch=true".into(),
    ];
    args.extend(small(dir.path()));
    let out = bin().args(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("Profile window complete; training continues"), "{stderr}");
    let run = dir.path().join("run");
    assert!(run.join("profile.json").exists());
    assert!(run.join("weights/last.safetensors").exists());
    let rows = std::fs::read_to_string(run.join("results.csv")).unwrap().lines().count();
    assert_eq!(rows, 3, "header + 2 epochs");
    // An epoch is its 16 steps (128 images, batch 8) of the one batch, not those followed by
    // the loader's other batches.
    let steps = std::fs::read_to_string(run.join("steps.csv")).unwrap().lines().count();
    assert_eq!(steps, 1 + 2 * 16, "header + 2 epochs of 16 steps");
}

#[test]
fn profile_repeat_aggregates_the_trials() {
    let dir = tempfile::tempdir().unwrap();
    let out = bin().args(["profile", "run", "manifests/yolo9t.toml", "--repeat", "2"]).args(small(dir.path())).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for trial in ["prof_1", "prof_2"] {
        assert!(dir.path().join(trial).join("profile.json").exists(), "{trial}");
    }
    let agg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("profile_repeat.json")).unwrap()).unwrap();
    assert_eq!(agg["img_per_s_n"], 2);
    let trials: Vec<f64> = agg["img_per_s_trials"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    let mean = (trials[0] + trials[1]) / 2.0;
    assert!((agg["img_per_s"].as_f64().unwrap() - mean).abs() < 1e-9);
    assert!((agg["img_per_s_std"].as_f64().unwrap() - (trials[0] - trials[1]).abs() / 2.0).abs() < 1e-9, "population std");
    assert!(stdout.contains("img/s: ") && stdout.contains("(n=2)"), "{stdout}");
}

#[test]
fn a_captured_profile_counts_the_window_steps_that_replayed_the_graph() {
    // Software graphs run the capture path on the CPU: recorded at the threshold's third step,
    // replayed after; the profile says how many measured steps ran the graph.
    let dir = tempfile::tempdir().unwrap();
    let out = bin().args(["profile", "run", "manifests/yolo9t.toml"]).args(small(dir.path())).env("LIBREYOLO_CAPTURE_SOFTWARE", "1").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let p = artifacts::read(&dir.path().join("prof").join("profile.json")).unwrap();
    assert!(p.meta.capture, "software graphs set up");
    let window = p.window.real_steps + p.window.synced_steps;
    assert!(p.window.replayed_steps > 0 && p.window.replayed_steps <= window, "{} of {window}", p.window.replayed_steps);
    assert!(stderr.contains(&format!("captured: {} of {window} window steps replayed the graph", p.window.replayed_steps)), "{stderr}");
}
