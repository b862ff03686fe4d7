//! `loss.rtdetr`: LibreYOLO's RT-DETR loss (Hungarian matching, then VFL, L1 and GIoU on every
//! decoder layer and on the encoder's chosen queries) on an `RTDETRDecoder` head's outputs, in
//! f32. Its matching reads the cost matrices on the host, so it runs eager — the seam of
//! LibreYOLO's DETR capture contract, where the network before it can be captured.

use std::rc::Rc;

use burn::tensor::{FloatDType, Tensor};

use crate::loss::rtdetr::{DenoisingLevels, Level};
use crate::loss::{DetrTargets, RtDetrLoss};
use crate::stage::{AnyTensor, Autodiff, Group, Io, Kind, Parallel, Stage, Ty, Value, port};

pub static KIND: Kind = Kind {
    name: "loss.rtdetr",
    summary: "RT-DETR loss: Hungarian matching, then VFL, L1 and GIoU on every decoder layer and the encoder's queries",
    inputs: &[port("preds", Ty::Activations), port("targets", Ty::Tensor)],
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
        let AnyTensor::R3(targets) = io.tensor(1)? else { anyhow::bail!("loss.rtdetr reads (batch, max_labels, 5) targets") };
        let targets = DetrTargets::from_tensor(&targets);
        let levels = Level::in_order(&maps[0], &maps[1], &maps[2], &maps[3]);
        let denoising = (maps.len() == 6).then(|| {
            let queries = maps[4].dims()[2];
            DenoisingLevels { levels: Level::per_layer(&maps[4], &maps[5]), groups: queries / (2 * targets.max_per_image().max(1)) }
        });
        let terms = RtDetrLoss.compute(&levels, denoising.as_ref(), &targets, self.group.devices());
        io.output(0, Value::Loss(terms.named()));
        Ok(())
    }
}
