//! `loss.rtdetr`: LibreYOLO's RT-DETR loss (Hungarian matching, then VFL, L1 and GIoU on every
//! decoder layer and on the encoder's chosen queries, and on the denoising queries when the
//! decoder had them) on an `RTDETRDecoder` head's outputs, in f32. It reads the batch's labels
//! on the host (the data stage keeps them there) and its matching reads the cost matrices on
//! the host, so it runs eager — the seam of LibreYOLO's DETR capture contract, where the
//! network before it can be captured.

use std::rc::Rc;

use burn::tensor::{FloatDType, Tensor};

use crate::data::HostLabels;
use crate::loss::rtdetr::{DenoisingLayout, DenoisingLevels, Level};
use crate::loss::{DetrTargets, RtDetrLoss};
use crate::stage::{Autodiff, Group, HostValue, Io, Kind, Parallel, Stage, Ty, Value, optional, port};

pub static KIND: Kind = Kind {
    name: "loss.rtdetr",
    summary: "RT-DETR loss: Hungarian matching, then VFL, L1 and GIoU on every decoder layer and the encoder's queries",
    inputs: &[port("preds", Ty::Activations), port("labels", Ty::Host(HostLabels::TY)), optional("denoising", Ty::Host(DenoisingLayout::TY))],
    outputs: &[port("loss", Ty::Loss)],
    not_capturable: Some("its Hungarian matching reads the cost matrices on the host"),
    autodiff: Autodiff::Through,
    collective: |p: &Parallel| (p.world > 1).then_some("the loss all-reduces its box count over the GPUs"),
    recapture_on: &[],
    settings: None,
    build: |b| Ok(Rc::new(LossRtDetr { group: b.group.clone() })),
};

struct LossRtDetr {
    group: Rc<dyn Group>,
}

impl Stage for LossRtDetr {
    fn run(&self, io: &mut Io<'_>) -> anyhow::Result<()> {
        let maps: Vec<Tensor<4>> = io.activations(0)?.maps(0).into_iter().map(|t| t.cast(FloatDType::F32)).collect();
        if maps.len() != 4 && maps.len() != 6 {
            anyhow::bail!(
                "loss.rtdetr reads an RTDETRDecoder head's training outputs (every layer's boxes and logits, the encoder's, the denoising queries'), got {} maps",
                maps.len()
            );
        }
        let labels = io.host::<HostLabels>(1)?;
        let targets = DetrTargets::from_rows(&labels.rows, labels.images);
        let levels = Level::in_order(&maps[0], &maps[1], &maps[2], &maps[3]);
        let denoising = match (maps.len(), io.optional_host::<DenoisingLayout>(2)?) {
            (6, Some(layout)) => (layout.queries > 0).then(|| DenoisingLevels::of(&maps[4], &maps[5], &layout)),
            (6, None) => {
                anyhow::bail!("loss.rtdetr: the decoder refined denoising queries, but the loss has no `denoising` input (their layout: `\"denoise.layout\"`)")
            }
            _ => None,
        };
        let terms = RtDetrLoss.compute(&levels, denoising.as_ref(), &targets, self.group.devices());
        io.output(0, Value::Loss(terms.named()));
        Ok(())
    }
}
