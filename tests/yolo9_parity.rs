//! YOLOv9 network parity with LibreYOLO 1.6 on the fixture of `LIBREYOLO_PARITY_DIR`:
//! parameter counts, state-dict keys, eval and train maps, decoded predictions and BatchNorm
//! running statistics (tolerances from yolo9t_fixture.md section 5).

mod support;

use std::path::PathBuf;

use burn::tensor::Device;
use libreyolo_families::{Ctx, Network, ParamStore, Value};
use libreyolo_run::manifest::{self, LoadedManifest};
use support::fixture::{self, Fixture, max_abs_diff, read, select_rows};

fn loaded(name: &str, overrides: &[&str]) -> LoadedManifest {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../manifests").join(name);
    let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    manifest::load(&path, &overrides).unwrap()
}

fn build(name: &str, nc: usize, with_aux: bool) -> (Network, ParamStore) {
    libreyolo_run::network::build(&loaded(name, &[]), nc, with_aux, &Device::flex()).unwrap()
}

/// YOLOv9-t with the fixture's weights.
fn fixture_model() -> (Network, ParamStore) {
    let (net, mut params) = build("yolo9t.toml", 80, false);
    libreyolo_families::weights::load_safetensors(&mut params, &fixture::path("yolo9t_nc80.safetensors"), false).unwrap();
    (net, params)
}

#[test]
fn parameter_counts_match_libreyolo() {
    assert_eq!(build("yolo9t.toml", 80, false).1.num_parameters(), 2_036_544);
    assert_eq!(build("yolo9t.toml", 80, true).1.num_parameters(), 2_905_488);
    assert_eq!(build("yolo9s.toml", 80, false).1.num_parameters(), 7_226_192);
    // The class tower is max(ch0, min(nc, 100)) wide: 64 for nc = 2 at size t.
    assert_eq!(build("yolo9t.toml", 2, false).1.num_parameters(), 1_913_622);
}

#[test]
fn state_dict_keys_match_libreyolo() {
    let keys: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture::path("yolo9t_nc80.keys.json")).unwrap()).unwrap();
    let expected: Vec<(String, Vec<usize>)> = keys["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            let shape = k["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
            (k["key"].as_str().unwrap().to_string(), shape)
        })
        .collect();
    let (_, params) = build("yolo9t.toml", 80, false);
    let ours: Vec<(String, Vec<usize>)> = params.entries().iter().map(|e| (e.name.clone(), e.value.shape())).collect();
    assert_eq!(ours.len(), expected.len());
    for (a, b) in ours.iter().zip(&expected) {
        assert_eq!(a, b);
    }
}

/// Compares `ours` (B, ...) with the fixture tensor `name`, which holds the batch elements
/// listed in `index_name`.
fn assert_maps_close(ours: &[f32], batch: usize, fx: &Fixture, name: &str, index_name: &str, atol: f64) {
    let expected = fx.get(name);
    let index: Vec<usize> = fx.get(index_name).values.iter().map(|v| *v as usize).collect();
    let row = ours.len() / batch;
    let picked = select_rows(ours, row, &index);
    let diff = max_abs_diff(&picked, &expected.to_f32());
    eprintln!("{name}: max |diff| = {diff:.3e}");
    assert!(diff <= atol, "{name}: max |diff| {diff:e} > {atol:e}");
}

/// Per (batch, channel) sums over H, W compared with the f64 checksums of every element.
fn assert_sums_close(ours: &[f32], dims: &[usize], fx: &Fixture, name: &str, atol_per_value: f64) {
    let expected = fx.get(name);
    let per = dims[2..].iter().product::<usize>();
    let sums: Vec<f32> = ours.chunks(per).map(|c| c.iter().map(|v| *v as f64).sum::<f64>() as f32).collect();
    let diff = max_abs_diff(&sums, &expected.to_f32());
    assert!(diff <= atol_per_value * per as f64, "{name}: max |diff| {diff:e}");
}

#[test]
fn eval_maps_and_predictions_match() {
    let fx = Fixture::io();
    let (net, params) = fixture_model();
    let images = fx.images(&Device::flex());
    let batch = images.dims()[0];
    let cx = Ctx::eval(&params);
    let maps = net.forward(images, &cx, false).main;
    for (i, map) in maps.iter().enumerate() {
        let (dims, values) = read(map);
        assert_maps_close(&values, batch, &fx, &format!("eval_p{}", i + 3), "eval_index", 1e-4);
        assert_sums_close(&values, &dims, &fx, &format!("eval_p{}_sum", i + 3), 1e-4);
    }
    let (dims, pred) = read(&net.head().decode(&maps));
    let expected = fx.get("eval_pred");
    let index: Vec<usize> = fx.get("eval_pred_index").values.iter().map(|v| *v as usize).collect();
    let picked = select_rows(&pred, dims[1] * dims[2], &index);
    let (a, rows) = (dims[2], dims[1]);
    let (mut box_diff, mut score_diff) = (0f64, 0f64);
    for (k, (x, y)) in picked.iter().zip(expected.to_f32()).enumerate() {
        let row = (k / a) % rows;
        let d = (*x as f64 - y as f64).abs();
        if row < 4 { box_diff = box_diff.max(d) } else { score_diff = score_diff.max(d) }
    }
    eprintln!("eval_pred: boxes max |diff| {box_diff:.3e} px, scores {score_diff:.3e}");
    assert!(box_diff <= 2e-3, "boxes differ by {box_diff} px");
    assert!(score_diff <= 1e-5, "scores differ by {score_diff}");
}

