//! AutoBatch (`batch=-1`), as LibreYOLO 1.6's `training/autobatch.py`: one training step
//! (forward, loss, backward, in the run's precision) at batches 1, 2, 4, ... up to `nbs` (64
//! without it) on one GPU, a line fitted to memory against batch, extrapolated to 60% of the
//! card's memory, and the largest power of two strictly below that; under several GPUs the
//! per-GPU answer times the GPUs, capped at `nbs` and rounded down to a multiple of them.
//!
//! Memory here is what our pools reserve from the device after the step (their pages are not
//! returned between steps, so this is the step's peak); LibreYOLO reads PyTorch's peak of live
//! tensors, which is smaller: our answer errs towards the smaller batch.

use std::rc::Rc;

use burn::tensor::Device;
use libreyolo_stages::data::Batch;
use libreyolo_stages::stage::BATCH_SLOT;
use libreyolo_stages::stage::{Alone, Board, Part, StepInfo, Value};

use crate::dag::StepDag;
use crate::manifest::LoadedManifest;
use crate::step::core::Tapes;
use crate::step::{Core, Options, Program};

use super::precision::Precision;

/// The share of the card's memory aimed at (LibreYOLO's code uses 0.60; its docs say 70%).
pub const FRACTION: f64 = 0.60;
/// The largest batch probed without `nbs`.
pub const MAX_PROBE: usize = 64;
/// No answer above this.
const BATCH_SAFE_MAX: usize = 1024;
/// Probing stops once a step takes this share of the card.
const STOP_FRACTION: f64 = 0.90;

/// The largest power of two strictly below `x`; 1 for `x <= 2` (LibreYOLO's
/// `_floor_pow2_strict`: 33 -> 32, 32 -> 16, 65 -> 64, 17.5 -> 16).
pub fn floor_pow2_strict(x: f64) -> usize {
    if x.is_nan() || x <= 2.0 {
        return 1;
    }
    let mut p = 1usize;
    while ((p * 2) as f64) < x {
        p *= 2;
    }
    p
}

/// The per-GPU batch for `(batch, GiB)` probe points on a card of `total_gib`: the least-squares
/// line of memory against batch, solved for `fraction` of the card, then
/// [`floor_pow2_strict`], within [1, 1024]; `Err` (the reason) with fewer than two points or a
/// slope that is not positive, where LibreYOLO keeps the default batch.
pub fn fit(points: &[(usize, f64)], total_gib: f64, fraction: f64) -> Result<(usize, f64), String> {
    if points.len() < 2 {
        return Err(format!("too few probe points ({})", points.len()));
    }
    let n = points.len() as f64;
    let mean_b = points.iter().map(|p| p.0 as f64).sum::<f64>() / n;
    let mean_m = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 as f64 - mean_b).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 as f64 - mean_b) * (p.1 - mean_m)).sum();
    let slope = sxy / sxx;
    if !(slope > 0.0) {
        return Err(format!("non-positive slope ({slope:.4} GiB per image)"));
    }
    let intercept = mean_m - slope * mean_b;
    let raw = (total_gib * fraction - intercept) / slope;
    Ok((floor_pow2_strict(raw).clamp(1, BATCH_SAFE_MAX), raw))
}

/// The global batch from one GPU's answer over `world` GPUs (LibreYOLO's
/// `resolve_auto_batch`): times the GPUs, capped at `nbs` when set, a multiple of the GPUs.
pub fn global_batch(per_gpu: usize, world: usize, nbs: Option<usize>) -> usize {
    let world = world.max(1);
    match nbs.filter(|&n| n > 0) {
        Some(nbs) => ((per_gpu * world).min(nbs) / world * world).max(world),
        None => (per_gpu * world).max(world),
    }
}

/// The batches probed: 1, 2, 4, ... up to `max_probe`.
pub fn probe_batches(max_probe: usize) -> Vec<usize> {
    std::iter::successors(Some(1usize), |b| Some(b * 2)).take_while(|&b| b <= max_probe.max(1)).collect()
}

/// The card's memory in GiB: the CUDA driver's total for `ordinal` (the environment's
/// `CUDA_VISIBLE_DEVICES` applies).
pub fn total_gib(ordinal: usize) -> anyhow::Result<f64> {
    use cudarc::driver::result;
    result::init().map_err(|e| anyhow::anyhow!("CUDA driver: {e:?}"))?;
    let dev = result::device::get(ordinal as i32).map_err(|e| anyhow::anyhow!("CUDA device {ordinal}: {e:?}"))?;
    // SAFETY: `dev` is a device handle the driver just returned.
    let bytes = unsafe { result::device::total_mem(dev) }.map_err(|e| anyhow::anyhow!("CUDA device {ordinal} memory: {e:?}"))?;
    Ok(bytes as f64 / (1u64 << 30) as f64)
}

