//! From decoded predictions to final detections (LibreYOLO's postprocess): every (anchor,
//! class) with score above `conf` is a candidate (`Labels::Multi`, YOLOv9), or each anchor's best
//! class alone (`Labels::Best`, YOLOX); for multi-label candidates the best
//! `max_candidates` are kept; boxes are mapped back through the resize and clipped;
//! class-aware NMS at `iou`; the best `max_det` remain. A query head (`Labels::TopK`, RT-DETR)
//! keeps the best `max_det` (query, class) pairs above `conf`, its boxes mapped back unclipped,
//! and no NMS.

pub use libreyolo_families::block::Labels;

/// A detection in original-image pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Det {
    pub xyxy: [f32; 4],
    pub score: f32,
    pub class: usize,
}

#[derive(Debug, Clone, Copy)]
pub struct NmsConfig {
    pub conf: f32,
    pub iou: f32,
    pub max_det: usize,
    pub max_candidates: usize,
}

/// Detections of one image from its predictions `(4 + nc, A)` (row-major: `pred[row * a + i]`),
/// boxes xyxy in the input's pixels; dividing by `[sx, sy]` (the resize's scale) maps them back
/// to a `(width, height)` image.
pub fn detect(pred: &[f32], nc: usize, labels: Labels, a: usize, [sx, sy]: [f32; 2], (width, height): (u32, u32), cfg: &NmsConfig) -> Vec<Det> {
    let mut candidates = candidates(pred, nc, labels, a, cfg.conf);
    let xyxy = |i: usize| [pred[i] / sx, pred[a + i] / sy, pred[2 * a + i] / sx, pred[3 * a + i] / sy];
    if labels == Labels::TopK {
        // `torch.topk` over the flattened (query, class) scores: ties go to the lower index
        candidates.sort_by(|x, y| y.0.total_cmp(&x.0).then((x.1, x.2).cmp(&(y.1, y.2))));
        candidates.truncate(cfg.max_det);
        return candidates.into_iter().map(|(score, i, class)| Det { xyxy: xyxy(i), score, class }).collect();
    }
    candidates.sort_by(|x, y| y.0.total_cmp(&x.0));
    if labels == Labels::Multi {
        // LibreYOLO's YOLOX postprocess keeps every anchor above `conf` (at most one each).
        candidates.truncate(cfg.max_candidates);
    }
    let (w, h) = (width as f32, height as f32);
    let mut dets: Vec<Det> = candidates
        .into_iter()
        .map(|(score, i, class)| {
            let [x1, y1, x2, y2] = xyxy(i);
            Det { xyxy: [x1.clamp(0.0, w), y1.clamp(0.0, h), x2.clamp(0.0, w), y2.clamp(0.0, h)], score, class }
        })
        .filter(|d| d.xyxy[2] > d.xyxy[0] && d.xyxy[3] > d.xyxy[1])
        .collect();
    let mut kept = class_aware_nms(&mut dets, cfg.iou);
    kept.truncate(cfg.max_det);
    kept
}

/// `(score, anchor, class)` of every pair above `conf` under `labels`. `Best` keeps the first
/// of equal scores, as `torch.max` does.
fn candidates(pred: &[f32], nc: usize, labels: Labels, a: usize, conf: f32) -> Vec<(f32, usize, usize)> {
    let score = |c: usize, i: usize| pred[(4 + c) * a + i];
    match labels {
        Labels::Multi | Labels::TopK => (0..nc).flat_map(|c| (0..a).map(move |i| (score(c, i), i, c))).filter(|p| p.0 > conf).collect(),
        Labels::Best => (0..a)
            .filter_map(|i| {
                let (c, s) = (0..nc).map(|c| (c, score(c, i))).fold((0, f32::NEG_INFINITY), |best, x| if x.1 > best.1 { x } else { best });
                (s > conf).then_some((s, i, c))
            })
            .collect(),
    }
}

