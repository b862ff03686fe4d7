//! `loss.yolox`: LibreYOLO's YOLOX loss (SimOTA assignment, IoU, objectness, class and, after
//! mosaic closes, L1 terms) on the head's raw maps, in f32. Sync-free, so — unlike LibreYOLO,
//! whose SimOTA loops over images on the host — it can be captured with the rest of the step.
//! The L1 term changes what the stage computes, so the kind re-captures at `mosaic_close`. Its
//! settings are the manifest's `[loss]` section ([`YoloxSettings`]).

use std::cell::Cell;
use std::rc::Rc;

use burn::tensor::{FloatDType, Tensor};

use crate::loss::{YoloxLoss, YoloxSettings};
use crate::stage::{AnyTensor, Autodiff, Group, Io, Kind, Parallel, Settings, SettingsError, Stage, StepInfo, Ty, Value, port};

pub static KIND: Kind = Kind {
    name: "loss.yolox",
    summary: "YOLOX loss: SimOTA assignment, IoU, objectness and class BCE, L1 after mosaic closes",
    inputs: &[port("preds", Ty::Activations), port("targets", Ty::Tensor)],
    outputs: &[port("loss", Ty::Loss)],
    not_capturable: None,
    autodiff: Autodiff::Through,
    collective: |p: &Parallel| (p.world > 1).then_some("the loss all-reduces its foreground count over the GPUs"),
    recapture_on: &["mosaic_close"],
    settings: Some(Settings { section: "loss", keys: FIELDS, check: |t| settings(t).map(|_| ()) }),
    build: |b| {
        let settings = settings(&b.section("loss")).map_err(|e| anyhow::anyhow!("[loss] {}: {}", e.key, e.message))?;
        let head = b.model.network.detector("`loss.yolox`")?;
        Ok(Rc::new(LossYolox {
            loss: YoloxLoss { nc: head.nc(), settings },
            strides: head.strides().to_vec(),
            use_l1: Cell::new(false),
            group: b.group.clone(),
        }))
    },
};

const FIELDS: &[&str] = &["iou_gain", "center_radius", "candidates"];

/// The `[loss]` section, parsed; an error names the key.
fn settings(table: &toml::Table) -> Result<YoloxSettings, SettingsError> {
    SettingsError::parse(table, "loss.yolox", FIELDS)
}

pub struct LossYolox {
    pub loss: YoloxLoss,
    pub strides: Vec<usize>,
    /// LibreYOLO's `use_l1`: on from the first epoch without mosaic.
    use_l1: Cell<bool>,
    group: Rc<dyn Group>,
}

impl Stage for LossYolox {
    fn prepare(&self, step: &StepInfo) {
        self.use_l1.set(step.mosaic_closed);
    }

    fn run(&self, io: &mut Io<'_>) -> anyhow::Result<()> {
        let maps: Vec<Tensor<4>> = io.activations(0)?.maps(0).into_iter().map(|t| t.cast(FloatDType::F32)).collect();
        let AnyTensor::R3(targets) = io.tensor(1)? else { anyhow::bail!("loss.yolox reads (batch, rows, 5) targets") };
        let terms = self.loss.compute(&maps, &self.strides, targets, self.use_l1.get(), self.group.devices());
        io.output(0, Value::Loss(terms.named()));
        Ok(())
    }
}
