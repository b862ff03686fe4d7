//! `loss.yolo9`: LibreYOLO's YOLOv9 loss (TAL assignment, CIoU box loss, DFL, BCE class loss)
//! on the main head's maps, plus `model.aux_weight` times the same loss on the PGI auxiliary
//! head's, in f32. Sync-free (fixed shapes, nothing read back), so it can be captured. Its
//! settings are the manifest's `[loss]` section ([`Yolo9Settings`]).

use std::rc::Rc;

use burn::tensor::{FloatDType, Tensor};
use libreyolo_families::blocks::DDetect;

use crate::loss::{Yolo9Loss, Yolo9Settings};
use crate::stage::{AnyTensor, Autodiff, Group, Io, Kind, LossTerms, Parallel, Settings, SettingsError, Stage, Ty, Value, port};

pub static KIND: Kind = Kind {
    name: "loss.yolo9",
    summary: "YOLOv9 loss: TAL assignment, CIoU box loss, DFL and BCE class loss",
    inputs: &[port("preds", Ty::Activations), port("targets", Ty::Tensor)],
    outputs: &[port("loss", Ty::Loss)],
    not_capturable: None,
    autodiff: Autodiff::Through,
    collective: |p: &Parallel| (p.world > 1).then_some("the loss all-reduces its normaliser over the GPUs"),
    recapture_on: &[],
    settings: Some(Settings { section: "loss", keys: FIELDS, check: |t| settings(t).map(|_| ()) }),
    build: |b| {
        let s = settings(&b.section("loss")).map_err(|e| anyhow::anyhow!("[loss] {}: {}", e.key, e.message))?;
        let aux_weight = b.section("model").get("aux_weight").and_then(|v| v.as_float().or(v.as_integer().map(|i| i as f64))).unwrap_or(0.25);
        let Some(head) = b.model.network.head_layer().as_any().downcast_ref::<DDetect>() else {
            anyhow::bail!("`loss.yolo9` needs a YOLOv9 head (`DDetect`) at the end of `model.layers`")
        };
        Ok(Rc::new(LossYolo9 { loss: Yolo9Loss::new(s, b.model.nc, head.reg_max), strides: head.strides.clone(), aux_weight, group: b.group.clone() }))
    },
};

/// The `[loss]` section, parsed; an error names the key.
fn settings(table: &toml::Table) -> Result<Yolo9Settings, SettingsError> {
    SettingsError::parse(table, "loss.yolo9", FIELDS)
}

const FIELDS: &[&str] = &["box_gain", "dfl_gain", "cls_gain", "topk", "alpha", "beta"];

pub struct LossYolo9 {
    pub loss: Yolo9Loss,
    pub strides: Vec<usize>,
    pub aux_weight: f64,
    group: Rc<dyn Group>,
}

impl LossYolo9 {
    /// The loss of the main head's `maps` plus `aux_weight` times the auxiliary head's.
    pub fn compute(&self, main: Vec<Tensor<4>>, aux: Option<Vec<Tensor<4>>>, targets: Tensor<3>) -> LossTerms {
        let f32s = |m: Vec<Tensor<4>>| m.into_iter().map(|t| t.cast(FloatDType::F32)).collect::<Vec<_>>();
        let group = self.group.devices();
        let mut terms = self.loss.compute_over(&f32s(main), &self.strides, targets.clone(), group).named();
        if let Some(aux) = aux {
            let a = self.loss.compute_over(&f32s(aux), &self.strides, targets, group).named();
            terms.total = terms.total.add(a.total.mul_scalar(self.aux_weight));
            for ((_, t), (_, at)) in terms.parts.iter_mut().zip(a.parts) {
                *t = t.clone().add(at.mul_scalar(self.aux_weight));
            }
        }
        terms
    }
}

impl Stage for LossYolo9 {
    fn run(&self, io: &mut Io<'_>) -> anyhow::Result<()> {
        let preds = io.activations(0)?;
        let AnyTensor::R3(targets) = io.tensor(1)? else { anyhow::bail!("loss.yolo9 reads (batch, rows, 5) targets") };
        let aux = (preds.groups.len() > 1).then(|| preds.maps(1));
        io.output(0, Value::Loss(self.compute(preds.maps(0), aux, targets)));
        Ok(())
    }
}
