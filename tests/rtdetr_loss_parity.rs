//! RT-DETR's loss against LibreYOLO 1.6 on the CPU (fixture of
//! tests/fixtures/make_rtdetr_loss_fixture.py): on fixed decoder and encoder outputs and labels
//! (one image without boxes, one with a degenerate box), the Hungarian matches of every level
//! exactly, every level's weighted terms, the sums by kind a run logs, the total, and the
//! total's gradient with respect to every input.

use std::path::Path;

use burn::tensor::{Device, Tensor, TensorData};
use libreyolo_run::parity::fixture::{Fixture, max_abs_diff, read};
use libreyolo_stages::loss::rtdetr::Level;
use libreyolo_stages::loss::{DetrTargets, RtDetrLoss};

fn fixture() -> Fixture {
    Fixture::open(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/rtdetr_loss.safetensors")).unwrap()
}

fn tensor<const D: usize>(io: &Fixture, name: &str, device: &Device) -> Tensor<D> {
    let a = io.get(name);
    Tensor::from_data(TensorData::new(a.to_f32(), a.shape.clone()), device)
}

/// The inputs as autodiff leaves, and the levels in LibreYOLO's order: the last decoder layer,
/// the other decoder layers, the encoder.
fn levels(io: &Fixture, device: &Device) -> ([Tensor<4>; 2], [Tensor<3>; 2], Vec<Level>) {
    let leaf4 = |n: &str| tensor::<4>(io, n, device).autodiff().require_grad();
    let leaf3 = |n: &str| tensor::<3>(io, n, device).autodiff().require_grad();
    let (boxes, logits) = (leaf4("input.boxes"), leaf4("input.logits"));
    let (enc_boxes, enc_logits) = (leaf3("input.enc_boxes"), leaf3("input.enc_logits"));
    let levels = Level::in_order(&boxes, &logits, &enc_boxes.clone().unsqueeze::<4>(), &enc_logits.clone().unsqueeze::<4>());
    ([boxes, logits], [enc_boxes, enc_logits], levels)
}

fn targets(io: &Fixture) -> DetrTargets {
    let t = io.get("targets");
    DetrTargets::from_rows(&t.to_f32(), t.shape[0])
}

#[test]
fn targets_keep_libreyolo_rows() {
    let t = targets(&fixture());
    assert_eq!(t.labels.iter().map(Vec::len).collect::<Vec<_>>(), [4, 0, 6], "boxes per image: padding and the degenerate box dropped");
}

#[test]
fn matches_terms_and_gradients_match_libreyolo() {
    let device = Device::flex();
    let io = fixture();
    let (maps, enc, levels) = levels(&io, &device);
    let terms = RtDetrLoss.compute(&levels, None, &targets(&io), None);

    for (level, matches) in terms.matches.iter().enumerate() {
        for (image, pairs) in matches.iter().enumerate() {
            let want: Vec<(usize, usize)> = io.get(&format!("match.{level}.{image}")).to_f32().chunks(2).map(|p| (p[0] as usize, p[1] as usize)).collect();
            assert_eq!(pairs, &want, "level {level}, image {image}: Hungarian matches");
        }
    }
    let suffix = |level: usize| if level == 0 { String::new() } else { format!("_aux_{}", level - 1) };
    let rel = |got: &Tensor<1>, name: &str| {
        let want = io.get(name).scalar();
        (read(got).1[0] as f64 - want).abs() / want.abs()
    };
    for (level, parts) in terms.levels.iter().enumerate() {
        for (part, name) in parts.iter().zip(["vfl", "bbox", "giou"]) {
            let key = format!("loss.loss_{name}{}", suffix(level));
            let err = rel(part, &key);
            assert!(err < 1e-5, "{key}: relative error {err:.2e}");
        }
    }
    for (got, name) in [(&terms.vfl, "sum.vfl"), (&terms.bbox, "sum.bbox"), (&terms.giou, "sum.giou"), (&terms.total, "loss.total_loss")] {
        let err = rel(got, name);
        assert!(err < 1e-5, "{name}: relative error {err:.2e}");
    }

    let grads = terms.total.backward();
    let inputs = [("boxes", maps[0].grad(&grads).map(|g| read(&g).1)), ("logits", maps[1].grad(&grads).map(|g| read(&g).1))]
        .into_iter()
        .chain([("enc_boxes", enc[0].grad(&grads).map(|g| read(&g).1)), ("enc_logits", enc[1].grad(&grads).map(|g| read(&g).1))]);
    for (name, ours) in inputs {
        let ours = ours.unwrap_or_else(|| panic!("no gradient reached {name}"));
        let want = io.get(&format!("grad.{name}")).to_f32();
        let scale = want.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
        let err = max_abs_diff(&ours, &want) / scale;
        eprintln!("d total / d {name}: relative error {err:.2e}");
        assert!(err < 1e-4, "d total / d {name}: relative error {err:.2e}");
    }
}