/// Greedy NMS within each class; the result sorted by score, descending.
pub fn class_aware_nms(dets: &mut [Det], iou: f32) -> Vec<Det> {
    dets.sort_by(|x, y| y.score.total_cmp(&x.score));
    let mut kept: Vec<Det> = vec![];
    let mut by_class: std::collections::HashMap<usize, Vec<usize>> = Default::default();
    for d in dets.iter() {
        let same = by_class.entry(d.class).or_default();
        if same.iter().all(|&k| box_iou(&kept[k].xyxy, &d.xyxy) <= iou) {
            same.push(kept.len());
            kept.push(*d);
        }
    }
    kept
}

pub fn box_iou(a: &[f32; 4], b: &[f32; 4]) -> f32 {
    let iw = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let ih = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let inter = iw * ih;
    let union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter;
    if union > 0.0 { inter / union } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nms_is_per_class_and_keeps_the_best() {
        let mut dets = vec![
            Det { xyxy: [0.0, 0.0, 10.0, 10.0], score: 0.9, class: 0 },
            Det { xyxy: [1.0, 1.0, 10.0, 10.0], score: 0.8, class: 0 },
            Det { xyxy: [1.0, 1.0, 10.0, 10.0], score: 0.7, class: 1 },
            Det { xyxy: [20.0, 20.0, 30.0, 30.0], score: 0.6, class: 0 },
        ];
        let kept = class_aware_nms(&mut dets, 0.65);
        let scores: Vec<f32> = kept.iter().map(|d| d.score).collect();
        assert_eq!(scores, vec![0.9, 0.7, 0.6]);
    }

    #[test]
    fn candidates_are_multi_label_and_unletterboxed() {
        // Two anchors, two classes: anchor 0 scores 0.5 and 0.4 (both kept: different classes).
        let pred = [10.0, 50.0, 10.0, 50.0, 30.0, 70.0, 30.0, 70.0, 0.5, 0.0001, 0.4, 0.0002];
        let cfg = NmsConfig { conf: 0.001, iou: 0.65, max_det: 300, max_candidates: 30000 };
        let dets = detect(&pred, 2, Labels::Multi, 2, [0.5; 2], (100, 100), &cfg);
        assert_eq!(dets.len(), 2);
        assert_eq!(dets[0].xyxy, [20.0, 20.0, 60.0, 60.0]);
        assert_eq!((dets[0].class, dets[1].class), (0, 1));
        // YOLOX's postprocess: anchor 0's best class alone.
        let best = detect(&pred, 2, Labels::Best, 2, [0.5; 2], (100, 100), &cfg);
        let got: Vec<(usize, f32)> = best.iter().map(|d| (d.class, d.score)).collect();
        assert_eq!(got, vec![(0, 0.5)]);
    }

    #[test]
    fn a_query_head_keeps_its_best_pairs_unclipped_without_nms() {
        // Three queries, two classes; queries 0 and 1 overlap fully (NMS would drop one) and
        // query 2 leaves the image.
        let pred = [
            10.0, 10.0, 80.0, // x1
            10.0, 10.0, 80.0, // y1
            50.0, 50.0, 240.0, // x2
            50.0, 50.0, 240.0, // y2
            0.9, 0.8, 0.3, // class 0
            0.2, 0.8, 0.0005, // class 1
        ];
        let cfg = NmsConfig { conf: 0.001, iou: 0.65, max_det: 4, max_candidates: 30000 };
        let dets = detect(&pred, 2, Labels::TopK, 3, [0.5; 2], (100, 100), &cfg);
        let got: Vec<(usize, usize, f32)> = dets.iter().map(|d| ((d.xyxy[0] as usize), d.class, d.score)).collect();
        // 0.8 twice: query 1's class 0 before its class 1 (torch.topk's flat order); query 2's
        // class 1 is under `conf`, and `max_det` cuts the rest
        assert_eq!(got, vec![(20, 0, 0.9), (20, 0, 0.8), (20, 1, 0.8), (160, 0, 0.3)]);
        assert_eq!(dets[3].xyxy, [160.0, 160.0, 480.0, 480.0], "unclipped, as LibreYOLO leaves a query's box");
        let fewer = detect(&pred, 2, Labels::TopK, 3, [0.5; 2], (100, 100), &NmsConfig { max_det: 2, ..cfg });
        assert_eq!(fewer.len(), 2);
    }
}
