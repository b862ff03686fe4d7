//! Augmentations of LibreYOLO's YOLOv9, YOLOX and RT-DETR pipelines, each on an RGB image and pixel xyxy boxes.

pub mod affine;
pub mod flip;
pub mod hsv;
pub mod letterbox;
pub mod mixup;
pub mod mosaic;
pub mod resize;

/// Boxes in pixels, `[x1, y1, x2, y2]`, with their classes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Boxes {
    pub xyxy: Vec<[f32; 4]>,
    pub cls: Vec<u32>,
}

impl Boxes {
    pub fn len(&self) -> usize {
        self.cls.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cls.is_empty()
    }

    /// Keeps boxes wider and taller than `min` pixels.
    pub fn keep_larger_than(&mut self, min: f32) {
        let keep: Vec<bool> = self.xyxy.iter().map(|b| b[2] - b[0] > min && b[3] - b[1] > min).collect();
        let mut k = keep.iter();
        self.xyxy.retain(|_| *k.next().unwrap());
        let mut k = keep.iter();
        self.cls.retain(|_| *k.next().unwrap());
    }

    pub fn extend(&mut self, other: Boxes) {
        self.xyxy.extend(other.xyxy);
        self.cls.extend(other.cls);
    }
}
