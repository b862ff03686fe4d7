//! RT-DETR's contrastive denoising groups (LibreYOLO's
//! `get_contrastive_denoising_training_group`): in training the decoder also refines noised
//! copies of the ground truth — per group, every box once as a positive (noise within half its
//! size, to be restored) and once as a negative (noise between one and two halves, to be
//! rejected), labels flipped at random — seen by no other group and by no matching query.
//! The number of groups follows the batch's largest box count, so the query count changes
//! from batch to batch; built on the host. The queries are laid into a fixed number of slots
//! (`2 x num_denoising`, LibreYOLO's most): the slots past the batch's queries are padding that
//! no query sees and that sees only itself, so every batch has the decoder's shapes of the first
//! and its kernels are compiled once (on the GPU a new shape compiles new matmul kernels, seconds
//! each) while the real queries' outputs are those of the unpadded decoder.

use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use rand::Rng;

use super::DetrTargets;
use crate::tensor::AnyTensor;

/// LibreYOLO's settings: half the labels drawn for flipping are flipped (`label_noise_ratio`
/// 0.5), boxes moved by up to their size (`box_noise_scale` 1.0).
const LABEL_NOISE: f32 = 0.5;
const BOX_NOISE: f32 = 1.0;

/// One batch's random draws, `n` denoising queries an image, in LibreYOLO's order.
#[derive(Debug, Clone)]
pub struct Noise {
    /// U[0, 1) per query: its label is redrawn below `LABEL_NOISE / 2`.
    pub flip: Vec<f32>,
    /// The redrawn label per query.
    pub label: Vec<usize>,
    /// -1 or 1 per box coordinate.
    pub sign: Vec<f32>,
    /// U[0, 1) per box coordinate.
    pub part: Vec<f32>,
}

impl Noise {
    /// Draws for `b` images of `n` queries and `nc` classes.
    pub fn draw(rng: &mut impl Rng, b: usize, n: usize, nc: usize) -> Self {
        let flip = (0..b * n).map(|_| rng.random::<f32>()).collect();
        let label = (0..b * n).map(|_| rng.random_range(0..nc)).collect();
        let sign = (0..b * n * 4).map(|_| if rng.random::<bool>() { 1.0 } else { -1.0 }).collect();
        let part = (0..b * n * 4).map(|_| rng.random::<f32>()).collect();
        Self { flip, label, sign, part }
    }
}

/// A batch's denoising queries: what the decoder prepends to its own queries.
#[derive(Debug, Clone, PartialEq)]
pub struct Denoising {
    /// Per image and query, the class to embed (`nc`: padding, an image with fewer boxes).
    pub classes: Vec<i64>,
    /// Per image and query, the noised box before the sigmoid.
    pub boxes: Vec<f32>,
    /// `(T, T)`, `T` = slots + matching queries: true where a query may not attend.
    pub mask: Vec<bool>,
    /// Denoising queries an image: `2 * max_gt * groups`.
    pub queries: usize,
    /// Slots an image (`queries` of them real, the rest padding): the decoder's query count
    /// before its matching queries.
    pub slots: usize,
    pub groups: usize,
    pub max_gt: usize,
    /// The padding's class (`nc`, the embedding's untrained row).
    pub padding: i64,
}

impl Denoising {
    /// The groups of `targets` for `nc` classes before `queries` matching queries, about
    /// `num_denoising` queries in all; `noise(b, n)` draws the randomness. `None` when there is
    /// no box in the batch (or no denoising).
    pub fn build(targets: &DetrTargets, nc: usize, queries: usize, num_denoising: usize, noise: impl FnOnce(usize, usize) -> Noise) -> Option<Self> {
        let max_gt = targets.max_per_image();
        if num_denoising == 0 || max_gt == 0 {
            return None;
        }
        let groups = (num_denoising / max_gt).max(1);
        let n = 2 * max_gt * groups;
        // at most 2 x num_denoising unless an image has more boxes than num_denoising
        let slots = n.div_ceil(2 * num_denoising) * 2 * num_denoising;
        let b = targets.labels.len();
        let noise = noise(b, n);
        let (mut classes, mut boxes) = (Vec::with_capacity(b * n), Vec::with_capacity(b * n * 4));
        for (image, (labels, truth)) in targets.labels.iter().zip(&targets.boxes).enumerate() {
            for k in 0..n {
                let (j, q) = (k % max_gt, image * n + k);
                let Some(&label) = labels.get(j) else {
                    classes.push(nc as i64);
                    boxes.extend([inverse_sigmoid(0.0); 4]);
                    continue;
                };
                let flipped = noise.flip[q] < LABEL_NOISE * 0.5;
                classes.push(if flipped { noise.label[q] as i64 } else { label as i64 });
                let negative = k % (2 * max_gt) >= max_gt;
                boxes.extend(noised(truth[j], negative, &noise.sign[q * 4..q * 4 + 4], &noise.part[q * 4..q * 4 + 4]));
            }
        }
        let unpadded = Self { classes, boxes, mask: vec![], queries: n, slots: n, groups, max_gt, padding: nc as i64 };
        Some(unpadded.with_slots(slots, queries))
    }

