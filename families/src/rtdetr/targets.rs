//! A batch's boxes as RT-DETR reads them (its denoising queries, its loss).

/// A batch's boxes as the DETR losses read them: per image, its labels and (cx, cy, w, h) boxes
/// in [0, 1].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DetrTargets {
    pub labels: Vec<Vec<usize>>,
    pub boxes: Vec<Vec<[f32; 4]>>,
}

impl DetrTargets {
    /// From the loader's `(B, M, 5)` rows `[cls, x1, y1, x2, y2]` normalised: the rows with
    /// `x2 > x1` and `y2 > y1` (LibreYOLO's `convert_targets_for_detr`; padding rows are zero).
    pub fn from_rows(rows: &[f32], images: usize) -> Self {
        let per_image = rows.len() / images.max(1);
        let mut out = Self::default();
        for image in rows.chunks(per_image.max(1)).take(images) {
            let (mut labels, mut boxes) = (vec![], vec![]);
            for r in image.chunks_exact(5).filter(|r| r[3] > r[1] && r[4] > r[2]) {
                let (w, h) = (r[3] - r[1], r[4] - r[2]);
                labels.push(r[0] as usize);
                boxes.push([r[1] + w / 2.0, r[2] + h / 2.0, w, h]);
            }
            out.labels.push(labels);
            out.boxes.push(boxes);
        }
        out
    }

    /// Boxes in the batch.
    pub fn count(&self) -> usize {
        self.labels.iter().map(Vec::len).sum()
    }

    /// The most boxes of one image.
    pub fn max_per_image(&self) -> usize {
        self.labels.iter().map(Vec::len).max().unwrap_or(0)
    }
}
