//! YOLOv9 parity with LibreYOLO 1.6 on the fixture of `LIBREYOLO_PARITY_DIR` (default
//! `../shared/parity`): parameter counts, state-dict keys, init values, weights files, and the
//! full report of `libreyolo_run::parity` (eval and train maps, decoded predictions, BatchNorm
//! statistics, the TAL assignment, loss terms and gradients) within the fixture's tolerances.

use std::path::PathBuf;

use burn::tensor::{Device, Tensor};
use libreyolo_families::{Network, ParamStore, Value};
use libreyolo_run::manifest::{self, LoadedManifest};
use libreyolo_run::parity::{
    self,
    fixture::{self, Fixture, max_abs_diff, read},
};

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
    libreyolo_families::weights::load_safetensors(&mut params, &fixture::default_dir().join("yolo9t_nc80.safetensors"), false).unwrap();
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

/// Sizes s, m and c against LibreYOLO 1.6's own models (tests/fixtures/make_keys_fixture.py):
/// parameter counts with and without the PGI branch, and every state_dict key and shape in order.
#[test]
fn every_manifest_size_matches_libreyolo_keys_and_counts() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/yolo9_keys.json");
    let fixture: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for size in ["s", "m", "c"] {
        let expected = &fixture["sizes"][size];
        let manifest = format!("yolo9{size}.toml");
        let (_, params) = build(&manifest, 80, false);
        assert_eq!(params.num_parameters() as u64, expected["num_parameters"].as_u64().unwrap(), "{size}");
        let (_, with_aux) = build(&manifest, 80, true);
        assert_eq!(with_aux.num_parameters() as u64, expected["num_parameters_with_aux"].as_u64().unwrap(), "{size} with PGI");
        let keys = libreyolo_run::parity::fixture::keys_and_shapes(&expected["keys"]);
        let ours: Vec<(String, Vec<usize>)> = params.entries().iter().map(|e| (e.name.clone(), e.value.shape())).collect();
        assert_eq!(ours, keys, "{size}: state_dict keys and shapes");
    }
}

#[test]
fn state_dict_keys_match_libreyolo() {
    let keys: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fixture::default_dir().join("yolo9t_nc80.keys.json")).unwrap()).unwrap();
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

#[test]
fn eval_train_loss_and_gradients_match_on_cpu() {
    let (net, params) = build("yolo9t.toml", 80, false);
    let report = parity::run(&fixture::default_dir(), &net, &params, &Device::flex(), None).unwrap();
    eprintln!("{}", serde_json::to_string_pretty(&report).unwrap());
    let failures = report.failures();
    assert!(failures.is_empty(), "parity failures: {failures:#?}");
}

/// `parity --loss-device`: the loss on a device of its own, its map gradients carried back and
/// chained through the network, gives the same figures (here both devices are the CPU).
#[test]
fn loss_on_its_own_device_matches_through_the_chain_rule() {
    let (net, params) = build("yolo9t.toml", 80, false);
    let report = parity::run(&fixture::default_dir(), &net, &params, &Device::flex(), Some(&Device::flex())).unwrap();
    assert!(report.device.contains("loss on"), "{}", report.device);
    let failures = report.failures();
    assert!(failures.is_empty(), "parity failures: {failures:#?}");
    assert!(report.loss.grads.len() == 16 && report.loss.grads_max_rel < 1e-3);
}

