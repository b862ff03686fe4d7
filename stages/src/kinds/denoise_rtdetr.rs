//! `denoise.rtdetr`: this batch's contrastive denoising queries for an `RTDETRDecoder` head
//! (LibreYOLO's `get_contrastive_denoising_training_group`), built on the host from the batch's
//! labels and uploaded as tensors of one shape for every batch. LibreYOLO builds them inside the
//! decoder's forward, which is why it never captures its decoder; here the forward reads them
//! as an input like the images, so a manifest can capture the decoder too. The groups' layout
//! (how many real queries, how many groups) goes to the loss on the host.

use std::rc::Rc;

use burn::tensor::Device;
use libreyolo_families::Network;
use libreyolo_families::rtdetr::{DetrTargets, RtDetrDecoder};

use crate::data::HostLabels;
use crate::loss::rtdetr::DenoisingLayout;
use crate::stage::{Autodiff, Host, HostValue, Io, Kind, Stage, Ty, Value, no_collective, port};

pub static KIND: Kind = Kind {
    name: "denoise.rtdetr",
    summary: "RT-DETR's denoising queries, drawn on the host from the batch's labels",
    inputs: &[port("labels", Ty::Host(HostLabels::TY))],
    outputs: &[port("queries", Ty::Tensor), port("layout", Ty::Host(DenoisingLayout::TY))],
    not_capturable: Some("it draws the groups on the host from the batch's labels"),
    autodiff: Autodiff::None,
    collective: no_collective,
    recapture_on: &[],
    settings: None,
    build: |b| {
        let network = b.model.network.clone();
        let Some(decoder) = decoder(&network) else {
            anyhow::bail!("stage `{}` (denoise.rtdetr) builds the denoising queries of an `RTDETRDecoder` head; this network's head is another block", b.stage);
        };
        if !decoder.denoises() {
            anyhow::bail!("stage `{}` (denoise.rtdetr): the decoder has no denoising queries (`args.denoising = 0`); remove the stage", b.stage);
        }
        Ok(Rc::new(DenoiseRtDetr { network, device: b.device.clone() }))
    },
};

fn decoder(network: &Network) -> Option<&RtDetrDecoder> {
    network.head_layer().as_any().downcast_ref::<RtDetrDecoder>()
}

struct DenoiseRtDetr {
    network: Rc<Network>,
    device: Device,
}

impl Stage for DenoiseRtDetr {
    fn run(&self, io: &mut Io<'_>) -> anyhow::Result<()> {
        let labels = io.host::<HostLabels>(0)?;
        let targets = DetrTargets::from_rows(&labels.rows, labels.images);
        let decoder = decoder(&self.network).expect("checked when built");
        let dn = decoder.denoising(&targets, io.step.iteration as u64).expect("checked when built");
        io.output(0, Value::Tensors(dn.upload(&self.device).into_any()));
        io.output(1, Value::Host(Host::new(DenoisingLayout { queries: dn.queries, groups: dn.groups })));
        Ok(())
    }
}
