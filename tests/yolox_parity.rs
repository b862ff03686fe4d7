//! YOLOX's network against LibreYOLO 1.6 on the CPU (fixtures of
//! tests/fixtures/make_yolox_fixture.py): the topologies of sizes t and s give LibreYOLO's
//! state_dict keys, shapes and parameter counts; a narrow YOLOX (t's layout at a third of its
//! width) with the fixture's weights gives LibreYOLO's raw maps in eval and train mode and its
//! BatchNorm running statistics after the train-mode forward.

use std::path::Path;

use burn::tensor::{Device, Tensor, TensorData};
use libreyolo_families::{Ctx, Network, Value};
use libreyolo_run::parity::fixture::{Fixture, check_running_stats, fixture_network, project_dir as fixtures, read, rel_err};

#[test]
fn sizes_t_and_s_match_libreyolo_keys_and_counts() {
    let fixture: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fixtures().join("yolox_keys.json")).unwrap()).unwrap();
    for size in ["t", "s"] {
        let expected = &fixture["sizes"][size];
        let (_, params) = fixture_network(&format!("yolox{size}"), 80);
        assert_eq!(params.num_parameters() as u64, expected["num_parameters"].as_u64().unwrap(), "YOLOX-{size} parameters");
        let keys = libreyolo_run::parity::fixture::keys_and_shapes(&expected["keys"]);
        let ours: Vec<(String, Vec<usize>)> = params.entries().iter().map(|e| (e.name.clone(), e.value.shape())).collect();
        assert_eq!(ours, keys, "YOLOX-{size}: state_dict keys and shapes, in order");
    }
    // The figure for YOLOX-t at nc = 80.
    assert_eq!(fixture_network("yoloxt", 80).1.num_parameters(), 5_055_855);
}

/// The shipped size manifests (their topology after the `Pixels` input layer) build LibreYOLO's
/// networks: the same keys, shapes and parameter counts as the fixture topologies.
#[test]
fn shipped_manifests_build_libreyolo_yolox() {
    let fixture: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fixtures().join("yolox_keys.json")).unwrap()).unwrap();
    for size in ["t", "s"] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../manifests/yolox{size}.toml"));
        let loaded = libreyolo_run::manifest::load(&path, &[]).unwrap_or_else(|d| panic!("{}", d.render(false)));
        let (_, params) = Network::build(&loaded.manifest.model.layers, 80, false, &Device::flex(), 0).unwrap();
        let expected = &fixture["sizes"][size];
        assert_eq!(params.num_parameters() as u64, expected["num_parameters"].as_u64().unwrap(), "manifests/yolox{size}.toml parameters");
        let ours: Vec<(String, Vec<usize>)> = params.entries().iter().map(|e| (e.name.clone(), e.value.shape())).collect();
        assert_eq!(ours, libreyolo_run::parity::fixture::keys_and_shapes(&expected["keys"]), "manifests/yolox{size}.toml keys");
    }
}

/// LibreYOLO's trainer checkpoint (`.pt`, the network under `model`) of the narrow weights loads
/// every tensor, bit for bit the safetensors file's, and the network computes LibreYOLO's maps.
#[test]
fn a_libreyolo_yolox_checkpoint_loads_like_its_safetensors() {
    let (network, mut from_pt) = fixture_network("yoloxnarrow", 3);
    // Not partial: a missing, unexpected or mis-shaped key is an error.
    let report = libreyolo_families::weights::load_pytorch(&mut from_pt, &fixtures().join("yolox_narrow.pt"), false).unwrap();
    assert_eq!(report.loaded, from_pt.entries().len());
    let (_, mut from_st) = fixture_network("yoloxnarrow", 3);
    libreyolo_families::weights::load_safetensors(&mut from_st, &fixtures().join("yolox_narrow.safetensors"), false).unwrap();
    let values = |v: &Value| match v {
        Value::Float(t) => libreyolo_families::with_rank!(t, t => read(t).1),
        Value::Count(n) => vec![*n as f32],
    };
    for (a, b) in from_pt.entries().iter().zip(from_st.entries()) {
        assert_eq!(a.name, b.name);
        assert!(values(&a.value) == values(&b.value), "{}: the .pt and the safetensors differ", a.name);
    }
    let io = Fixture::open(&fixtures().join("yolox_narrow_io.safetensors")).unwrap();
    let pixels = io.get("images_u8");
    let d = &pixels.shape;
    let images = Tensor::<4>::from_data(TensorData::new(pixels.to_f32(), [d[0], d[1], d[2], d[3]]), &Device::flex());
    let maps = network.forward(images, &Ctx::eval(&from_pt), false).main;
    let err = rel_err(&maps[0], &io.get("eval_p3").to_f32());
    assert!(err < 1e-4, "eval P3 from the .pt weights: {err:.2e}");
}

