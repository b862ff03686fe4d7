//! `loss.rtdetr`: LibreYOLO's RT-DETR loss (Hungarian matching, then VFL, L1 and GIoU on every
//! decoder layer and on the encoder's chosen queries) on an `RTDETRDecoder` head's outputs, in
//! f32. Its matching reads the cost matrices on the host, so it runs eager — the seam of
//! LibreYOLO's DETR capture contract, where the network before it can be captured.

use std::rc::Rc;

use burn::tensor::{FloatDType, Tensor};

use crate::loss::rtdetr::Level;
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
        let [boxes, logits, enc_boxes, enc_logits] = <[Tensor<4>; 4]>::try_from(maps).map_err(|m| {
            anyhow::anyhow!("loss.rtdetr reads an RTDETRDecoder head's training outputs (every layer's boxes and logits, the encoder's), got {} maps", m.len())
        })?;
        let AnyTensor::R3(targets) = io.tensor(1)? else { anyhow::bail!("loss.rtdetr reads (batch, max_labels, 5) targets") };
        let images = targets.dims()[0];
        let rows: Vec<f32> = targets.into_data().convert::<f32>().try_into_vec::<f32>().map_err(|e| anyhow::anyhow!("reading the targets: {e:?}"))?;
        let [layers, b, q, nc] = logits.dims();
        let layer = |i: usize| Level {
            boxes: boxes.clone().slice_dim(0, i..i + 1).reshape([b, q, 4]),
            logits: logits.clone().slice_dim(0, i..i + 1).reshape([b, q, nc]),
        };
        // LibreYOLO's order: the last layer, the others, the encoder's queries
        let mut levels = vec![layer(layers - 1)];
        levels.extend((0..layers - 1).map(layer));
        levels.push(Level { boxes: enc_boxes.reshape([b, q, 4]), logits: enc_logits.reshape([b, q, nc]) });
        let terms = RtDetrLoss.compute(&levels, &DetrTargets::from_rows(&rows, images), self.group.devices());
        io.output(0, Value::Loss(terms.named()));
        Ok(())
    }
}
