//! LibreYOLO's embedded NMS (`nms=true`, its `export/nms.py`) as ONNX nodes after a detector's
//! decode: the first output is `(1, max_det, 6)`, rows `x1, y1, x2, y2, score, class` best
//! first, zero past the detections; the decode stays the second output, `raw`.
//!
//! The same steps as LibreYOLO's graph, so that the two agree: boxes clamped to the canvas;
//! non-finite boxes and scores set aside; every (anchor, class) pair above `conf` a candidate
//! (multi-label), at most `max(max_det, 30000)` of them, by score; candidates with an empty box
//! dropped; class-aware suppression through ONNX NonMaxSuppression on boxes offset by class.
//! Batch 1 only, as LibreYOLO's.

use burn::tensor::TensorData;
use onnx_protobuf::tensor_proto::DataType;

use super::{Attr, Writer};

/// The thresholds of the embedded NMS (LibreYOLO's `conf`, `iou`, `max_det`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Nms {
    pub conf: f32,
    pub iou: f32,
    pub max_det: usize,
}

/// LibreYOLO's `_YOLO9_MAX_NMS_CANDIDATES`: the most candidates taken before suppression.
const MAX_CANDIDATES: usize = 30_000;

impl Writer<'_> {
    /// A node `op(inputs)` with one new output, returned.
    fn op(&mut self, op: &str, inputs: &[&str], attrs: Vec<(&str, Attr)>) -> String {
        self.fresh += 1;
        let out = format!("nms{}", self.fresh);
        self.node_named(op, inputs.iter().map(|s| s.to_string()).collect(), vec![out.clone()], attrs);
        out
    }

    fn f32s(&mut self, v: Vec<f32>, shape: Vec<usize>) -> anyhow::Result<String> {
        self.constant(TensorData::new(v, shape))
    }

    /// An int64 scalar (a Gather index that drops its axis).
    fn index(&mut self, i: i64) -> anyhow::Result<String> {
        self.constant(TensorData::new(vec![i], Vec::<usize>::new()))
    }

    /// The indices where a 1-D bool `mask` holds (NonZero rather than Compress: runtimes
    /// that type shapes ahead, tract among them, type NonZero's count as a symbol).
    fn where_true(&mut self, mask: &str) -> anyhow::Result<String> {
        let at = self.op("NonZero", &[mask], vec![]);
        let flat = self.const_i64(vec![-1])?;
        Ok(self.op("Reshape", &[&at, &flat], vec![]))
    }

    /// Rows `at` of `x`.
    fn rows(&mut self, x: &str, at: &str) -> String {
        self.op("Gather", &[x, at], vec![("axis", Attr::Int(0))])
    }

    /// Column `c` of a 2-D `x`, as a 1-D tensor.
    fn column(&mut self, x: &str, c: i64) -> anyhow::Result<String> {
        let i = self.index(c)?;
        Ok(self.op("Gather", &[x, &i], vec![("axis", Attr::Int(1))]))
    }

    /// The `k` largest of 1-D `x`, sorted: (values, indices).
    fn top_k(&mut self, x: &str, k: usize) -> anyhow::Result<(String, String)> {
        let k = self.const_i64(vec![k as i64])?;
        self.fresh += 1;
        let (values, indices) = (format!("nms{}v", self.fresh), format!("nms{}i", self.fresh));
        let attrs = vec![("axis", Attr::Int(0)), ("largest", Attr::Int(1)), ("sorted", Attr::Int(1))];
        self.node_named("TopK", vec![x.into(), k], vec![values.clone(), indices.clone()], attrs);
        Ok((values, indices))
    }
}

/// Appends the NMS to `raw`, a `(1, rows, anchors)` f32 decode (`rows` = 4 + nc) of a
/// `canvas` (height, width) input; writes `output`.
pub(super) fn append(w: &mut Writer, raw: &str, rows: usize, anchors: usize, canvas: (usize, usize), nms: &Nms, output: &str) -> anyhow::Result<()> {
    let nc = rows - 4;
    let (boxes, scores) = candidates_input(w, raw, rows, anchors, canvas)?;
    // Multi-label candidates: the top (anchor, class) scores, then those above `conf`.
    let flat = w.const_i64(vec![-1])?;
    let flat = w.op("Reshape", &[&scores, &flat], vec![]);
    let (top, at) = w.top_k(&flat, (anchors * nc).min(nms.max_det.max(MAX_CANDIDATES)))?;
    let conf = w.f32s(vec![nms.conf], vec![1])?;
    let above = w.op("Greater", &[&top, &conf], vec![]);
    let above = w.where_true(&above)?;
    let (top, at) = (w.rows(&top, &above), w.rows(&at, &above));
    let nc_const = w.const_i64(vec![nc as i64])?;
    let anchor = w.op("Div", &[&at, &nc_const], vec![]);
    let whole = w.op("Mul", &[&anchor, &nc_const], vec![]);
    let class = w.op("Sub", &[&at, &whole], vec![]);
    let class = w.op("Cast", &[&class], vec![("to", Attr::Int(DataType::FLOAT as i64))]);
    let cand = w.rows(&boxes, &anchor);
    // Boxes with a positive width and height only.
    let (x1, y1, x2, y2) = (w.column(&cand, 0)?, w.column(&cand, 1)?, w.column(&cand, 2)?, w.column(&cand, 3)?);
    let wide = w.op("Greater", &[&x2, &x1], vec![]);
    let tall = w.op("Greater", &[&y2, &y1], vec![]);
    let valid = w.op("And", &[&wide, &tall], vec![]);
    let valid = w.where_true(&valid)?;
    let (cand, top, class) = (w.rows(&cand, &valid), w.rows(&top, &valid), w.rows(&class, &valid));
    let keep = suppress(w, &boxes, &cand, &top, &class, nms)?;
    // Rows (x1, y1, x2, y2, score, class) of the kept, padded with zeros to max_det, best first.
    let column = w.const_i64(vec![-1, 1])?;
    let kept_boxes = w.rows(&cand, &keep);
    let kept_scores = w.rows(&top, &keep);
    let kept_scores = w.op("Reshape", &[&kept_scores, &column], vec![]);
    let kept_class = w.rows(&class, &keep);
    let kept_class = w.op("Reshape", &[&kept_class, &column], vec![]);
    let rows6 = w.op("Concat", &[&kept_boxes, &kept_scores, &kept_class], vec![("axis", Attr::Int(1))]);
    let zeros = w.f32s(vec![0.0; nms.max_det * 6], vec![nms.max_det, 6])?;
    let padded = w.op("Concat", &[&rows6, &zeros], vec![("axis", Attr::Int(0))]);
    let padded_scores = w.column(&padded, 4)?;
    let (_, best) = w.top_k(&padded_scores, nms.max_det)?;
    let det = w.rows(&padded, &best);
    let shape = w.const_i64(vec![1, nms.max_det as i64, 6])?;
    w.node_named("Reshape", vec![det, shape], vec![output.into()], vec![]);
    Ok(())
}

