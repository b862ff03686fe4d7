//! `loss.classify`: LibreYOLO's classification loss, the mean cross-entropy of the head's
//! logits against the image classes (`F.cross_entropy`; label smoothing as `[loss]
//! label_smoothing`, 0 as LibreYOLO 1.6 trains), in f32. Sync-free, so it is captured with the
//! rest of the step. Under data parallelism each GPU's mean over its equal share is averaged
//! with the gradients, as LibreYOLO's DDP does, so it needs no collective of its own.

use std::rc::Rc;

use burn::tensor::{FloatDType, Int, Tensor};
use serde::Deserialize;

use crate::loss::cross_entropy::cross_entropy;
use crate::stage::{AnyTensor, Autodiff, Io, Kind, LossTerms, Settings, SettingsError, Stage, Ty, Value, no_collective, port};

pub static KIND: Kind = Kind {
    name: "loss.classify",
    summary: "classification loss: cross-entropy of the logits against the image classes",
    inputs: &[port("logits", Ty::Activations), port("labels", Ty::Tensor)],
    outputs: &[port("loss", Ty::Loss)],
    not_capturable: None,
    autodiff: Autodiff::Through,
    collective: no_collective,
    recapture_on: &[],
    settings: Some(Settings { section: "loss", keys: FIELDS, check: |t| settings(t).map(|_| ()) }),
    build: |b| {
        let settings = settings(&b.section("loss")).map_err(|e| anyhow::anyhow!("[loss] {}: {}", e.key, e.message))?;
        Ok(Rc::new(LossClassify { settings }))
    },
};

const FIELDS: &[&str] = &["label_smoothing"];

/// The `[loss]` section of a classifier.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClassifySettings {
    /// PyTorch's `label_smoothing`: the target puts `1 - e` on the class and `e / nc` on every
    /// class.
    pub label_smoothing: f64,
}

fn settings(table: &toml::Table) -> Result<ClassifySettings, SettingsError> {
    let s: ClassifySettings = SettingsError::parse(table, "loss.classify", FIELDS)?;
    if !(0.0..1.0).contains(&s.label_smoothing) {
        return Err(SettingsError { key: "label_smoothing".into(), message: format!("must be in [0, 1); got {}", s.label_smoothing), help: None });
    }
    Ok(s)
}

struct LossClassify {
    settings: ClassifySettings,
}

impl Stage for LossClassify {
    fn run(&self, io: &mut Io<'_>) -> anyhow::Result<()> {
        let logits = match io.activations(0)?.flat().into_iter().next() {
            Some(AnyTensor::R4(t)) => {
                let [b, nc, h, w] = t.dims();
                anyhow::ensure!(h * w == 1, "loss.classify reads (batch, classes) logits; got a ({b}, {nc}, {h}, {w}) map");
                t.reshape([b, nc])
            }
            Some(AnyTensor::R2(t)) => t,
            other => anyhow::bail!("loss.classify reads (batch, classes) logits; got {:?}", other.map(|t| t.dims())),
        };
        let AnyTensor::R1(labels) = io.tensor(1)? else { anyhow::bail!("loss.classify reads (batch) class labels") };
        let total = smoothed(logits, labels.int(), self.settings.label_smoothing);
        io.output(0, Value::Loss(LossTerms { total: total.clone(), parts: vec![("ce", total.detach())] }));
        Ok(())
    }
}

/// PyTorch's cross-entropy with label smoothing `e`: `(1 - e) * CE + e * mean_c(-log p_c)`.
fn smoothed(logits: Tensor<2>, labels: Tensor<1, Int>, e: f64) -> Tensor<1> {
    if e == 0.0 {
        return cross_entropy(logits, labels);
    }
    let uniform = burn::tensor::activation::log_softmax(logits.clone().cast(FloatDType::F32), 1).neg().mean().reshape([1]);
    cross_entropy(logits, labels).mul_scalar(1.0 - e).add(uniform.mul_scalar(e))
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, TensorData};

    use super::*;

    /// Against the closed form: uniform logits give ln(nc) whatever the smoothing; a
    /// confident right answer pays about `e * (margin) * (nc - 1) / nc`.
    #[test]
    fn label_smoothing_matches_pytorch() {
        let device = Device::flex();
        let logits = Tensor::<2>::from_data(TensorData::new(vec![0.0f32, 0.0, 0.0, 0.0, 20.0, 0.0], [2, 3]), &device);
        let labels = Tensor::<1, Int>::from_data(TensorData::new(vec![2i64, 1], [2]), &device);
        let got = smoothed(logits, labels, 0.1).into_data().try_to_vec::<f32>().unwrap()[0] as f64;
        let lse = (20f64.exp() + 2.0).ln();
        let second = 0.9 * (lse - 20.0) + 0.1 * ((lse - 20.0) + 2.0 * lse) / 3.0;
        let want = (3f64.ln() + second) / 2.0;
        assert!((got - want).abs() < 1e-5, "{got} vs {want}");
    }
}
