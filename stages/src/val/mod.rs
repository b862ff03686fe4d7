//! Validation: predictions to detections (multi-label candidates, class-aware NMS) and COCO
//! mAP against the dataset's labels, as LibreYOLO's `DetectionValidator` and `COCOEvaluator`.

pub mod coco;
pub mod nms;

use crate::data::Dataset;
use coco::GroundTruth;

/// Ground truth as LibreYOLO's `YOLOCocoAPI` builds it: image ids in dataset order, boxes from
/// the label rows scaled by the image's header size (f64), clipped, empty boxes dropped.
pub fn ground_truth(ds: &Dataset) -> Vec<GroundTruth> {
    let mut out = vec![];
    for (image, item) in ds.items.iter().enumerate() {
        let (w, h) = (item.size.0 as f64, item.size.1 as f64);
        for l in &item.labels {
            let (x1, y1) = ((l.x1 * w).clamp(0.0, w), (l.y1 * h).clamp(0.0, h));
            let (x2, y2) = ((l.x2 * w).clamp(0.0, w), (l.y2 * h).clamp(0.0, h));
            if x2 <= x1 || y2 <= y1 {
                continue;
            }
            out.push(GroundTruth { image, category: l.cls as usize, bbox: [x1, y1, x2 - x1, y2 - y1], area: (x2 - x1) * (y2 - y1), crowd: false });
        }
    }
    out
}
