//! Validation on the EMA weights: letterboxed batches, the network in eval mode, decoded
//! predictions read back once per batch, multi-label candidates, class-aware NMS, then COCO
//! mAP against the split's labels.

use std::sync::Arc;

use burn::tensor::{Device, Tensor};
use libreyolo_families::block::Detector;
use libreyolo_stages::data::{Dataset, Loader};
use libreyolo_stages::val::coco::{self, Detection};
use libreyolo_stages::val::nms::{self, NmsConfig};

use libreyolo_stages::kinds::data_yolo::upload;

/// The manifest's validation NMS (`val.conf`, `val.iou`, `val.max_det`, `val.max_candidates`).
pub fn nms_config(val: &crate::manifest::ValSettings) -> NmsConfig {
    NmsConfig { conf: val.conf as f32, iou: val.iou as f32, max_det: val.max_det, max_candidates: val.max_candidates }
}

/// COCO stats (`coco::STAT_NAMES` order) on the loader's split and the detections they score,
/// with `forward` mapping a batch of images to decoded predictions (eager, or through a
/// captured graph).
pub fn validate(
    head: &dyn Detector,
    loader: &Loader,
    device: &Device,
    nms_cfg: &NmsConfig,
    forward: &mut dyn FnMut(Tensor<4>) -> Tensor<3>,
) -> anyhow::Result<([f64; 12], Vec<Detection>)> {
    let ds: &Arc<Dataset> = loader.dataset();
    let cfg = loader.config();
    let mut dets: Vec<Detection> = vec![];
    for batch in loader.epoch(0).iter() {
        let indices = batch.indices.clone();
        let (images, _) = upload(batch, device);
        let pred = forward(images);
        let [b, rows, a] = pred.dims();
        let values = pred.into_data().convert::<f32>().try_to_vec::<f32>().map_err(|e| anyhow::anyhow!("{e:?}"))?;
        for (k, &index) in indices.iter().enumerate().take(b) {
            let (ow, oh) = ds.items[index].size;
            let ratio = (cfg.height as f32 / oh as f32).min(cfg.width as f32 / ow as f32);
            let image_pred = &values[k * rows * a..(k + 1) * rows * a];
            for d in nms::detect(image_pred, head.nc(), head.labels(), a, ratio, (ow, oh), nms_cfg) {
                let [x1, y1, x2, y2] = d.xyxy.map(|v| v as f64);
                dets.push(Detection { image: index, category: d.class, bbox: [x1, y1, x2 - x1, y2 - y1], score: d.score as f64 });
            }
        }
    }
    let gts = libreyolo_stages::val::ground_truth(ds);
    Ok((coco::evaluate(ds.len(), head.nc(), &gts, &dets), dets))
}