#[test]
fn train_maps_and_batchnorm_statistics_match() {
    let fx = Fixture::io();
    let (net, mut params) = fixture_model();
    let images = fx.images(&Device::flex());
    let batch = images.dims()[0];
    let cx = Ctx::train(&params);
    let maps = net.forward(images, &cx, false).main;
    for (i, map) in maps.iter().enumerate() {
        let (dims, values) = read(map);
        assert_maps_close(&values, batch, &fx, &format!("train_p{}", i + 3), "train_index", 1e-4);
        assert_sums_close(&values, &dims, &fx, &format!("train_p{}_sum", i + 3), 1e-4);
    }
    params.apply_batch_stats(cx.take_batch_stats(), libreyolo_families::blocks::batch_norm::MOMENTUM);
    for layer in ["backbone.elan2.cv1.bn", "head.cv3.2.1.bn"] {
        for stat in ["running_mean", "running_var"] {
            let key = format!("{layer}.{stat}");
            let expected = fx.get(&format!("bn_after_train.{key}")).to_f32();
            let id = params.find(&key).unwrap();
            let (_, ours) = read(params.rank1(id));
            let scale = expected.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
            let diff = max_abs_diff(&ours, &expected);
            eprintln!("{key}: max |diff| {diff:.3e} (max value {scale:.3e})");
            assert!(diff <= 1e-5 * scale + 1e-9, "{key}: {diff:e}");
        }
        let count = params.find(&format!("{layer}.num_batches_tracked")).unwrap();
        let expected = fx.get(&format!("bn_after_train.{layer}.num_batches_tracked")).scalar() as i64;
        assert!(matches!(params.entry(count).value, Value::Count(n) if n == expected));
    }
}

#[test]
fn init_overlay_gives_libreyolo_scratch_init() {
    // Our fresh init has LibreYOLO's BN, box-bias and class-bias values exactly.
    let (_, ours) = build("yolo9t.toml", 80, false);
    let overlay = Fixture::open("yolo9t_nc80_init.safetensors");
    for key in ["backbone.conv0.bn.weight", "backbone.conv0.bn.running_var", "head.cv2.0.2.bias", "head.cv3.2.2.bias"] {
        let (_, values) = read(ours.rank1(ours.find(key).unwrap()));
        assert_eq!(max_abs_diff(&values, &overlay.get(key).to_f32()), 0.0, "{key}");
    }
}

#[test]
fn weights_round_trip_and_mismatches_are_listed() {
    let (_, params) = fixture_model();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("w.safetensors");
    libreyolo_families::weights::save_safetensors(&params, &file).unwrap();
    let (_, mut again) = build("yolo9t.toml", 80, false);
    libreyolo_families::weights::load_safetensors(&mut again, &file, false).unwrap();
    for (a, b) in params.entries().iter().zip(again.entries()) {
        match (&a.value, &b.value) {
            (Value::Rank4(x), Value::Rank4(y)) => assert_eq!(max_abs_diff(&read(x).1, &read(y).1), 0.0),
            (Value::Rank1(x), Value::Rank1(y)) => assert_eq!(max_abs_diff(&read(x).1, &read(y).1), 0.0),
            (Value::Count(x), Value::Count(y)) => assert_eq!(x, y),
            _ => panic!("kinds differ for {}", a.name),
        }
    }
    // A model of another width: every mismatch class is reported with the keys.
    let (_, mut small) = build("yolo9t.toml", 2, false);
    let err = libreyolo_families::weights::load_safetensors(&mut small, &file, false).unwrap_err().to_string();
    assert!(err.contains("mis-shaped key(s)"), "{err}");
    assert!(err.contains("head.cv3.0.2.weight: network [2, 64, 1, 1], file [80, 80, 1, 1]"), "{err}");
    let (_, mut with_aux) = build("yolo9t.toml", 80, true);
    let err = libreyolo_families::weights::load_safetensors(&mut with_aux, &file, false).unwrap_err().to_string();
    assert!(err.contains("missing key(s)") && err.contains("aux.spp.cv1.conv.weight"), "{err}");
}