/// Probes one training step at each of [`probe_batches`] on `device` (a fresh model of the
/// manifest; black images without labels, as LibreYOLO's zeros), returning `(batch, GiB
/// reserved)`; it stops at the first batch above 90% of `total_gib`.
pub fn probe(loaded: &LoadedManifest, dag: &StepDag, nc: usize, device: &Device, precision: &Precision, total_gib: f64) -> anyhow::Result<Vec<(usize, f64)>> {
    let m = &loaded.manifest;
    let model = super::setup::model(loaded, nc, device)?;
    let update = super::setup::update(loaded, &model, device, 1, 1);
    let stages = super::setup::stages(loaded, dag, &model, &update, &Precision { compute: precision.compute, scaler: None }, Rc::new(Alone), device)?;
    let core = Core::new(Program::compile(dag, &Options::eager()), dag, stages, device.clone(), precision.compute, false);
    // The step up to its last backward part: data upload, forward, loss, backward.
    let items = &core.program.items;
    let end = items.iter().rposition(|i| matches!(i.part, Part::Backward { .. })).map_or(items.len(), |i| i + 1);
    let [h, w] = [m.run.imgsz.height(), m.run.imgsz.width()];
    let max_probe = m.optim.nbs.map(|n| n as usize).filter(|&n| n > 0).unwrap_or(MAX_PROBE);
    let label = if super::validate::Task::of(&model.network) == super::validate::Task::Classify { 0.0 } else { -1.0 };
    let mut points = vec![];
    for b in probe_batches(max_probe) {
        device.memory_cleanup();
        // Black images; one padding row an image: class -1 is "no object" (as LibreYOLO's zeros),
        // and a classifier's image has class 0.
        let batch = Batch {
            images: vec![0; b * 3 * (h * w) as usize],
            targets: [label, 0.0, 0.0, 0.0, 0.0].repeat(b),
            size: b,
            height: h,
            width: w,
            rows: 1,
            indices: (0..b).collect(),
            truncated_labels: 0,
        };
        let mut board = Board::new(core.program.slots);
        board.put(BATCH_SLOT, Value::Batch(Rc::new(batch)));
        core.run_items(0..end, &mut board, &Tapes::new(core.program.pieces), false, false, StepInfo { iteration: 0, last_micro: true, mosaic_closed: false })?;
        drop(board);
        device.sync().map_err(|e| anyhow::anyhow!("AutoBatch probe at batch {b}: {e:?}"))?;
        let Some(usage) = device.memory_pool_usage() else {
            anyhow::bail!("AutoBatch: this device does not report its memory");
        };
        let gib = usage.bytes_reserved as f64 / (1u64 << 30) as f64;
        tracing::debug!("AutoBatch: batch={b} reserved={gib:.3} GiB");
        points.push((b, gib));
        if gib > total_gib * STOP_FRACTION {
            break;
        }
    }
    device.memory_cleanup();
    Ok(points)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn powers_of_two_strictly_below_as_libreyolo() {
        assert_eq!(floor_pow2_strict(33.0), 32);
        assert_eq!(floor_pow2_strict(32.0), 16);
        assert_eq!(floor_pow2_strict(65.0), 64);
        assert_eq!(floor_pow2_strict(17.5), 16);
        assert_eq!(floor_pow2_strict(2.0), 1);
        assert_eq!(floor_pow2_strict(-5.0), 1);
        assert_eq!(floor_pow2_strict(f64::NAN), 1);
        assert_eq!(probe_batches(64), vec![1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(probe_batches(48), vec![1, 2, 4, 8, 16, 32]);
    }

    #[test]
    fn the_fitted_line_reaches_sixty_percent_of_the_card() {
        // 2 GiB of weights and workspace, 0.5 GiB an image, an 80 GiB card: 60% is 48 GiB,
        // reached at 92 images, so 64.
        let points: Vec<(usize, f64)> = probe_batches(64).into_iter().map(|b| (b, 2.0 + 0.5 * b as f64)).collect();
        let (batch, raw) = fit(&points, 80.0, FRACTION).unwrap();
        assert!((raw - 92.0).abs() < 1e-9, "{raw}");
        assert_eq!(batch, 64);
        // Exactly a power of two: one step lower.
        let (batch, _) = fit(&[(1, 2.5), (2, 3.0)], (2.0 + 0.5 * 128.0) / FRACTION, FRACTION).unwrap();
        assert_eq!(batch, 64);
        assert!(fit(&[(1, 2.0)], 80.0, FRACTION).unwrap_err().contains("too few"));
        assert!(fit(&[(1, 3.0), (2, 3.0)], 80.0, FRACTION).unwrap_err().contains("slope"));
        // A huge card stops at the safe maximum.
        assert_eq!(fit(&[(1, 0.001), (2, 0.002)], 1e6, FRACTION).unwrap().0, 1024);
    }

    #[test]
    fn the_global_batch_scales_by_the_gpus_within_nbs() {
        assert_eq!(global_batch(32, 1, None), 32);
        assert_eq!(global_batch(32, 2, None), 64);
        assert_eq!(global_batch(64, 2, Some(64)), 64);
        assert_eq!(global_batch(32, 3, Some(64)), 63);
        // More GPUs than nbs allows: one image a GPU.
        assert_eq!(global_batch(1, 4, Some(2)), 4);
    }
}