    /// No denoising query, `slots` padding slots an image before `matching` matching queries:
    /// a batch without a box keeps the decoder's shapes (the padding is seen by no query).
    pub fn padding_only(images: usize, nc: usize, slots: usize, matching: usize) -> Self {
        Self {
            classes: vec![nc as i64; images * slots],
            boxes: vec![inverse_sigmoid(0.0); images * slots * 4],
            mask: mask(0, slots, matching, 0, 0),
            queries: 0,
            slots,
            groups: 0,
            max_gt: 0,
            padding: nc as i64,
        }
    }

    /// The queries on `device` as the decoder reads them ([`DenoisingTensors`]).
    pub fn upload(&self, device: &Device) -> DenoisingTensors {
        let (s, t) = (self.slots, self.mask.len().isqrt());
        let b = self.classes.len() / s.max(1);
        let classes = self.classes.iter().map(|&c| c as f32).collect::<Vec<_>>();
        let mask = self.mask.iter().map(|&m| if m { 1.0f32 } else { 0.0 }).collect::<Vec<_>>();
        DenoisingTensors {
            classes: Tensor::from_data(TensorData::new(classes, [b, s]), device),
            boxes: Tensor::from_data(TensorData::new(self.boxes.clone(), [b, s, 4]), device),
            mask: Tensor::from_data(TensorData::new(mask, [t, t]), device),
        }
    }

    /// The same queries in `slots` slots an image (at least `queries`), before `matching`
    /// matching queries: the padding embeds the padding class at the padding box.
    pub fn with_slots(mut self, slots: usize, matching: usize) -> Self {
        assert!(slots >= self.queries, "{slots} slots cannot hold {} denoising queries", self.queries);
        let (n, pad) = (self.slots, slots - self.queries);
        let (mut classes, mut boxes) = (vec![], vec![]);
        for (c, b) in self.classes.chunks(n).zip(self.boxes.chunks(n * 4)) {
            classes.extend(&c[..self.queries]);
            boxes.extend(&b[..self.queries * 4]);
            classes.extend(std::iter::repeat_n(self.padding, pad));
            boxes.extend(std::iter::repeat_n(inverse_sigmoid(0.0), pad * 4));
        }
        (self.classes, self.boxes, self.slots) = (classes, boxes, slots);
        self.mask = mask(self.queries, slots, matching, self.max_gt, self.groups);
        self
    }
}

/// A batch's denoising queries on the device, as the decoder reads them: float tensors of one
/// shape for every batch (the slots' classes `(B, S)`, their boxes before the sigmoid
/// `(B, S, 4)`, the attention mask `(T, T)`, 1 where a query may not attend), so that a
/// captured forward takes them as inputs like the images.
#[derive(Debug, Clone)]
pub struct DenoisingTensors {
    pub classes: Tensor<2>,
    pub boxes: Tensor<3>,
    pub mask: Tensor<2>,
}

impl DenoisingTensors {
    /// The three tensors as one port's value carries them.
    pub fn into_any(self) -> Vec<AnyTensor> {
        vec![AnyTensor::R2(self.classes), AnyTensor::R3(self.boxes), AnyTensor::R2(self.mask)]
    }

    /// From a port's tensors (as [`into_any`](Self::into_any) lists them).
    pub fn from_any(tensors: &[AnyTensor]) -> Option<Self> {
        match tensors {
            [AnyTensor::R2(classes), AnyTensor::R3(boxes), AnyTensor::R2(mask)] => {
                Some(Self { classes: classes.clone(), boxes: boxes.clone(), mask: mask.clone() })
            }
            _ => None,
        }
    }

