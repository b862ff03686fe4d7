//! YOLO label files: one row per object, `cls cx cy w h` normalised to [0, 1]; a polygon row
//! `cls x1 y1 x2 y2 ...` counts as its bounding box. A missing file is a background image.
//! Malformed or out-of-range rows are skipped, each with a warning naming the file and line.

use std::path::{Path, PathBuf};

/// One object: class and normalised xyxy box.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Label {
    pub cls: u32,
    pub x1: f64,
    pub y1: f64,
    pub x2: f64,
    pub y2: f64,
}

/// A skipped row.
#[derive(Debug, Clone, PartialEq)]
pub struct RowWarning {
    pub file: PathBuf,
    pub line: usize,
    pub reason: String,
}

impl std::fmt::Display for RowWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: skipped label row: {}", self.file.display(), self.line, self.reason)
    }
}

/// How far outside [0, 1] a coordinate may be before the row is rejected (rounding in
/// exported labels); accepted values are clipped.
const TOLERANCE: f64 = 1e-3;

/// The label file of an image: the last `images` path component becomes `labels`, the
/// extension `.txt` (`images/train/x.jpg` -> `labels/train/x.txt`).
pub fn label_path(image: &Path) -> PathBuf {
    let comps: Vec<_> = image.components().collect();
    let pos = comps.iter().rposition(|c| c.as_os_str() == "images");
    let mut out = PathBuf::new();
    for (i, c) in comps.iter().enumerate() {
        if Some(i) == pos { out.push("labels") } else { out.push(c.as_os_str()) }
    }
    out.set_extension("txt");
    out
}

/// Reads the labels of `file` (a missing file gives none) for `nc` classes.
pub fn read(file: &Path, nc: usize) -> (Vec<Label>, Vec<RowWarning>) {
    match std::fs::read_to_string(file) {
        Ok(text) => parse(&text, file, nc),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (vec![], vec![]),
        Err(e) => (vec![], vec![RowWarning { file: file.to_path_buf(), line: 0, reason: format!("cannot read the file: {e}") }]),
    }
}

pub fn parse(text: &str, file: &Path, nc: usize) -> (Vec<Label>, Vec<RowWarning>) {
    let mut labels = vec![];
    let mut warnings = vec![];
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match parse_row(line, nc) {
            Ok(l) => labels.push(l),
            Err(reason) => warnings.push(RowWarning { file: file.to_path_buf(), line: i + 1, reason }),
        }
    }
    (labels, warnings)
}

fn parse_row(line: &str, nc: usize) -> Result<Label, String> {
    let tokens: Vec<&str> = line.split_whitespace().collect();
    let cls: u32 = tokens[0].parse().map_err(|_| format!("class `{}` is not a non-negative integer", tokens[0]))?;
    if cls as usize >= nc {
        return Err(format!("class {cls} is out of range (the dataset has {nc} classes)"));
    }
    let values: Vec<f64> = tokens[1..]
        .iter()
        .map(|t| t.parse::<f64>().ok().filter(|v| v.is_finite()))
        .collect::<Option<_>>()
        .ok_or_else(|| format!("`{line}` has a value that is not a number"))?;
    if values.iter().any(|v| *v < -TOLERANCE || *v > 1.0 + TOLERANCE) {
        return Err(format!("`{line}` has coordinates outside [0, 1] (labels must be normalised)"));
    }
    let (x1, y1, x2, y2) = match values.len() {
        4 => {
            let (cx, cy, w, h) = (values[0], values[1], values[2], values[3]);
            (cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0)
        }
        n if n >= 6 && n % 2 == 0 => {
            let xs = values.iter().step_by(2);
            let ys = values.iter().skip(1).step_by(2);
            let (x1, x2) = xs.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
            let (y1, y2) = ys.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
            (x1, y1, x2, y2)
        }
        n => return Err(format!("expected `cls cx cy w h` or a polygon, got {n} values")),
    };
    let clip = |v: f64| v.clamp(0.0, 1.0);
    let (x1, y1, x2, y2) = (clip(x1), clip(y1), clip(x2), clip(y2));
    if x2 <= x1 || y2 <= y1 {
        return Err(format!("`{line}` is an empty box"));
    }
    Ok(Label { cls, x1, y1, x2, y2 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_paths_follow_the_images_to_labels_rule() {
        assert_eq!(label_path(Path::new("d/images/train/x.jpg")), PathBuf::from("d/labels/train/x.txt"));
        assert_eq!(label_path(Path::new("d/train/images/x.png")), PathBuf::from("d/train/labels/x.txt"));
        assert_eq!(label_path(Path::new("images/a/images/b.jpg")), PathBuf::from("images/a/labels/b.txt"));
    }

    #[test]
    fn rows_boxes_polygons_and_bad_rows() {
        let text = "0 0.5 0.5 0.2 0.4\n\n3 0.1 0.1 0.3 0.1 0.3 0.4 0.1 0.4\n7 0.5 0.5\nx 0.5 0.5 0.1 0.1\n2 1.5 0.5 0.1 0.1\n99 0.5 0.5 0.1 0.1\n";
        let (labels, warnings) = parse(text, Path::new("l.txt"), 80);
        assert_eq!(labels.len(), 2);
        assert!((labels[0].x1 - 0.4).abs() < 1e-6 && (labels[0].y2 - 0.7).abs() < 1e-6);
        assert_eq!((labels[1].cls, labels[1].x1, labels[1].y2), (3, 0.1, 0.4));
        let lines: Vec<usize> = warnings.iter().map(|w| w.line).collect();
        assert_eq!(lines, vec![4, 5, 6, 7]);
        assert!(warnings[3].reason.contains("out of range"), "{}", warnings[3]);
        assert!(warnings[0].to_string().starts_with("l.txt:4: skipped label row"));
    }
}
