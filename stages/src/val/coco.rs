//! COCO bbox evaluation, a line-by-line port of pycocotools' `COCOeval` (`evaluate`,
//! `accumulate`, `summarize`): IoU thresholds 0.50:0.05:0.95, 101 recall points, areas
//! all / small (< 32^2) / medium (< 96^2) / large, max detections 1, 10, 100, per category.
//! Returns the 12 standard numbers.

/// A ground-truth box: `bbox` is `[x, y, w, h]` pixels; `area` as stored in the annotation.
#[derive(Debug, Clone, Copy)]
pub struct GroundTruth {
    pub image: usize,
    pub category: usize,
    pub bbox: [f64; 4],
    pub area: f64,
    pub crowd: bool,
}

/// A detection: `bbox` is `[x, y, w, h]` pixels.
#[derive(Debug, Clone, Copy)]
pub struct Detection {
    pub image: usize,
    pub category: usize,
    pub bbox: [f64; 4],
    pub score: f64,
}

/// The 12 numbers of `COCOeval.summarize()`, in its order.
pub const STAT_NAMES: [&str; 12] =
    ["mAP50-95", "mAP50", "mAP75", "mAP_small", "mAP_medium", "mAP_large", "AR1", "AR10", "AR100", "AR_small", "AR_medium", "AR_large"];

const AREAS: [[f64; 2]; 4] = [[0.0, 1e10], [0.0, 1024.0], [1024.0, 9216.0], [9216.0, 1e10]];
const MAX_DETS: [usize; 3] = [1, 10, 100];
const RECALL_POINTS: usize = 101;

/// `np.linspace(start, stop, n)` bit for bit: `i * step + start`, the last value `stop`.
fn linspace(start: f64, stop: f64, n: usize) -> Vec<f64> {
    let step = (stop - start) / (n - 1) as f64;
    let mut v: Vec<f64> = (0..n).map(|i| i as f64 * step + start).collect();
    v[n - 1] = stop;
    v
}

fn iou_thresholds() -> Vec<f64> {
    linspace(0.5, 0.95, 10)
}

fn recall_thresholds() -> Vec<f64> {
    linspace(0.0, 1.0, RECALL_POINTS)
}

/// pycocotools `bbIou` for one pair (xywh).
fn iou(d: &[f64; 4], g: &[f64; 4], crowd: bool) -> f64 {
    let w = (d[0] + d[2]).min(g[0] + g[2]) - d[0].max(g[0]);
    if w <= 0.0 {
        return 0.0;
    }
    let h = (d[1] + d[3]).min(g[1] + g[3]) - d[1].max(g[1]);
    if h <= 0.0 {
        return 0.0;
    }
    let i = w * h;
    let u = if crowd { d[2] * d[3] } else { d[2] * d[3] + g[2] * g[3] - i };
    i / u
}

/// `evaluateImg` for one (image, category, area range): detection scores, matches and ignore
/// flags per IoU threshold, and the ground-truth ignore flags.
struct ImageEval {
    scores: Vec<f64>,
    /// `[threshold][detection]`: matched.
    matched: Vec<Vec<bool>>,
    /// `[threshold][detection]`: ignored.
    ignored: Vec<Vec<bool>>,
    gt_ignored: Vec<bool>,
}

fn evaluate_image(gts: &[&GroundTruth], dts: &[&Detection], area: [f64; 2], max_det: usize, thresholds: &[f64]) -> Option<ImageEval> {
    if gts.is_empty() && dts.is_empty() {
        return None;
    }
    let gt_ignore_raw: Vec<bool> = gts.iter().map(|g| g.crowd || g.area < area[0] || g.area > area[1]).collect();
    // Non-ignored ground truths first (stable).
    let mut gt_order: Vec<usize> = (0..gts.len()).collect();
    gt_order.sort_by_key(|&i| gt_ignore_raw[i]);
    let gts: Vec<&GroundTruth> = gt_order.iter().map(|&i| gts[i]).collect();
    let gt_ignored: Vec<bool> = gt_order.iter().map(|&i| gt_ignore_raw[i]).collect();
    // Detections by score, descending (stable), at most max_det.
    let mut dt_order: Vec<usize> = (0..dts.len()).collect();
    dt_order.sort_by(|&a, &b| dts[b].score.total_cmp(&dts[a].score));
    dt_order.truncate(max_det);
    let dts: Vec<&Detection> = dt_order.iter().map(|&i| dts[i]).collect();

    let ious: Vec<Vec<f64>> = dts.iter().map(|d| gts.iter().map(|g| iou(&d.bbox, &g.bbox, g.crowd)).collect()).collect();
    let t_n = thresholds.len();
    let mut gt_matched = vec![vec![false; gts.len()]; t_n];
    let mut matched = vec![vec![false; dts.len()]; t_n];
    let mut ignored = vec![vec![false; dts.len()]; t_n];
    for (ti, &t) in thresholds.iter().enumerate() {
        for (di, _) in dts.iter().enumerate() {
            let mut best_iou = t.min(1.0 - 1e-10);
            let mut m: Option<usize> = None;
            for (gi, g) in gts.iter().enumerate() {
                if gt_matched[ti][gi] && !g.crowd {
                    continue;
                }
                if let Some(mi) = m
                    && !gt_ignored[mi]
                    && gt_ignored[gi]
                {
                    break;
                }
                if ious[di][gi] < best_iou {
                    continue;
                }
                best_iou = ious[di][gi];
                m = Some(gi);
            }
            if let Some(mi) = m {
                ignored[ti][di] = gt_ignored[mi];
                matched[ti][di] = true;
                gt_matched[ti][mi] = true;
            }
        }
    }
    for (di, d) in dts.iter().enumerate() {
        let a = d.bbox[2] * d.bbox[3];
        let outside = a < area[0] || a > area[1];
        for ti in 0..t_n {
            ignored[ti][di] = ignored[ti][di] || (!matched[ti][di] && outside);
        }
    }
    Some(ImageEval { scores: dts.iter().map(|d| d.score).collect(), matched, ignored, gt_ignored })
}

