//! `network.forward`: the network's training forward. The parameters become autodiff leaves in a
//! [`Ctx`] (cast to the compute dtype with mixed precision), BatchNorm normalises with batch
//! statistics, and the context goes on the step's tape for the backward (which also folds the
//! batch statistics into the running ones, once the context no longer holds them).
//!
//! With `until = "LAYER"` the program runs the stage in two parts: the layers up to that layer
//! ([`Part::Until`], captured when the stage is), then the rest from the activations that
//! cross the cut ([`Part::From`], always eager), e.g. the backbone and neck in a graph and the
//! heads eager with the loss.
//!
//! Its optional `head` input hands device tensors to a head that conditions on them in training
//! (RT-DETR's denoising queries, from a `denoise.rtdetr` stage); the part after a cut reads
//! them.

use std::rc::Rc;

use burn::tensor::{FloatDType, Tensor};
use libreyolo_families::{Ctx, ParamStore, Role, Value as Stored};

use crate::stage::{Activations, AnyTensor, Autodiff, Build, Group, Io, Kind, Model, Parallel, Part, Stage, StepInfo, Ty, Value, optional, port};

pub static KIND: Kind = Kind {
    name: "network.forward",
    summary: "runs the network on a batch of images",
    inputs: &[port("images", Ty::Tensor), optional("head", Ty::Tensor)],
    outputs: &[port("preds", Ty::Activations)],
    not_capturable: None,
    autodiff: Autodiff::Forward,
    collective: |p: &Parallel| {
        (p.world > 1 && p.sync_bn).then_some("SyncBatchNorm all-reduces inside the forward; with several GPUs capture needs `sync_bn=false`")
    },
    recapture_on: &[],
    settings: None,
    build: |b| Ok(Rc::new(NetworkForward::new(b))),
};

pub struct NetworkForward {
    model: Model,
    compute: Option<FloatDType>,
    group: Rc<dyn Group>,
    sync_bn: bool,
}

impl NetworkForward {
    pub fn new(b: &Build<'_>) -> Self {
        Self { model: b.model.clone(), compute: b.compute, group: b.group.clone(), sync_bn: b.parallel.sync_bn }
    }

    /// A training context over `params`: autodiff leaves, the compute dtype, and BatchNorm
    /// statistics shared over the replicas with SyncBatchNorm.
    pub fn context(&self, params: &ParamStore) -> Ctx {
        let cx = match self.compute {
            Some(d) => Ctx::train_in(params, d),
            None => Ctx::train(params),
        };
        match (self.sync_bn, self.group.devices()) {
            (true, Some(devices)) => cx.synced_over(devices.to_vec()),
            _ => cx,
        }
    }

    fn layer(&self, name: &str) -> anyhow::Result<usize> {
        self.model.network.layer_index(name).ok_or_else(|| anyhow::anyhow!("the network has no layer `{name}`"))
    }
}

fn rank4(t: AnyTensor) -> Tensor<4> {
    match t {
        AnyTensor::R4(t) => t,
        other => panic!("expected a rank-4 activation, got {:?}", other.dims()),
    }
}

impl Stage for NetworkForward {
    fn run(&self, io: &mut Io<'_>) -> anyhow::Result<()> {
        let network = &self.model.network;
        let with_aux = self.model.with_aux;
        let mut cx = self.context(&self.model.params.borrow());
        // the head's inputs: port 1 in the whole forward and in the part after a cut
        if let (Part::Whole | Part::From(_), Some(tensors)) = (io.part, io.optional_tensors(1)?) {
            cx = cx.with_head_inputs(tensors);
        }
        let out = match io.part {
            Part::Whole => {
                let AnyTensor::R4(images) = io.tensor(0)? else { anyhow::bail!("network.forward reads rank-4 images") };
                let maps = network.forward(images, &cx, with_aux);
                let groups = std::iter::once(maps.main).chain(maps.aux).map(|g| g.into_iter().map(AnyTensor::R4).collect()).collect();
                Activations { groups }
            }
            Part::Until(layer) => {
                let AnyTensor::R4(images) = io.tensor(0)? else { anyhow::bail!("network.forward reads rank-4 images") };
                let crossing = network.forward_until(self.layer(layer)?, images, &cx, with_aux);
                Activations { groups: vec![crossing.into_iter().map(AnyTensor::R4).collect()] }
            }
            Part::From(layer) => {
                let crossing = io.activations(0)?.flat().into_iter().map(rank4).collect();
                let maps = network.forward_from(self.layer(layer)?, crossing, &cx, with_aux);
                let groups = std::iter::once(maps.main).chain(maps.aux).map(|g| g.into_iter().map(AnyTensor::R4).collect()).collect();
                Activations { groups }
            }
            Part::Backward { .. } => anyhow::bail!("network.forward has no backward part"),
        };
        io.tape().contexts.push(cx);
        io.output(0, Value::Activations(out));
        Ok(())
    }

    /// `num_batches_tracked += 1` for every BatchNorm (each ran in this training forward): the
    /// host half of the statistics update, whose device half the backward folds in.
    fn finish(&self, _step: &StepInfo) {
        let mut params = self.model.params.borrow_mut();
        let counts: Vec<_> = (0..params.len()).map(libreyolo_families::ParamId).filter(|&id| params.entry(id).role == Role::BatchCount).collect();
        for id in counts {
            if let Stored::Count(n) = &mut params.entry_mut(id).value {
                *n += 1;
            }
        }
    }
}
