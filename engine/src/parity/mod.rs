//! Parity with LibreYOLO 1.6 on a fixture folder (`yolo9t_fixture.md`): the network's eval and
//! train maps, decoded predictions, BatchNorm statistics, the loss with its assignment, and
//! gradients, measured as error figures against the fixture's stated tolerances. The tests run
//! it on the CPU; `libreyolo-run parity` runs it on any device.

pub mod classifier;
pub mod fixture;

use std::path::Path;

use burn::tensor::{Device, Tensor, TensorData};
use libreyolo_families::{Ctx, Network, ParamStore, Value};
use libreyolo_stages::loss::Yolo9Loss;
use serde::Serialize;

use fixture::{Fixture, max_abs_diff, read, select_rows};

/// Tolerances of yolo9t_fixture.md section 5.
pub mod tolerance {
    /// Raw maps, absolute.
    pub const MAPS: f64 = 1e-4;
    /// Decoded boxes, pixels.
    pub const BOXES: f64 = 2e-3;
    /// Decoded scores, absolute.
    pub const SCORES: f64 = 1e-5;
    /// BatchNorm running statistics, relative to the largest value.
    pub const BN_STATS: f64 = 1e-5;
    /// Loss terms, relative.
    pub const LOSS: f64 = 1e-5;
    /// TAL target scores, absolute.
    pub const TAL_SCORE: f64 = 1e-5;
    /// Gradients, relative to each tensor's largest magnitude.
    pub const GRADS: f64 = 1e-3;
}

