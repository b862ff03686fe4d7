//! YOLOv9 loss parity with LibreYOLO 1.6 on the fixture of `LIBREYOLO_PARITY_DIR`: the TAL
//! assignment exactly, the loss terms within 1e-5 relative, gradients within 1e-3 of each
//! tensor's largest value; and proof that the loss never reads a tensor back to the host.

mod support;

use std::path::PathBuf;

use burn::tensor::{Device, Tensor, TensorData};
use libreyolo_families::{Ctx, Network, ParamStore};
use libreyolo_stages::loss::Yolo9Loss;
use libreyolo_stages::loss::assigner::AssignerConfig;
use support::fixture::{self, Fixture, read};

fn model() -> (Network, ParamStore) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../manifests/yolo9t.toml");
    let loaded = libreyolo_run::manifest::load(&path, &[]).unwrap();
    let (net, mut params) = libreyolo_run::network::build(&loaded, 80, false, &Device::flex()).unwrap();
    libreyolo_families::weights::load_safetensors(&mut params, &fixture::path("yolo9t_nc80.safetensors"), false).unwrap();
    (net, params)
}

fn loss_fn() -> Yolo9Loss {
    Yolo9Loss {
        nc: 80,
        reg_max: 16,
        box_gain: 7.5,
        dfl_gain: 1.5,
        cls_gain: 0.5,
        assigner: AssignerConfig { topk: 10, alpha: 0.5, beta: 6.0, reg_max: 16 },
    }
}

fn targets(fx: &Fixture, device: &Device) -> Tensor<3> {
    let t = fx.get("targets");
    Tensor::from_data(TensorData::new(t.to_f32(), [t.shape[0], t.shape[1], t.shape[2]]), device)
}

fn scalar(t: &Tensor<1>) -> f64 {
    read(t).1[0] as f64
}

fn assert_rel(name: &str, ours: f64, expected: f64, rtol: f64) {
    let rel = (ours - expected).abs() / expected.abs().max(1e-12);
    eprintln!("{name}: ours {ours:.7} expected {expected:.7} rel {rel:.2e}");
    assert!(rel <= rtol, "{name}: {ours} vs {expected} (rel {rel:e})");
}

