//! The network's inference graph as burn records it: the fused eval forward and its output
//! ([`output`]), run on a graph-capture device
//! (`Device::capture()`), where nothing executes and every tensor copied in (the weights, the
//! decode's grid) becomes a constant of the recorded graph.

use anyhow::Context;
use burn::backend::Capture;
use burn::backend::capture::{CapturedGraph, TensorId};
use burn::tensor::{DType, Device, FloatDType, Tensor, TensorData};
use libreyolo_families::{Ctx, Network, ParamStore};

/// The recorded graph of `network` on images of `dims` (B, C, H, W) in `dtype` (`None`: f32):
/// its one input is the images, its one output [`output`]'s.
pub fn record(network: &Network, params: &ParamStore, dims: [usize; 4], dtype: Option<FloatDType>) -> anyhow::Result<CapturedGraph> {
    let cx = Ctx::eval_fused(params, dtype);
    // Fold BatchNorm and RepConvN where the weights are, so the recorded graph holds the folded
    // convolutions rather than the arithmetic that folds them. The folding does not depend on
    // the image size, but a network may need a size of its own (RT-DETR picks 300 queries from
    // its encoder's tokens, which a 64x64 image does not have): one image of the exported size.
    let home = params.entries().iter().find_map(|e| e.value.float()).map_or_else(Device::flex, |t| t.device());
    let probe = Tensor::<4>::zeros([1, dims[1], dims[2], dims[3]], &home);
    drop(network.forward(probe, &cx, false));
    let device = Device::capture();
    let dtype = dtype.map(DType::from).unwrap_or(DType::F32);
    device
        .capture_scope(|scope| {
            let cx = cx.copied_to(&device);
            let images = Tensor::<4>::from_data(TensorData::zeros::<f32, _>(dims).convert_dtype(dtype), (&device, dtype));
            let input = id(&images);
            let out = output(network, &network.forward(images, &cx, false).main, [dims[2], dims[3]]);
            scope.complete([input], [out])
        })
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("recording the network's inference graph")
}

/// What an exported model gives, in f32, as LibreYOLO's exports do: a detector's decode
/// `(B, 4 + nc, anchors)` (xyxy pixels, then class scores), a classifier's logits `(B, nc)`.
/// Returns the output's id on the capture device.
fn output(network: &Network, maps: &[Tensor<4>], image: [usize; 2]) -> TensorId {
    let head = network.head();
    if head.as_classifier().is_some() {
        let [b, nc, _, _] = maps[0].dims();
        return id(&maps[0].clone().cast(FloatDType::F32).reshape([b, nc]));
    }
    id(&head.eval(maps, image).cast(FloatDType::F32))
}

/// The capture backend's id of `t`, a tensor on a capture device.
fn id<const D: usize>(t: &Tensor<D>) -> TensorId {
    t.clone().try_into_primitive::<Capture>().expect("a tensor on the capture device").id()
}
