//! The YOLOv9 loss at a given batch: eager, and replayed from a captured CUDA graph.

use std::cell::RefCell;

use burn::tensor::{Device, Distribution, Tensor, TensorData, s};
use rand::{Rng, SeedableRng};

use super::{Timing, time};
use libreyolo_stages::loss::Yolo9Loss;

pub struct LossBench {
    pub batch: usize,
    pub height: usize,
    pub width: usize,
    pub nc: usize,
    pub boxes_per_image: usize,
    pub max_labels: usize,
    pub warmup: usize,
    pub iters: usize,
}

/// Random padded targets: `boxes_per_image` boxes per image, the rest class -1.
fn targets(cfg: &LossBench, device: &Device) -> Tensor<3> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    let mut v = vec![0f32; cfg.batch * cfg.max_labels * 5];
    for b in 0..cfg.batch {
        for m in 0..cfg.max_labels {
            let row = &mut v[(b * cfg.max_labels + m) * 5..][..5];
            if m < cfg.boxes_per_image {
                let (cx, cy) = (rng.random_range(0.1..0.9f32), rng.random_range(0.1..0.9f32));
                let (w, h) = (rng.random_range(0.02..0.4f32), rng.random_range(0.02..0.4f32));
                row.copy_from_slice(&[
                    rng.random_range(0..cfg.nc) as f32,
                    (cx - w / 2.0).max(0.0),
                    (cy - h / 2.0).max(0.0),
                    (cx + w / 2.0).min(1.0),
                    (cy + h / 2.0).min(1.0),
                ]);
            } else {
                row[0] = -1.0;
            }
        }
    }
    Tensor::from_data(TensorData::new(v, [cfg.batch, cfg.max_labels, 5]), device)
}

pub fn run(cfg: &LossBench, device: &Device) -> Vec<Timing> {
    let strides = [8usize, 16, 32];
    let channels = 64 + cfg.nc;
    let loss = Yolo9Loss::libreyolo_default(cfg.nc);
    let maps: Vec<Tensor<4>> =
        strides.iter().map(|s| Tensor::random([cfg.batch, channels, cfg.height / s, cfg.width / s], Distribution::Normal(0.0, 1.0), device)).collect();
    let targets = targets(cfg, device);
    let tag = format!("b{} {}x{} M={}", cfg.batch, cfg.height, cfg.width, cfg.max_labels);
    let mut rows = vec![time(&format!("loss eager {tag}"), device, cfg.warmup, cfg.iters, || loss.compute(&maps, &strides, targets.clone()).total)];

    // Captured: the maps are stable buffers borrowed by the closure.
    let stable = RefCell::new(maps.clone());
    let start = std::time::Instant::now();
    let mut graph = burn::tensor::capture(device, || loss.compute(&stable.borrow(), &strides, targets.clone()).total);
    let capture_s = start.elapsed().as_secs_f64();
    if graph.is_hardware() {
        // Fresh inputs written in place keep the graph's buffers.
        for (m, fresh) in stable.borrow_mut().iter_mut().zip(&maps) {
            m.inplace(|t| t.slice_assign(s![.., .., .., ..], fresh.clone().mul_scalar(1.0)));
        }
        let mut t = time(&format!("loss captured {tag}"), device, cfg.warmup, cfg.iters, || unsafe { graph.replay() }.clone());
        t.first_s = capture_s;
        rows.push(t);
    } else {
        eprintln!("  loss captured: no hardware graph on this device (capture took {capture_s:.2}s)");
    }
    rows
}