#[derive(Debug, Clone, Serialize)]
pub struct NetworkParity {
    pub eval_maps_max_abs: f64,
    /// Largest difference of per-channel sums, divided by the number of summed values.
    pub eval_sums_max_abs_per_value: f64,
    pub eval_pred_boxes_max_abs_px: f64,
    pub eval_pred_scores_max_abs: f64,
    pub train_maps_max_abs: f64,
    pub train_sums_max_abs_per_value: f64,
    pub bn_running_stats_max_rel: f64,
    pub bn_counts_match: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct LossParity {
    pub positives: usize,
    pub expected_positives: usize,
    pub valid_mask_mismatches: usize,
    pub gt_index_mismatches: usize,
    pub target_cls_mismatches: usize,
    pub target_score_max_abs: f64,
    pub total_rel: f64,
    /// `(term, relative error)` of each named loss term against the fixture's `loss_{term}`.
    pub terms_rel: Vec<(String, f64)>,
    pub num_fg_rel: f64,
    pub cls_norm_rel: f64,
    /// `(parameter, max |diff| / max |expected|)` for every `grad.*` of the fixture.
    pub grads: Vec<(String, f64)>,
    pub grads_max_rel: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ParityReport {
    pub device: String,
    pub network: NetworkParity,
    pub loss: LossParity,
}

impl ParityReport {
    /// Every figure outside its tolerance, described.
    pub fn failures(&self) -> Vec<String> {
        use tolerance::*;
        let n = &self.network;
        let l = &self.loss;
        let terms = l.terms_rel.iter().map(|(name, v)| (format!("loss_{name}"), *v, LOSS));
        let checks: Vec<(String, f64, f64)> = [
            ("eval maps", n.eval_maps_max_abs, MAPS),
            ("eval map sums", n.eval_sums_max_abs_per_value, MAPS),
            ("eval_pred boxes", n.eval_pred_boxes_max_abs_px, BOXES),
            ("eval_pred scores", n.eval_pred_scores_max_abs, SCORES),
            ("train maps", n.train_maps_max_abs, MAPS),
            ("train map sums", n.train_sums_max_abs_per_value, MAPS),
            ("BN running stats", n.bn_running_stats_max_rel, BN_STATS),
            ("TAL target score", l.target_score_max_abs, TAL_SCORE),
            ("loss_total", l.total_rel, LOSS),
            ("num_fg", l.num_fg_rel, LOSS),
            ("cls_norm", l.cls_norm_rel, LOSS),
            ("gradients", l.grads_max_rel, GRADS),
        ]
        .into_iter()
        .map(|(name, v, tol)| (name.to_string(), v, tol))
        .chain(terms)
        .collect();
        let mut out = beyond_tolerance(checks);
        if !n.bn_counts_match {
            out.push("num_batches_tracked differs".into());
        }
        for (what, count) in [("valid mask", l.valid_mask_mismatches), ("gt index", l.gt_index_mismatches), ("target class", l.target_cls_mismatches)] {
            if count > 0 {
                out.push(format!("TAL {what}: {count} anchors differ"));
            }
        }
        if l.positives != l.expected_positives {
            out.push(format!("positives: {} vs {}", l.positives, l.expected_positives));
        }
        out
    }
}

/// The checks `(what, figure, tolerance)` whose figure is beyond its tolerance (NaN included),
/// described.
pub fn beyond_tolerance(checks: impl IntoIterator<Item = (String, f64, f64)>) -> Vec<String> {
    checks.into_iter().filter(|(_, v, tol)| !(v <= tol)).map(|(name, v, tol)| format!("{name}: {v:.3e} > {tol:.0e}")).collect()
}

/// Runs every parity check of `dir` with `network` (YOLOv9-t, nc 80) on `device`.
/// With `loss_device`, the network runs on `device` and the loss on `loss_device`.
pub fn run(dir: &Path, network: &Network, params: &ParamStore, device: &Device, loss_device: Option<&Device>) -> anyhow::Result<ParityReport> {
    let io = Fixture::io(dir)?;
    let mut params = params.clone();
    libreyolo_families::weights::load_safetensors(&mut params, &dir.join("yolo9t_nc80.safetensors"), false)?;
    params.to_device(device);
    network.detector("the parity check")?;
    let network_parity = network_parity(&io, network, &params, device);
    let loss = loss_parity(&io, network, &params, device, loss_device);
    let device = match loss_device {
        Some(l) => format!("network on {device:?}, loss on {l:?}"),
        None => format!("{device:?}"),
    };
    Ok(ParityReport { device, network: network_parity, loss })
}

fn indices(io: &Fixture, name: &str) -> Vec<usize> {
    io.get(name).values.iter().map(|v| *v as usize).collect()
}

/// (max |diff| of the indexed maps, max |diff| of the per-channel sums / values per sum).
fn map_errors(map: &Tensor<4>, io: &Fixture, name: &str, index: &str) -> (f64, f64) {
    let (dims, values) = read(map);
    let row = values.len() / dims[0];
    let picked = select_rows(&values, row, &indices(io, index));
    let maps = max_abs_diff(&picked, &io.get(name).to_f32());
    let per = dims[2] * dims[3];
    let sums: Vec<f32> = values.chunks(per).map(|c| c.iter().map(|v| *v as f64).sum::<f64>() as f32).collect();
    let sum_err = max_abs_diff(&sums, &io.get(&format!("{name}_sum")).to_f32()) / per as f64;
    (maps, sum_err)
}

fn network_parity(io: &Fixture, network: &Network, params: &ParamStore, device: &Device) -> NetworkParity {
    let images = io.images(device);
    let cx = Ctx::eval(params);
    let maps = network.forward(images.clone(), &cx, false).main;
    let (mut eval_maps, mut eval_sums) = (0f64, 0f64);
    for (i, map) in maps.iter().enumerate() {
        let (m, s) = map_errors(map, io, &format!("eval_p{}", i + 3), "eval_index");
        eval_maps = eval_maps.max(m);
        eval_sums = eval_sums.max(s);
    }
    let [_, _, h, w] = images.dims();
    let (dims, pred) = read(&network.detector("parity").expect("checked in `run`").decode(&maps, [h, w]));
    let picked = select_rows(&pred, dims[1] * dims[2], &indices(io, "eval_pred_index"));
    let (mut boxes, mut scores) = (0f64, 0f64);
    for (k, (x, y)) in picked.iter().zip(io.get("eval_pred").to_f32()).enumerate() {
        let d = (*x as f64 - y as f64).abs();
        if (k / dims[2]) % dims[1] < 4 { boxes = boxes.max(d) } else { scores = scores.max(d) }
    }

    let mut params = params.clone();
    let cx = Ctx::train(&params);
    let maps = network.forward(images, &cx, false).main;
    let (mut train_maps, mut train_sums) = (0f64, 0f64);
    for (i, map) in maps.iter().enumerate() {
        let (m, s) = map_errors(map, io, &format!("train_p{}", i + 3), "train_index");
        train_maps = train_maps.max(m);
        train_sums = train_sums.max(s);
    }
    params.apply_batch_stats(cx.take_batch_stats());
    let (mut bn_rel, mut counts_match) = (0f64, true);
    for name in io.names() {
        let Some(key) = name.strip_prefix("bn_after_train.") else { continue };
        let Some(id) = params.find(key) else {
            counts_match = false;
            continue;
        };
        match &params.entry(id).value {
            Value::Float(libreyolo_families::tensor::AnyTensor::R1(t)) => {
                let expected = io.get(&name).to_f32();
                let scale = expected.iter().fold(0f64, |m, v| m.max(v.abs() as f64)).max(1e-12);
                bn_rel = bn_rel.max(max_abs_diff(&read(t).1, &expected) / scale);
            }
            Value::Count(n) => counts_match &= *n as f64 == io.get(&name).scalar(),
            Value::Float(_) => counts_match = false,
        }
    }
    NetworkParity {
        eval_maps_max_abs: eval_maps,
        eval_sums_max_abs_per_value: eval_sums,
        eval_pred_boxes_max_abs_px: boxes,
        eval_pred_scores_max_abs: scores,
        train_maps_max_abs: train_maps,
        train_sums_max_abs_per_value: train_sums,
        bn_running_stats_max_rel: bn_rel,
        bn_counts_match: counts_match,
    }
}

fn rel(ours: &Tensor<1>, expected: f64) -> f64 {
    let v = read(ours).1[0] as f64;
    (v - expected).abs() / expected.abs().max(1e-12)
}

/// The loss checks. The network runs on `device`; the loss (assignment, terms, and its
/// gradient) on `loss_device` when given: its gradient w.r.t. the head maps is carried back and
/// the parameter gradients follow by the chain rule on `device` (`parity --loss-device`).
fn loss_parity(io: &Fixture, network: &Network, params: &ParamStore, device: &Device, loss_device: Option<&Device>) -> LossParity {
    let cx = Ctx::train(params);
    let maps = network.forward(io.images(device), &cx, false).main;
    let t = io.get("targets");
    let ldev = loss_device.unwrap_or(device);
    let targets = Tensor::<3>::from_data(TensorData::new(t.to_f32(), [t.shape[0], t.shape[1], t.shape[2]]), ldev);
    // On another device the maps become leaves there, detached from the network's graph.
    let leaves: Option<Vec<Tensor<4>>> = loss_device.map(|d| maps.iter().map(|m| Tensor::<4>::from_data(m.to_data(), d).autodiff().require_grad()).collect());
    let terms = Yolo9Loss::libreyolo_default(network.head().nc()).compute(
        leaves.as_ref().unwrap_or(&maps),
        network.detector("parity").expect("checked in `run`").strides(),
        targets,
    );

    let (_, positive) = read(&terms.assignment.positive);
    let (_, gt_index) = read(&terms.assignment.gt_index.clone().float());
    let (dims, scores) = read(&terms.assignment.scores.clone().sum_dim(2));
    let (a, m) = (dims[1], t.shape[1]);
    let (mask, gt, cls, score) =
        (io.get("tal_valid_mask").values, io.get("tal_gt_index").values, io.get("tal_target_cls").values, io.get("tal_target_score").values);
    let (mut positives, mut mask_mis, mut gt_mis, mut cls_mis, mut score_err) = (0, 0, 0, 0, 0f64);
    for i in 0..positive.len() {
        let is_pos = positive[i] > 0.5;
        positives += is_pos as usize;
        mask_mis += (is_pos != (mask[i] > 0.5)) as usize;
        let (ours_gt, ours_cls) = if is_pos {
            let g = gt_index[i] as usize;
            (g as f64, t.values[((i / a) * m + g) * 5])
        } else {
            (-1.0, -1.0)
        };
        gt_mis += (ours_gt != gt[i]) as usize;
        cls_mis += (ours_cls != cls[i]) as usize;
        score_err = score_err.max((scores[i] as f64 - score[i]).abs());
    }

    let grads = match &leaves {
        None => terms.total.backward(),
        Some(leaves) => {
            // d loss / d maps from the loss device, then sum(maps * dmaps) back through the network.
            let loss_grads = terms.total.backward();
            let surrogate = maps
                .iter()
                .zip(leaves)
                .map(|(m, leaf)| {
                    let g = leaf.grad(&loss_grads).expect("the loss depends on every map");
                    m.clone().mul(Tensor::<4>::from_data(g.to_data(), device)).sum()
                })
                .reduce(|a, b| a.add(b))
                .expect("three maps");
            surrogate.backward()
        }
    };
    let ours = cx.gradients(&grads);
    let mut grad_errors = vec![];
    for name in io.names() {
        let Some(key) = name.strip_prefix("grad.") else { continue };
        let expected = io.get(&name).to_f32();
        let scale = expected.iter().fold(0f64, |mx, v| mx.max(v.abs() as f64)).max(1e-30);
        let err = params
            .find(key)
            .and_then(|id| ours.iter().find(|(p, _)| *p == id))
            .map(|(_, g)| max_abs_diff(&read(g).1, &expected) / scale)
            .unwrap_or(f64::INFINITY);
        grad_errors.push((key.to_string(), err));
    }
    grad_errors.sort_by(|a, b| a.0.cmp(&b.0));
    LossParity {
        positives,
        expected_positives: io.get("num_fg_total").scalar() as usize,
        valid_mask_mismatches: mask_mis,
        gt_index_mismatches: gt_mis,
        target_cls_mismatches: cls_mis,
        target_score_max_abs: score_err,
        total_rel: rel(&terms.total, io.get("loss_total").scalar()),
        terms_rel: terms.named().parts.iter().map(|(name, t)| (name.to_string(), rel(t, io.get(&format!("loss_{name}")).scalar()))).collect(),
        num_fg_rel: rel(&terms.num_fg, io.get("num_fg").scalar()),
        cls_norm_rel: rel(&terms.cls_norm, io.get("cls_norm").scalar()),
        grads_max_rel: grad_errors.iter().map(|g| g.1).fold(0.0, f64::max),
        grads: grad_errors,
    }
}
