//! `data.yolo`: the loader's batch of a YOLO dataset uploaded to the device. The batch is read,
//! augmented and assembled on the host by the loader's threads; this stage is its one
//! host-to-device copy, so it cannot run inside a graph. The labels also stay on the host
//! (`labels`), for stages that work on them there.

use std::rc::Rc;

use burn::tensor::{DType, Device, Int, Tensor, TensorData};

use crate::data::{Batch, HostLabels};
use crate::stage::{AnyTensor, Autodiff, Host, HostValue, Io, Kind, Stage, Ty, Value, no_collective, port};

pub static KIND: Kind = Kind {
    name: "data.yolo",
    summary: "reads, augments and batches images and labels of a YOLO dataset",
    inputs: &[],
    outputs: &[port("images", Ty::Tensor), port("targets", Ty::Tensor), port("labels", Ty::Host(HostLabels::TY))],
    not_capturable: Some("it decodes and augments images on the host"),
    autodiff: Autodiff::None,
    collective: no_collective,
    recapture_on: &[],
    settings: None,
    build: |b| Ok(Rc::new(DataYolo { device: b.device.clone() })),
};

struct DataYolo {
    device: Device,
}

impl Stage for DataYolo {
    fn run(&self, io: &mut Io<'_>) -> anyhow::Result<()> {
        let batch = io.take_batch()?;
        let labels = HostLabels { rows: batch.targets.clone(), images: batch.size };
        let (images, targets) = upload(batch, &self.device);
        io.output(0, Value::Tensor(AnyTensor::R4(images)));
        io.output(1, Value::Tensor(AnyTensor::R3(targets)));
        io.output(2, Value::Host(Host::new(labels)));
        Ok(())
    }
}

/// One host-to-device copy of a batch, from its own buffers (no host copy), staged where the
/// backend offers it (pinned memory on CUDA); images travel as u8 and become f32 in [0, 1] on
/// the device. (Created without a dtype, an int tensor takes the device's default int type, and
/// burn converts the data on the host first: 4x the bytes, and the staged buffer thrown away.)
pub fn upload(batch: Batch, device: &Device) -> (Tensor<4>, Tensor<3>) {
    let (b, h, w) = (batch.size, batch.height as usize, batch.width as usize);
    let mut images = TensorData::new(batch.images, [b, 3, h, w]);
    let mut targets = TensorData::new(batch.targets, [b, batch.rows, 5]);
    device.staging([&mut images, &mut targets].into_iter());
    let images = Tensor::<4, Int>::from_data(images, (device, DType::U8)).float().div_scalar(255.0);
    let targets = Tensor::<3>::from_data(targets, device);
    (images, targets)
}
