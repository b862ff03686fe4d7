//! `data.classify`: the loader's batch of an ImageFolder dataset uploaded to the device, the
//! images and each image's class. Like `data.yolo`, its work is on the host (decode, crop,
//! flip) and its one host-to-device copy, so it cannot run inside a graph.

use std::rc::Rc;

use burn::tensor::{DType, Device, Int, Tensor, TensorData};

use crate::data::Batch;
use crate::stage::{AnyTensor, Autodiff, Io, Kind, Stage, Ty, Value, no_collective, port};

pub static KIND: Kind = Kind {
    name: "data.classify",
    summary: "reads, crops and batches the images of an ImageFolder dataset with their classes",
    inputs: &[],
    outputs: &[port("images", Ty::Tensor), port("labels", Ty::Tensor)],
    not_capturable: Some("it decodes and augments images on the host"),
    autodiff: Autodiff::None,
    collective: no_collective,
    recapture_on: &[],
    settings: None,
    build: |b| Ok(Rc::new(DataClassify { device: b.device.clone() })),
};

struct DataClassify {
    device: Device,
}

impl Stage for DataClassify {
    fn run(&self, io: &mut Io<'_>) -> anyhow::Result<()> {
        let batch = io.take_batch()?;
        let (images, labels) = upload(batch, &self.device)?;
        io.output(0, Value::Tensor(AnyTensor::R4(images)));
        io.output(1, Value::Tensor(AnyTensor::R1(labels)));
        Ok(())
    }
}

/// The images as `data.yolo` uploads them (u8, one staged copy, f32 in [0, 1] on the device)
/// and the classes `(B)` as f32 (exact below 2^24; the loss casts them to indices on the
/// device). A classification batch holds one whole-image target row per image.
pub fn upload(batch: Batch, device: &Device) -> anyhow::Result<(Tensor<4>, Tensor<1>)> {
    let (b, h, w) = (batch.size, batch.height as usize, batch.width as usize);
    let labels: Vec<f32> = batch.targets.chunks_exact(batch.rows * 5).map(|rows| rows[0]).collect();
    if let Some(k) = labels.iter().position(|&c| c < 0.0) {
        anyhow::bail!("`data.classify` got an image without a class (batch image {k}): its dataset is not an ImageFolder directory");
    }
    let mut images = TensorData::new(batch.images, [b, 3, h, w]);
    let mut labels = TensorData::new(labels, [b]);
    device.staging([&mut images, &mut labels].into_iter());
    let images = Tensor::<4, Int>::from_data(images, (device, DType::U8)).float().div_scalar(255.0);
    Ok((images, Tensor::<1>::from_data(labels, device)))
}