#[test]
fn init_overlay_gives_libreyolo_scratch_init() {
    // Our fresh init has LibreYOLO's BN, box-bias and class-bias values exactly.
    let (_, ours) = build("yolo9t.toml", 80, false);
    let overlay = Fixture::open(&fixture::default_dir().join("yolo9t_nc80_init.safetensors")).unwrap();
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
            (Value::Float(x), Value::Float(y)) => assert_eq!(max_abs_diff(&read(&x.flat()).1, &read(&y.flat()).1), 0.0),
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

/// A LibreYOLO `.pt` checkpoint (state dict under `model`, made by
/// tests/fixtures/make_pt_fixture.py from the fixture's weights, a head bias stored as float16)
/// loads through burn-store's pickle reader with the same values as the safetensors file.
#[test]
fn libreyolo_pt_checkpoints_load() {
    let pt = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/yolo9t_subset.pt");
    let (_, mut ours) = build("yolo9t.toml", 80, false);
    let report = libreyolo_families::weights::load_pytorch(&mut ours, &pt, true).unwrap();
    assert_eq!(report.loaded, 5);
    let (_, expected) = fixture_model();
    for key in ["backbone.conv0.conv.weight", "backbone.conv0.bn.weight", "backbone.conv0.bn.running_var", "head.cv3.0.2.bias"] {
        let id = ours.find(key).unwrap();
        let (a, b) = match (&ours.entry(id).value, &expected.entry(id).value) {
            (Value::Float(x), Value::Float(y)) => (read(&x.flat()).1, read(&y.flat()).1),
            _ => panic!("{key}: kinds differ"),
        };
        // float16 storage rounds the head bias; everything else is exact.
        let tol = if key.starts_with("head") { 1e-2 } else { 0.0 };
        assert!(max_abs_diff(&a, &b) <= tol, "{key}: {}", max_abs_diff(&a, &b));
    }
    let count = ours.find("backbone.conv0.bn.num_batches_tracked").unwrap();
    assert!(matches!((&ours.entry(count).value, &expected.entry(count).value), (Value::Count(a), Value::Count(b)) if a == b));
    // A strict load names what the file lacks.
    let err = libreyolo_families::weights::load_pytorch(&mut ours, &pt, false).unwrap_err().to_string();
    assert!(err.contains("missing key(s)") && err.contains("backbone.conv1.conv.weight"), "{err}");
    // A file that is not a checkpoint is a clear error.
    let err =
        libreyolo_families::weights::load_pytorch(&mut ours, &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"), false).unwrap_err().to_string();
    assert!(err.contains("not a readable PyTorch checkpoint"), "{err}");
}

/// Inference fusion (LibreYOLO's `fuse()`): every Conv-BN folded into one convolution, every
/// RepConvN into one 3x3 convolution. With the fixture's trained weights and BatchNorm
/// statistics the fused eval maps equal the unfused ones, and the fused network has LibreYOLO's
/// fused parameter count.
#[test]
fn fused_inference_matches_unfused_and_libreyolo_count() {
    let (net, params) = fixture_model();
    let device = Device::flex();
    let x = Tensor::<4>::random([2, 3, 96, 128], burn::tensor::Distribution::Uniform(0.0, 1.0), &device);
    let plain = net.forward(x.clone(), &libreyolo_families::Ctx::eval(&params), false).main;
    let cx = libreyolo_families::Ctx::eval_fused(&params, None);
    let fused = net.forward(x, &cx, false).main;
    assert_eq!(cx.fused_parameters(&params), 2_001_824);
    for (p, f) in plain.into_iter().zip(fused) {
        let scale: f32 = p.clone().abs().max().into_scalar();
        let err: f32 = p.sub(f).abs().max().into_scalar();
        assert!(err <= 1e-4 * scale.max(1.0), "fused map differs by {err} (max |map| {scale})");
    }
}

/// Fusion of a store already cast to bf16 (what `bench network --dtype bf16` holds): the folding
/// still runs in f32 (it pads the 1x1 kernel into a 3x3 of `Tensor::zeros`, which is f32, so a
/// bf16 fold failed on the GPU with a dtype mismatch), and the maps come back in bf16, as close
/// to the unfused bf16 maps as those are to the f32 ones.
#[test]
fn fused_inference_of_a_bf16_store_folds_in_f32() {
    use burn::tensor::FloatDType::{BF16, F32};
    let (net, params) = fixture_model();
    let device = Device::flex();
    // The fixture's input, not a fresh random one: the bound below compares two bf16 errors,
    // whose ratio depends on the input (a random input failed it once in CI).
    let x = Fixture::io(&fixture::default_dir()).unwrap().images(&device);
    let exact = net.forward(x.clone(), &libreyolo_families::Ctx::eval(&params), false).main;
    let mut half = params.clone();
    half.cast(BF16);
    let plain = net.forward(x.clone().cast(BF16), &libreyolo_families::Ctx::eval(&half), false).main;
    let cx = libreyolo_families::Ctx::eval_fused(&half, None);
    let fused = net.forward(x.cast(BF16), &cx, false).main;
    for ((e, p), f) in exact.into_iter().zip(plain).zip(fused) {
        assert_eq!(f.dtype(), burn::tensor::DType::BF16);
        let bf16_err: f32 = e.clone().sub(p.cast(F32)).abs().max().into_scalar();
        let fused_err: f32 = e.clone().sub(f.cast(F32)).abs().max().into_scalar();
        let scale: f32 = e.clone().abs().max().into_scalar();
        eprintln!("max |map| {scale}: max |f32 - bf16| unfused {bf16_err}, fused {fused_err}");
        assert!(fused_err <= 1.5 * bf16_err, "bf16 fused map differs by {fused_err}, unfused bf16 by {bf16_err}");
    }
}
