//! RT-DETR's network against LibreYOLO 1.6 on the CPU (fixtures of
//! tests/fixtures/make_rtdetr_fixture.py): the RT-DETR-r18 topology gives LibreYOLO's
//! state_dict keys, shapes and parameter count; a narrow RT-DETR-r18 (its layout at an eighth of
//! its widths) with the fixture's weights gives LibreYOLO's decoder outputs in eval mode and in
//! train mode (every decoder layer and the encoder's top-k queries), its BatchNorm running
//! statistics after the train-mode forward, and the gradient of every parameter under a fixed
//! random linear function of the train-mode outputs.

use burn::tensor::{Device, Tensor, TensorData};
use libreyolo_families::Ctx;
use libreyolo_run::parity::fixture::{Fixture, check_running_stats, fixture_network, keys_and_shapes, network_in, project_dir, read, rel_err};

/// Decoder outputs, relative to the largest value: the deformable attention's bilinear weights
/// and the top-k choice read float rounding from the whole network; measured ~1e-6.
const OUTPUTS: f64 = 1e-4;
/// Each gradient, relative to its largest value or a thousandth of the largest gradient.
const GRADS: f64 = 1e-3;

#[test]
fn rtdetr_r18_matches_libreyolo_keys_and_count() {
    let fixture: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(project_dir().join("rtdetr_keys.json")).unwrap()).unwrap();
    let (_, params) = fixture_network("rtdetr_r18", 80);
    assert_eq!(params.num_parameters() as u64, fixture["parameters"].as_u64().unwrap(), "RT-DETR-r18 parameters");
    assert_eq!(params.num_parameters(), 20_184_464);
    // The topology lists the encoder's layers in data-flow order (lateral, fusion, lateral, ...)
    // where the state dict groups them by kind: the same keys in another order.
    let mut ours: Vec<(String, Vec<usize>)> = params.entries().iter().map(|e| (e.name.clone(), e.value.shape())).collect();
    let mut theirs = keys_and_shapes(&fixture["keys"]);
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs, "RT-DETR-r18: state_dict keys and shapes");
}

#[test]
fn narrow_rtdetr_outputs_batch_norm_and_gradients_match_libreyolo() {
    let dir = project_dir();
    let io = Fixture::open(&dir.join("rtdetr_narrow_io.safetensors")).unwrap();
    let nc = *io.get("eval_logits").shape.last().unwrap();
    let device = Device::flex();
    let (network, mut params) = network_in(&dir, "rtdetr_narrow", nc, &device).unwrap();
    libreyolo_families::weights::load_safetensors(&mut params, &dir.join("rtdetr_narrow.safetensors"), false).unwrap();
    let pixels = io.get("images_u8");
    let d = &pixels.shape;
    let images = Tensor::<4>::from_data(TensorData::new(pixels.to_f32(), [d[0], d[1], d[2], d[3]]), &device).div_scalar(255.0);

    let eval = network.forward(images.clone(), &Ctx::eval(&params), false).main;
    assert_eq!(eval.len(), 2, "eval: the last layer's boxes and logits");
    let check = |name: &str, ours: &Tensor<4>, tol: f64| {
        let err = rel_err(ours, &io.get(name).to_f32());
        eprintln!("{name}: {:?} relative error {err:.2e}", ours.dims());
        assert!(err < tol, "{name}: relative error {err:.2e} (tolerance {tol:.0e})");
    };
    check("eval_boxes", &eval[0], OUTPUTS);
    check("eval_logits", &eval[1], OUTPUTS);

    let cx = Ctx::train(&params);
    let maps = network.forward(images, &cx, false).main;
    let names = ["boxes", "logits", "enc_boxes", "enc_logits"];
    assert_eq!(maps.len(), names.len(), "train: every layer's boxes and logits, then the encoder's");
    let mut surrogate = Tensor::<1>::zeros([1], &device);
    for (map, name) in maps.iter().zip(names) {
        check(&format!("train_{name}"), map, OUTPUTS);
        let w = io.get(&format!("surrogate.{name}"));
        let w = Tensor::<4>::from_data(TensorData::new(w.to_f32(), map.dims()), &device);
        surrogate = surrogate.add(map.clone().mul(w).sum());
    }
    let want = io.get("surrogate").scalar();
    let got = read(&surrogate).1[0] as f64;
    assert!((got - want).abs() / want.abs() < OUTPUTS, "surrogate {got} vs LibreYOLO's {want}");

    let grads = libreyolo_run::parity::classifier::gradients(&io, &params, &cx.gradients(&surrogate.backward())).unwrap();
    assert_eq!(grads.len(), 325, "every trained parameter's gradient is in the fixture");
    let worst = grads.iter().cloned().fold((String::new(), 0.0), |m, g| if g.1 > m.1 { g } else { m });
    eprintln!("surrogate {got} (LibreYOLO {want}); worst gradient: {} {:.2e}", worst.0, worst.1);
    assert!(worst.1 < GRADS, "d surrogate / d {}: error {:.2e} (tolerance {GRADS:.0e})", worst.0, worst.1);

    params.apply_batch_stats(cx.take_batch_stats());
    assert_eq!(check_running_stats(&io, &params, "after_train", 1e-4), 69 * 3, "running mean, var and count of every BatchNorm");
}
