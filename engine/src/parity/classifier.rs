//! Parity of a classifier (ResNet, MobileNetV4) with LibreYOLO 1.6 on a narrow fixture: the
//! files `NAME.safetensors` (weights), `NAME_io.safetensors` (inputs and LibreYOLO's figures)
//! and `NAME_layers.toml` (our topology) that `write_narrow` of
//! tests/fixtures/make_{resnet,mobilenetv4}_fixture.py writes. Error figures against stated
//! tolerances, on any device: the tests run it on the CPU, `libreyolo-run parity --classifier
//! NAME` anywhere.

use std::path::Path;

use burn::tensor::{Device, Int, Tensor, TensorData};
use libreyolo_families::{Ctx, ParamStore};
use serde::Serialize;

use super::fixture::{Fixture, max_abs_diff, network_in, read, rel_err, running_stats};

/// The tolerances, relative to the largest expected magnitude.
pub mod tolerance {
    /// Logits in eval and train mode (from u8 pixels).
    pub const LOGITS: f64 = 1e-4;
    /// The cross-entropy of LibreYOLO's own logits: the loss alone.
    pub const LOSS_ON_THEIRS: f64 = 1e-5;
    /// The cross-entropy of our logits: their float rounding through the network (a train-mode
    /// BatchNorm over a small batch at 1x1, as MobileNetV4's norm_head is, amplifies it) moves
    /// it by up to ~2e-5.
    pub const LOSS: f64 = 1e-4;
    /// Each parameter's gradient, relative to its largest value or to a thousandth of the
    /// network's largest gradient, whichever is larger: a gradient that is zero in exact
    /// arithmetic (the bias of a BatchNorm whose output a train-mode BatchNorm re-centres after
    /// a linear layer) is rounding noise in both engines.
    pub const GRADS: f64 = 1e-3;
    /// BatchNorm running statistics after the train-mode forward.
    pub const BN_STATS: f64 = 1e-4;
}

#[derive(Debug, Clone, Serialize)]
pub struct ClassifierParity {
    pub device: String,
    pub fixture: String,
    pub eval_logits_rel: f64,
    pub train_logits_rel: f64,
    pub loss_on_theirs_rel: f64,
    pub loss_rel: f64,
    /// `(parameter, error)` for every `grad.*` of the fixture ([`tolerance::GRADS`]'s scale).
    pub grads: Vec<(String, f64)>,
    pub grads_max_rel: f64,
    /// `(buffer, relative error)` for every `after_train.*` running statistic.
    pub bn_stats: Vec<(String, f64)>,
    pub bn_stats_max_rel: f64,
    pub bn_counts_match: bool,
}

impl ClassifierParity {
    /// Every figure outside its tolerance, described.
    pub fn failures(&self) -> Vec<String> {
        use tolerance::*;
        let checks = [
            ("eval logits", self.eval_logits_rel, LOGITS),
            ("train logits", self.train_logits_rel, LOGITS),
            ("cross-entropy of LibreYOLO's logits", self.loss_on_theirs_rel, LOSS_ON_THEIRS),
            ("cross-entropy", self.loss_rel, LOSS),
            ("BN running stats", self.bn_stats_max_rel, BN_STATS),
        ];
        let grads = self.grads.iter().map(|(key, v)| (format!("d loss / d {key}"), *v, GRADS));
        let mut out = super::beyond_tolerance(checks.into_iter().map(|(name, v, tol)| (name.to_string(), v, tol)).chain(grads));
        if !self.bn_counts_match {
            out.push("num_batches_tracked differs".into());
        }
        out
    }
}