#[test]
fn narrow_yolox_maps_and_batch_norm_match_libreyolo() {
    let device = Device::flex();
    let (network, mut params) = fixture_network("yoloxnarrow", 3);
    libreyolo_families::weights::load_safetensors(&mut params, &fixtures().join("yolox_narrow.safetensors"), false).unwrap();
    let io = Fixture::open(&fixtures().join("yolox_narrow_io.safetensors")).unwrap();
    let pixels = io.get("images_u8");
    let dims = &pixels.shape;
    // YOLOX's input contract: 0-255, not normalised.
    let images = Tensor::<4>::from_data(TensorData::new(pixels.to_f32(), [dims[0], dims[1], dims[2], dims[3]]), &device);

    let maps = network.forward(images.clone(), &Ctx::eval(&params), false).main;
    assert_eq!(maps.len(), 3);
    for (i, map) in maps.iter().enumerate() {
        let want = io.get(&format!("eval_p{}", i + 3));
        assert_eq!(map.dims().to_vec(), want.shape, "eval P{} shape", i + 3);
        let err = rel_err(map, &want.to_f32());
        assert!(err < 1e-4, "eval P{}: max |ours - LibreYOLO| / max |LibreYOLO| = {err:.2e}", i + 3);
    }
    // The decode: boxes within 1e-4 of the largest coordinate, scores within 1e-5.
    let head = network.head_layer().as_any().downcast_ref::<libreyolo_families::yolox::YOLOXHead>().expect("a YOLOX head");
    let pred = head.decode(&maps);
    let expected = io.get("eval_pred");
    let (want, shape) = (expected.to_f32(), expected.shape);
    assert_eq!(pred.dims().to_vec(), shape, "decoded shape (B, 4 + nc, A)");
    let ours = read(&pred).1;
    let a = shape[2];
    let (mut boxes, mut scores, mut largest) = (0f64, 0f64, 0f64);
    for (k, (x, y)) in ours.iter().zip(&want).enumerate() {
        let d = (*x as f64 - *y as f64).abs();
        if (k / a) % shape[1] < 4 {
            boxes = boxes.max(d);
            largest = largest.max(y.abs() as f64);
        } else {
            scores = scores.max(d);
        }
    }
    assert!(boxes / largest < 1e-4, "decoded boxes: max |ours - LibreYOLO| = {boxes:.2e} px of {largest:.1}");
    assert!(scores < 1e-5, "decoded scores: max |ours - LibreYOLO| = {scores:.2e}");

    let cx = Ctx::train(&params);
    let maps = network.forward(images, &cx, false).main;
    for (i, map) in maps.iter().enumerate() {
        let err = rel_err(map, &io.get(&format!("train_p{}", i + 3)).to_f32());
        assert!(err < 1e-4, "train P{}: max |ours - LibreYOLO| / max |LibreYOLO| = {err:.2e}", i + 3);
    }
    params.apply_batch_stats(cx.take_batch_stats());
    let checked = check_running_stats(&io, &params, "bn_after_train", 1e-4);
    assert!(checked > 100, "only {checked} BatchNorm buffers in the fixture");
}