    /// The slots an image.
    pub fn slots(&self) -> usize {
        self.classes.dims()[1]
    }

    /// The classes to embed, as indices.
    pub fn class_indices(&self) -> Tensor<1, Int> {
        let [b, s] = self.classes.dims();
        self.classes.clone().reshape([b * s]).int()
    }

    /// Where a query may not attend.
    pub fn blocked(&self) -> Tensor<2, Bool> {
        self.mask.clone().greater_elem(0.5)
    }
}

/// The positive denoising queries of each image matched to its boxes, group by group, for
/// `groups` groups of `2 * max_gt` queries: the loss's matches (LibreYOLO's
/// `get_cdn_matched_indices`).
pub fn positive_matches(boxes_per_image: &[usize], groups: usize, max_gt: usize) -> Vec<Vec<(usize, usize)>> {
    boxes_per_image.iter().map(|&n| (0..groups).flat_map(|g| (0..n).map(move |j| (g * 2 * max_gt + j, j))).collect()).collect()
}

/// A box moved by its noise, then back to (cx, cy, w, h) and before the sigmoid.
fn noised(b: [f32; 4], negative: bool, sign: &[f32], part: &[f32]) -> [f32; 4] {
    let [cx, cy, w, h] = b;
    let mut xyxy = [cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h];
    let diff = [w * 0.5 * BOX_NOISE, h * 0.5 * BOX_NOISE, w * 0.5 * BOX_NOISE, h * 0.5 * BOX_NOISE];
    for i in 0..4 {
        let p = if negative { part[i] + 1.0 } else { part[i] };
        xyxy[i] = (xyxy[i] + p * sign[i] * diff[i]).clamp(0.0, 1.0);
    }
    let [x0, y0, x1, y1] = xyxy;
    [(x0 + x1) / 2.0, (y0 + y1) / 2.0, x1 - x0, y1 - y0].map(inverse_sigmoid)
}

/// DETR's `inverse_sigmoid` of one value (eps 1e-5).
fn inverse_sigmoid(x: f32) -> f32 {
    let x = x.clamp(0.0, 1.0);
    (x.max(1e-5) / (1.0 - x).max(1e-5)).ln()
}

/// LibreYOLO's attention mask for `n` denoising queries in `slots` slots before `queries`
/// matching queries: the matching queries see no denoising query, and each group sees only
/// itself (the loops of its code, kept as they are for a single group too); a padding slot is
/// seen by none and sees only itself (a row with nothing to see would be NaN).
fn mask(n: usize, slots: usize, queries: usize, max_gt: usize, groups: usize) -> Vec<bool> {
    let t = slots + queries;
    let mut m = vec![false; t * t];
    let mut set = |rows: std::ops::Range<usize>, cols: std::ops::Range<usize>| {
        for r in rows {
            m[r * t + cols.start..r * t + cols.end.max(cols.start)].fill(true);
        }
    };
    set(slots..t, 0..slots);
    set(0..n, n..slots);
    set(n..slots, 0..t);
    let g = 2 * max_gt;
    for i in 0..groups {
        let rows = g * i..g * (i + 1);
        if i == 0 {
            set(rows.clone(), g * (i + 1)..n);
        }
        if i == groups - 1 {
            set(rows, 0..g * i);
        } else {
            set(rows.clone(), g * (i + 1)..n);
            set(rows, 0..g * i);
        }
    }
    for p in n..slots {
        m[p * t + p] = false;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two groups of one box (2 queries each) in 6 slots before 2 matching queries.
    #[test]
    fn padding_slots_are_seen_by_none_and_see_only_themselves() {
        let (n, slots, queries) = (4, 6, 2);
        let t = slots + queries;
        let m = mask(n, slots, queries, 1, 2);
        let sees = |r: usize, c: usize| !m[r * t + c];
        for r in 0..t {
            for c in n..slots {
                assert_eq!(sees(r, c), r == c, "row {r}, padding column {c}");
            }
        }
        for p in n..slots {
            assert!((0..t).all(|c| sees(p, c) == (c == p)), "padding row {p} sees itself alone");
        }
        assert!(sees(0, 1) && !sees(0, 2), "a group sees itself, not the next");
        assert!(sees(6, 7) && !sees(6, 0), "matching queries see each other, no denoising query");
        assert_eq!(mask(n, n, queries, 1, 2).len(), (n + queries) * (n + queries));
    }
}