/// Runs the checks of the fixture `dir/NAME*` on `device` (the classes are the fixture's).
pub fn run(dir: &Path, name: &str, device: &Device) -> anyhow::Result<ClassifierParity> {
    let io = Fixture::open(&dir.join(format!("{name}_io.safetensors")))?;
    let nc = *io.get("eval_logits").shape.last().ok_or_else(|| anyhow::anyhow!("{name}_io.safetensors: eval_logits has no shape"))?;
    let (network, mut params) = network_in(dir, name, nc, device)?;
    let weights = dir.join(format!("{name}.safetensors"));
    libreyolo_families::weights::load_safetensors(&mut params, &weights, false).map_err(|e| anyhow::anyhow!("{}: {e}", weights.display()))?;
    let pixels = io.get("images_u8");
    let d = &pixels.shape;
    // What the loader hands a network: RGB in [0, 1].
    let images = Tensor::<4>::from_data(TensorData::new(pixels.to_f32(), [d[0], d[1], d[2], d[3]]), device).div_scalar(255.0);
    let labels: Vec<i64> = io.get("labels").to_f32().iter().map(|&v| v as i64).collect();
    let labels = Tensor::<1, Int>::from_data(TensorData::new(labels, [d[0]]), device);
    let logits = |maps: Vec<Tensor<4>>| {
        let [b, nc, _, _] = maps[0].dims();
        maps[0].clone().reshape([b, nc])
    };

    let eval = logits(network.forward(images.clone(), &Ctx::eval(&params), false).main);
    let eval_logits_rel = rel_err(&eval, &io.get("eval_logits").to_f32());
    let cx = Ctx::train(&params);
    let train = logits(network.forward(images, &cx, false).main);
    let train_logits_rel = rel_err(&train, &io.get("train_logits").to_f32());

    let want = io.get("loss").scalar();
    let theirs = io.get("train_logits");
    let theirs = Tensor::<2>::from_data(TensorData::new(theirs.to_f32(), [theirs.shape[0], theirs.shape[1]]), device);
    let on_theirs = read(&libreyolo_stages::loss::cross_entropy(theirs, labels.clone())).1[0] as f64;
    let loss = libreyolo_stages::loss::cross_entropy(train, labels);
    let got = read(&loss).1[0] as f64;

    let grads = gradients(&io, &params, &cx.gradients(&loss.backward()))?;
    params.apply_batch_stats(cx.take_batch_stats());
    let (bn_stats, bn_counts_match) = running_stats(&io, &params, "after_train")?;
    let max = |v: &[(String, f64)]| v.iter().map(|(_, e)| *e).fold(0.0, f64::max);
    Ok(ClassifierParity {
        device: format!("{device:?}"),
        fixture: dir.join(name).display().to_string(),
        eval_logits_rel,
        train_logits_rel,
        loss_on_theirs_rel: (on_theirs - want).abs() / want.abs(),
        loss_rel: (got - want).abs() / want.abs(),
        grads_max_rel: max(&grads),
        grads,
        bn_stats_max_rel: max(&bn_stats),
        bn_stats,
        bn_counts_match,
    })
}

/// Every `grad.KEY` of the fixture against our gradient of `KEY`, on [`tolerance::GRADS`]'s
/// scale.
pub fn gradients(io: &Fixture, params: &ParamStore, grads: &[(libreyolo_families::ParamId, Tensor<1>)]) -> anyhow::Result<Vec<(String, f64)>> {
    let expected: Vec<(String, Vec<f32>)> = io.names().into_iter().filter_map(|n| Some((n.strip_prefix("grad.")?.to_string(), io.get(&n).to_f32()))).collect();
    let largest = expected.iter().flat_map(|(_, v)| v.iter()).fold(0f64, |m, v| m.max(v.abs() as f64));
    expected
        .into_iter()
        .map(|(key, want)| {
            let id = params.find(&key).ok_or_else(|| anyhow::anyhow!("the fixture has a gradient for `{key}`, which the network does not have"))?;
            let (_, g) = grads.iter().find(|(p, _)| *p == id).ok_or_else(|| anyhow::anyhow!("no gradient reached `{key}`"))?;
            let scale = want.iter().fold(0f64, |m, v| m.max(v.abs() as f64)).max(1e-3 * largest);
            Ok((key, max_abs_diff(&read(g).1, &want) / scale))
        })
        .collect()
}

/// A narrow classifier's fixture of the project (`tests/fixtures/NAME*`) on the CPU through
/// [`run`], asserted: every figure within its tolerance. Returns how many
/// gradients and BatchNorm buffers were checked (a test asserts the numbers).
pub fn check_classifier(name: &str) -> (usize, usize) {
    let report = run(&super::fixture::project_dir(), name, &Device::flex()).unwrap_or_else(|e| panic!("{e:#}"));
    let failures = report.failures();
    assert!(failures.is_empty(), "{name} against LibreYOLO:\n  {}", failures.join("\n  "));
    (report.grads.len(), report.bn_stats.len())
}
