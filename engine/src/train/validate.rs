//! Validation on the EMA weights, by what the network's head does ([`Task`]). Detection:
//! letterboxed (or stretched) batches, the network in eval mode, decoded predictions read back once per batch,
//! the head's candidates, class-aware NMS, then COCO mAP against the split's labels.
//! Classification: centre-cropped batches, class probabilities read back once per batch, top-1
//! and top-5 accuracy.

use std::sync::Arc;

use burn::tensor::{Device, Tensor};
use libreyolo_families::Network;
use libreyolo_families::block::Detector;
use libreyolo_stages::data::{Dataset, Loader, Transform};
use libreyolo_stages::val::coco::{self, Detection};
use libreyolo_stages::val::nms::{self, NmsConfig};

use libreyolo_stages::kinds::data_yolo::upload;

/// The manifest's validation NMS (`val.conf`, `val.iou`, `val.max_det`, `val.max_candidates`).
pub fn nms_config(val: &crate::manifest::ValSettings) -> NmsConfig {
    NmsConfig { conf: val.conf as f32, iou: val.iou as f32, max_det: val.max_det, max_candidates: val.max_candidates }
}

/// What a network's head does, which decides how it is validated and what a run records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    Detect,
    Classify,
}

/// Ultralytics' and LibreYOLO's names of the classification metrics.
pub const CLASSIFY_METRICS: [&str; 2] = ["accuracy_top1", "accuracy_top5"];

impl Task {
    pub fn of(network: &Network) -> Task {
        if network.head().as_classifier().is_some() { Task::Classify } else { Task::Detect }
    }

    /// The metrics a validation gives, in order; the first is the run's fitness (best weights,
    /// early stopping).
    pub fn metric_names(self) -> &'static [&'static str] {
        match self {
            Task::Detect => &coco::STAT_NAMES,
            Task::Classify => &CLASSIFY_METRICS,
        }
    }

    /// The first `n` of `metrics` as `name value` pairs, joined by `sep`: the line `val`, the
    /// epoch's validation and train.log print (a metric not computed, -1, shows as 0).
    pub fn summary(self, metrics: &[f64], n: usize, sep: &str) -> String {
        let pairs: Vec<String> = self.metric_names().iter().zip(metrics).take(n).map(|(name, v)| format!("{name} {:.4}", v.max(0.0))).collect();
        pairs.join(sep)
    }
}

/// A validation's figures: the task's metrics in [`Task::metric_names`] order, and the
/// detections they score (detection).
pub struct Validated {
    pub metrics: Vec<f64>,
    pub detections: Vec<Detection>,
}

/// Validates `network` on the loader's split, with `forward` mapping a batch of images to the
/// head's eval output (eager, or through a captured graph).
pub fn run(
    network: &Network,
    loader: &Loader,
    device: &Device,
    nms_cfg: &NmsConfig,
    forward: &mut dyn FnMut(Tensor<4>) -> Tensor<3>,
) -> anyhow::Result<Validated> {
    match network.head().as_detector() {
        Some(head) => validate(head, loader, device, nms_cfg, forward).map(|(stats, detections)| Validated { metrics: stats.to_vec(), detections }),
        None => Ok(Validated { metrics: classify(loader, device, forward)?.to_vec(), detections: vec![] }),
    }
}

/// Top-1 and top-5 accuracy on the loader's split: an image counts for top-k when fewer than
/// k classes score above its own.
pub fn classify(loader: &Loader, device: &Device, forward: &mut dyn FnMut(Tensor<4>) -> Tensor<3>) -> anyhow::Result<[f64; 2]> {
    let (mut top1, mut top5, mut images) = (0usize, 0usize, 0usize);
    for batch in loader.epoch(0).iter() {
        let labels: Vec<usize> = batch.targets.chunks_exact(batch.rows * 5).map(|rows| rows[0] as usize).collect();
        let (x, _) = libreyolo_stages::kinds::data_classify::upload(batch, device)?;
        let probs = forward(x);
        let [b, nc, _] = probs.dims();
        let values = probs.into_data().convert::<f32>().try_to_vec::<f32>().map_err(|e| anyhow::anyhow!("{e:?}"))?;
        for (k, &label) in labels.iter().enumerate().take(b) {
            let rank = rank_of(&values[k * nc..(k + 1) * nc], label);
            top1 += usize::from(rank < 1);
            top5 += usize::from(rank < 5);
        }
        images += b;
    }
    anyhow::ensure!(images > 0, "the validation split gave no images");
    Ok([top1 as f64 / images as f64, top5 as f64 / images as f64])
}

/// Where class `label` ranks in `probs` (0: first): the classes scoring above it, and those
/// tied with it that come first (as `torch.topk` breaks ties by index). A NaN score ranks last,
/// so a diverged network scores 0, not 1.
fn rank_of(probs: &[f32], label: usize) -> usize {
    let p = probs[label];
    if p.is_nan() {
        return probs.len();
    }
    probs.iter().enumerate().filter(|&(j, &v)| v > p || (v == p && j < label)).count()
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
    // LibreYOLO scores a query head's detections at any confidence (`COCO_TOPK_FAMILIES`)
    let nms_cfg = &if head.labels() == nms::Labels::TopK { NmsConfig { conf: 0.0, ..*nms_cfg } } else { *nms_cfg };
    let Transform::Resize(resize) = cfg.transform else {
        anyhow::bail!("a detector is validated on resized images, not on {:?} samples", cfg.transform);
    };
    let mut dets: Vec<Detection> = vec![];
    for batch in loader.epoch(0).iter() {
        let indices = batch.indices.clone();
        let (images, _) = upload(batch, device);
        let pred = forward(images);
        let [b, rows, a] = pred.dims();
        let values = pred.into_data().convert::<f32>().try_to_vec::<f32>().map_err(|e| anyhow::anyhow!("{e:?}"))?;
        for (k, &index) in indices.iter().enumerate().take(b) {
            let (ow, oh) = ds.items[index].size;
            let scale = resize.scale((ow, oh), cfg.height, cfg.width);
            let image_pred = &values[k * rows * a..(k + 1) * rows * a];
            for d in nms::detect(image_pred, head.nc(), head.labels(), a, scale, (ow, oh), nms_cfg) {
                let [x1, y1, x2, y2] = d.xyxy.map(|v| v as f64);
                dets.push(Detection { image: index, category: d.class, bbox: [x1, y1, x2 - x1, y2 - y1], score: d.score as f64 });
            }
        }
    }
    let gts = libreyolo_stages::val::ground_truth(ds);
    Ok((coco::evaluate(ds.len(), head.nc(), &gts, &dets), dets))
}

#[cfg(test)]
mod tests {
    use super::rank_of;

    #[test]
    fn a_class_ranks_by_the_scores_above_it_ties_by_index_nan_last() {
        assert_eq!(rank_of(&[0.1, 0.7, 0.2], 1), 0);
        assert_eq!(rank_of(&[0.1, 0.7, 0.2], 0), 2);
        assert_eq!(rank_of(&[0.5, 0.5, 0.0], 1), 1, "a tie goes to the lower index");
        assert_eq!(rank_of(&[0.5, 0.5, 0.0], 0), 0);
        assert_eq!(rank_of(&[f32::NAN, f32::NAN, f32::NAN], 2), 3, "NaN is never right");
    }
}
