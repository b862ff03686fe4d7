//! YOLOX's loss against LibreYOLO 1.6 on the CPU (fixture of
//! tests/fixtures/make_yolox_loss_fixture.py): on fixed raw maps and labels, the SimOTA
//! assignment (foreground anchors, their ground truths, dynamic_k) exactly, the matched IoUs,
//! every loss term, and the gradient of the total w.r.t. the maps, with the L1 branch off
//! (mosaic on) and on (after mosaic close).

use std::path::Path;

use burn::tensor::{Device, Tensor, TensorData};
use libreyolo_run::parity::fixture::{Fixture, max_abs_diff, read};
use libreyolo_stages::loss::{YoloxLoss, YoloxSettings};

const STRIDES: [usize; 3] = [8, 16, 32];

fn fixture() -> Fixture {
    Fixture::open(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/yolox_loss.safetensors")).unwrap()
}

fn tensor<const D: usize>(io: &Fixture, name: &str, device: &Device) -> Tensor<D> {
    let a = io.get(name);
    Tensor::from_data(TensorData::new(a.to_f32(), a.shape.clone()), device)
}

fn maps(io: &Fixture, device: &Device) -> Vec<Tensor<4>> {
    (0..3).map(|k| tensor::<4>(io, &format!("maps.{k}"), device).autodiff().require_grad()).collect()
}

fn loss(nc: usize) -> YoloxLoss {
    YoloxLoss { nc, settings: YoloxSettings::default() }
}

#[test]
fn simota_assignment_matches_libreyolo_exactly() {
    let device = Device::flex();
    let io = fixture();
    let maps = maps(&io, &device);
    let nc = maps[0].dims()[1] - 5;
    let terms = loss(nc).compute(&maps, &STRIDES, tensor(&io, "targets", &device), true, None);
    let m = &terms.matching;
    let (_, fg) = read(&m.fg);
    let (_, gt) = read(&m.gt_index.clone().float());
    let (_, iou) = read(&m.iou);
    let (_, dynamic_k) = read(&m.dynamic_k);
    let (want_fg, want_gt, want_iou) = (io.get("fg").to_f32(), io.get("matched_gt").to_f32(), io.get("pred_iou").to_f32());
    assert_eq!(dynamic_k, io.get("dynamic_k").to_f32(), "dynamic_k per ground truth");
    assert_eq!(fg, want_fg, "foreground anchors");
    let ours_gt: Vec<f32> = fg.iter().zip(&gt).map(|(&f, &g)| if f > 0.5 { g } else { -1.0 }).collect();
    assert_eq!(ours_gt, want_gt, "matched ground truth of each foreground anchor");
    assert!(max_abs_diff(&iou, &want_iou) < 1e-6, "matched IoUs differ by {}", max_abs_diff(&iou, &want_iou));
    // The fixture exercises what SimOTA does beyond one anchor a box.
    assert!(want_fg.iter().sum::<f32>() > 30.0 && io.get("dynamic_k").to_f32().iter().any(|&k| k >= 5.0));
}

#[test]
fn terms_and_gradients_match_libreyolo_with_and_without_l1() {
    let device = Device::flex();
    let io = fixture();
    for (phase, use_l1) in [("off", false), ("on", true)] {
        let maps = maps(&io, &device);
        let nc = maps[0].dims()[1] - 5;
        let terms = loss(nc).compute(&maps, &STRIDES, tensor(&io, "targets", &device), use_l1, None);
        let want = io.get(&format!("{phase}.terms")).to_f32();
        let named = terms.named();
        let ours = [read(&named.total).1[0], read(&terms.iou).1[0], read(&terms.obj).1[0], read(&terms.cls).1[0], read(&terms.l1).1[0]];
        for (i, name) in ["total", "iou", "obj", "cls", "l1"].iter().enumerate() {
            let rel = (ours[i] as f64 - want[i] as f64).abs() / (want[i] as f64).abs().max(1e-12);
            assert!(rel < 1e-5 || ours[i] == want[i], "l1 {phase}: {name} {} vs LibreYOLO {} (rel {rel:e})", ours[i], want[i]);
        }
        assert_eq!(named.names(), ["iou", "obj", "cls", "l1"]);
        let grads = named.total.backward();
        for (k, map) in maps.iter().enumerate() {
            let g = map.grad(&grads).expect("the loss depends on every map");
            let expected = io.get(&format!("{phase}.grad.{k}")).to_f32();
            let scale = expected.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
            let diff = max_abs_diff(&read(&g).1, &expected);
            assert!(diff <= 1e-3 * scale, "l1 {phase}: d total / d maps.{k} off by {diff:e} (max {scale:e})");
        }
    }
}