/// The decode as `(anchors, 4)` boxes clamped to the canvas, non-finite ones zero, and
/// `(anchors, nc)` scores, -1 where the score or its box is not finite.
fn candidates_input(w: &mut Writer, raw: &str, rows: usize, anchors: usize, (h, wd): (usize, usize)) -> anyhow::Result<(String, String)> {
    let shape = w.const_i64(vec![rows as i64, anchors as i64])?;
    let pred = w.op("Reshape", &[raw, &shape], vec![]);
    let pred = w.op("Transpose", &[&pred], vec![("perm", Attr::Ints(vec![1, 0]))]);
    let (zero_i, four, end, axis) = (w.const_i64(vec![0])?, w.const_i64(vec![4])?, w.const_i64(vec![rows as i64])?, w.const_i64(vec![1])?);
    let boxes = w.op("Slice", &[&pred, &zero_i, &four, &axis], vec![]);
    let scores = w.op("Slice", &[&pred, &four, &end, &axis], vec![]);
    // torch's clamp keeps NaN and sends ±inf to the bounds, so only a NaN box is non-finite.
    let nan = w.op("IsNaN", &[&boxes], vec![]);
    let finite = w.op("Not", &[&nan], vec![]);
    let zero = w.f32s(vec![0.0], vec![1])?;
    let bounds = w.f32s(vec![wd as f32, h as f32, wd as f32, h as f32], vec![1, 4])?;
    let clamped = w.op("Max", &[&boxes, &zero], vec![]);
    let clamped = w.op("Min", &[&clamped, &bounds], vec![]);
    let safe_boxes = w.op("Where", &[&finite, &clamped, &zero], vec![]);
    let as_f32 = w.op("Cast", &[&finite], vec![("to", Attr::Int(DataType::FLOAT as i64))]);
    let row_finite = w.op("ReduceMin", &[&as_f32], vec![("axes", Attr::Ints(vec![1])), ("keepdims", Attr::Int(1))]);
    let row_finite = w.op("Cast", &[&row_finite], vec![("to", Attr::Int(DataType::BOOL as i64))]);
    let score_nan = w.op("IsNaN", &[&scores], vec![]);
    let score_inf = w.op("IsInf", &[&scores], vec![]);
    let score_bad = w.op("Or", &[&score_nan, &score_inf], vec![]);
    let score_ok = w.op("Not", &[&score_bad], vec![]);
    let ok = w.op("And", &[&row_finite, &score_ok], vec![]);
    let minus_one = w.f32s(vec![-1.0], vec![1])?;
    let safe_scores = w.op("Where", &[&ok, &scores, &minus_one], vec![]);
    Ok((safe_boxes, safe_scores))
}

/// Class-aware suppression (boxes offset by class times the canvas span, LibreYOLO's trick):
/// the indices of the kept candidates, best first.
fn suppress(w: &mut Writer, all_boxes: &str, cand: &str, scores: &str, class: &str, nms: &Nms) -> anyhow::Result<String> {
    let lo = w.op("ReduceMin", &[all_boxes], vec![("keepdims", Attr::Int(0))]);
    let hi = w.op("ReduceMax", &[all_boxes], vec![("keepdims", Attr::Int(0))]);
    let one = w.f32s(vec![1.0], vec![1])?;
    let span = w.op("Sub", &[&hi, &lo], vec![]);
    let span = w.op("Max", &[&span, &one], vec![]);
    let step = w.op("Add", &[&span, &one], vec![]);
    let column = w.const_i64(vec![-1, 1])?;
    let class = w.op("Reshape", &[class, &column], vec![]);
    let offset = w.op("Mul", &[&class, &step], vec![]);
    let shifted = w.op("Sub", &[cand, &lo], vec![]);
    let shifted = w.op("Add", &[&shifted, &offset], vec![]);
    let (as_boxes, as_scores) = (w.const_i64(vec![1, -1, 4])?, w.const_i64(vec![1, 1, -1])?);
    let batch_boxes = w.op("Reshape", &[&shifted, &as_boxes], vec![]);
    let batch_scores = w.op("Reshape", &[scores, &as_scores], vec![]);
    let most = w.const_i64(vec![MAX_CANDIDATES.max(nms.max_det) as i64])?;
    let iou = w.f32s(vec![nms.iou], vec![1])?;
    let selected = w.op("NonMaxSuppression", &[&batch_boxes, &batch_scores, &most, &iou], vec![("center_point_box", Attr::Int(0))]);
    w.column(&selected, 2)
}