#[test]
fn assignment_losses_and_gradients_match() {
    let fx = Fixture::io();
    let device = Device::flex();
    let (net, params) = model();
    let cx = Ctx::train(&params);
    let maps = net.forward(fx.images(&device), &cx, false).main;
    let loss = loss_fn();
    let terms = loss.compute(&maps, &net.head().strides, targets(&fx, &device));

    // Assignment: exact.
    let (_, positive) = read(&terms.assignment.positive);
    let (_, gt_index) = read(&terms.assignment.gt_index.clone().float());
    let (dims, scores) = read(&terms.assignment.scores.clone().sum_dim(2));
    let a = dims[1];
    let expected_mask = fx.get("tal_valid_mask").values;
    let expected_gt = fx.get("tal_gt_index").values;
    let expected_cls = fx.get("tal_target_cls").values;
    let expected_score = fx.get("tal_target_score").values;
    let tgt = fx.get("targets");
    let m = tgt.shape[1];
    let mut positives = 0;
    for i in 0..positive.len() {
        let is_pos = positive[i] > 0.5;
        assert_eq!(is_pos, expected_mask[i] > 0.5, "valid mask differs at {i}");
        if is_pos {
            positives += 1;
            let g = gt_index[i] as usize;
            assert_eq!(g as f64, expected_gt[i], "gt index differs at {i}");
            let class = tgt.values[((i / a) * m + g) * 5];
            assert_eq!(class, expected_cls[i], "class differs at {i}");
        } else {
            assert_eq!(expected_gt[i], -1.0);
        }
        assert!((scores[i] as f64 - expected_score[i]).abs() <= 1e-5, "target score at {i}: {} vs {}", scores[i], expected_score[i]);
    }
    assert_eq!(positives as f64, fx.get("num_fg_total").scalar());

    // Loss terms: 1e-5 relative.
    assert_rel("loss_total", scalar(&terms.total), fx.get("loss_total").scalar(), 1e-5);
    assert_rel("loss_box", scalar(&terms.box_loss), fx.get("loss_box").scalar(), 1e-5);
    assert_rel("loss_dfl", scalar(&terms.dfl_loss), fx.get("loss_dfl").scalar(), 1e-5);
    assert_rel("loss_cls", scalar(&terms.cls_loss), fx.get("loss_cls").scalar(), 1e-5);
    assert_rel("num_fg", scalar(&terms.num_fg), fx.get("num_fg").scalar(), 1e-5);
    assert_rel("cls_norm", scalar(&terms.cls_norm), fx.get("cls_norm").scalar(), 1e-5);

    // Gradients of loss_total: within 1e-3 of each tensor's largest magnitude.
    let grads = terms.total.backward();
    let ours = cx.gradients(&grads);
    let st_bytes = std::fs::read(fixture::path("yolo9t_io.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&st_bytes).unwrap();
    let mut checked = 0;
    for name in st.names() {
        let Some(key) = name.strip_prefix("grad.") else { continue };
        let expected = fx.get(name).to_f32();
        let id = params.find(key).unwrap_or_else(|| panic!("no parameter {key}"));
        let (_, g) = ours.iter().find(|(p, _)| *p == id).map(|(_, g)| read(g)).unwrap_or_else(|| panic!("no gradient for {key}"));
        let scale = expected.iter().fold(0f64, |mx, v| mx.max(v.abs() as f64));
        let diff = fixture::max_abs_diff(&g, &expected);
        eprintln!("grad.{key}: max |diff| {diff:.3e} of max {scale:.3e}");
        assert!(diff <= 1e-3 * scale, "grad.{key}: {diff:e} > 1e-3 * {scale:e}");
        checked += 1;
    }
    assert!(checked >= 16, "only {checked} gradients in the fixture");
}

/// On a capture device nothing executes: a tensor computed there has no value, and reading it
/// fails. The loss runs to completion on such inputs, so it never reads back.
#[test]
fn the_loss_never_reads_back() {
    let device = Device::capture();
    let fx = Fixture::io();
    let host_targets = fx.get("targets");
    let shapes = [(32, 32), (16, 16), (8, 8)];
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut result = None;
        let _ = device.capture_scope(|scope| {
            // `add_scalar` makes every input the output of an operation: it has no value on
            // this device, so any read of it (or of anything derived from it) fails.
            let maps: Vec<Tensor<4>> =
                shapes.iter().map(|&(h, w)| Tensor::<4>::zeros([2, 144, h, w], &device).add_scalar(0.5)).collect();
            let t = &host_targets;
            let targets = Tensor::<3>::from_data(TensorData::new(t.to_f32(), [t.shape[0], t.shape[1], t.shape[2]]), &device).add_scalar(0.0);
            let terms = loss_fn().compute(&maps, &[8, 16, 32], targets);
            result = Some(terms.total.dims());
            scope.complete([], [])
        });
        result
    }));
    match ran {
        Ok(Some(dims)) => assert_eq!(dims, [1]),
        Ok(None) => panic!("the capture scope did not run"),
        Err(_) => panic!("the loss read a tensor back to the host (it panicked on a capture device)"),
    }
}

/// The check above can fail: reading a computed tensor on the capture device panics.
#[test]
fn a_read_on_the_capture_device_is_caught() {
    let device = Device::capture();
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = device.capture_scope(|scope| {
            let t = Tensor::<1>::zeros([4], &device).add_scalar(1.0);
            let _ = t.sum().into_data();
            scope.complete([], [])
        });
    }));
    assert!(ran.is_err(), "reading a computed tensor on the capture device must fail");
}