/// COCO evaluation over `images` images and categories `0..categories`.
pub fn evaluate(images: usize, categories: usize, gts: &[GroundTruth], dts: &[Detection]) -> [f64; 12] {
    let thresholds = iou_thresholds();
    let recalls = recall_thresholds();
    let (t_n, r_n, k_n, a_n, m_n) = (thresholds.len(), recalls.len(), categories, AREAS.len(), MAX_DETS.len());
    // precision[t][r][k][a][m], recall[t][k][a][m]; -1 where a category has no ground truth.
    let mut precision = vec![-1.0; t_n * r_n * k_n * a_n * m_n];
    let mut recall = vec![-1.0; t_n * k_n * a_n * m_n];
    let p_at = |t: usize, r: usize, k: usize, a: usize, m: usize| (((t * r_n + r) * k_n + k) * a_n + a) * m_n + m;
    let r_at = |t: usize, k: usize, a: usize, m: usize| ((t * k_n + k) * a_n + a) * m_n + m;

    let mut gt_by: Vec<Vec<Vec<&GroundTruth>>> = vec![vec![vec![]; images]; categories];
    for g in gts {
        gt_by[g.category][g.image].push(g);
    }
    let mut dt_by: Vec<Vec<Vec<&Detection>>> = vec![vec![vec![]; images]; categories];
    for d in dts {
        dt_by[d.category][d.image].push(d);
    }
    let max_det_all = *MAX_DETS.last().unwrap();
    for k in 0..k_n {
        for (a, area) in AREAS.iter().enumerate() {
            let evals: Vec<ImageEval> = (0..images).filter_map(|i| evaluate_image(&gt_by[k][i], &dt_by[k][i], *area, max_det_all, &thresholds)).collect();
            if evals.is_empty() {
                continue;
            }
            for (m, &max_det) in MAX_DETS.iter().enumerate() {
                // Concatenate the first max_det detections of every image, sort by score (stable).
                let mut rows: Vec<(f64, usize, usize)> = vec![]; // (score, image eval, detection)
                for (e, ev) in evals.iter().enumerate() {
                    for di in 0..ev.scores.len().min(max_det) {
                        rows.push((ev.scores[di], e, di));
                    }
                }
                rows.sort_by(|x, y| y.0.total_cmp(&x.0));
                let npig: usize = evals.iter().map(|ev| ev.gt_ignored.iter().filter(|g| !**g).count()).sum();
                if npig == 0 {
                    continue;
                }
                for t in 0..t_n {
                    let (mut tp, mut fp) = (0f64, 0f64);
                    let mut rc = Vec::with_capacity(rows.len());
                    let mut pr = Vec::with_capacity(rows.len());
                    for &(_, e, di) in &rows {
                        let (mt, ig) = (evals[e].matched[t][di], evals[e].ignored[t][di]);
                        if mt && !ig {
                            tp += 1.0;
                        }
                        if !mt && !ig {
                            fp += 1.0;
                        }
                        rc.push(tp / npig as f64);
                        pr.push(tp / (fp + tp + f64::EPSILON));
                    }
                    recall[r_at(t, k, a, m)] = rc.last().copied().unwrap_or(0.0);
                    for i in (1..pr.len()).rev() {
                        if pr[i] > pr[i - 1] {
                            pr[i - 1] = pr[i];
                        }
                    }
                    for (ri, r) in recalls.iter().enumerate() {
                        // np.searchsorted(rc, r, side="left"); positions past the end stay 0.
                        let pi = rc.partition_point(|v| v < r);
                        precision[p_at(t, ri, k, a, m)] = if pi < pr.len() { pr[pi] } else { 0.0 };
                    }
                }
            }
        }
    }

    let mean_valid = |values: Vec<f64>| {
        let valid: Vec<f64> = values.into_iter().filter(|v| *v > -1.0).collect();
        if valid.is_empty() { -1.0 } else { valid.iter().sum::<f64>() / valid.len() as f64 }
    };
    let ap = |iou: Option<usize>, a: usize, m: usize| {
        let ts: Vec<usize> = iou.map(|t| vec![t]).unwrap_or_else(|| (0..t_n).collect());
        let mut v = vec![];
        for &t in &ts {
            for r in 0..r_n {
                for k in 0..k_n {
                    v.push(precision[p_at(t, r, k, a, m)]);
                }
            }
        }
        mean_valid(v)
    };
    let ar = |a: usize, m: usize| {
        let mut v = vec![];
        for t in 0..t_n {
            for k in 0..k_n {
                v.push(recall[r_at(t, k, a, m)]);
            }
        }
        mean_valid(v)
    };
    // IoU 0.5 is threshold 0, 0.75 is threshold 5.
    [
        ap(None, 0, 2),
        ap(Some(0), 0, 2),
        ap(Some(5), 0, 2),
        ap(None, 1, 2),
        ap(None, 2, 2),
        ap(None, 3, 2),
        ar(0, 0),
        ar(0, 1),
        ar(0, 2),
        ar(1, 2),
        ar(2, 2),
        ar(3, 2),
    ]
}
