//! Detection and classification losses. Every loss here but RT-DETR's is sync-free: it only
//! launches tensor operations on fixed-size inputs and never reads a value back to the host, so
//! it can run inside a CUDA graph and leaves reading its terms for logging to the caller.
//! RT-DETR's Hungarian matching reads its cost matrices on the host (`rtdetr`).

use burn::tensor::activation::log_sigmoid;
use burn::tensor::distributed::{ReduceOperation, all_reduce};
use burn::tensor::{Device, Tensor};

pub mod anchors;
pub mod assigner;
pub mod ciou;
pub mod cross_entropy;
pub mod detr_boxes;
pub mod rtdetr;
pub mod simota;
pub mod yolo9;
pub mod yolox;

pub use cross_entropy::cross_entropy;
pub use rtdetr::{DetrTargets, DetrTerms, RtDetrLoss};
pub use yolo9::{Yolo9Loss, Yolo9Settings, Yolo9Terms};
pub use yolox::{YoloxLoss, YoloxSettings, YoloxTerms};

/// BCE with logits, elementwise: `max(x,0) - x*t + log(1 + exp(-|x|))`, written
/// `-(t ln s(x) + (1 - t) ln s(-x))`.
pub(crate) fn bce<const D: usize>(x: Tensor<D>, t: Tensor<D>) -> Tensor<D> {
    log_sigmoid(x.clone()).mul(t.clone()).add(log_sigmoid(x.neg()).mul(t.neg().add_scalar(1.0))).neg()
}

/// A loss's normaliser from this replica's `count`: `max(count, 1)` alone; over a data-parallel
/// `group`, LibreYOLO's `all_reduce_avg_scalar` — the global count clamped to 1, over the number
/// of replicas — so that averaging the replicas' gradients gives the whole batch's.
pub(crate) fn normaliser(count: Tensor<1>, group: Option<&[Device]>) -> Tensor<1> {
    match group {
        Some(devices) if devices.len() > 1 => {
            let world = devices.len() as f64;
            all_reduce(count, ReduceOperation::Mean, devices.to_vec()).resolve().clamp_min(1.0 / world)
        }
        _ => count.clamp_min(1.0),
    }
}

/// A batch padded to fewer target rows (`data.label_rows = "batch"`) must train exactly as one
/// padded to `max_labels`: padding rows (class -1, a zero box) take no anchor, so every term and
/// every gradient is the same to the bit.
#[cfg(test)]
mod padding_rows {
    use burn::tensor::{Device, Distribution, Tensor, TensorData};

    use super::*;

    /// Three images with 0, 2 and 5 boxes (normalised xyxy), padded to `rows` rows.
    fn targets(rows: usize, device: &Device) -> Tensor<3> {
        let boxes: [&[[f32; 5]]; 3] = [
            &[],
            &[[1.0, 0.10, 0.20, 0.45, 0.60], [0.0, 0.50, 0.50, 0.90, 0.95]],
            &[
                [2.0, 0.05, 0.05, 0.30, 0.25],
                [1.0, 0.40, 0.10, 0.70, 0.50],
                [0.0, 0.20, 0.55, 0.35, 0.90],
                [2.0, 0.60, 0.60, 0.98, 0.98],
                [1.0, 0.0, 0.0, 1.0, 1.0],
            ],
        ];
        let mut v = vec![0f32; 3 * rows * 5];
        for (i, image) in boxes.iter().enumerate() {
            for m in 0..rows {
                let row = &mut v[(i * rows + m) * 5..][..5];
                match image.get(m) {
                    Some(b) => row.copy_from_slice(b),
                    None => row[0] = -1.0,
                }
            }
        }
        Tensor::from_data(TensorData::new(v, [3, rows, 5]), device)
    }

    fn maps(channels: usize, device: &Device) -> Vec<Tensor<4>> {
        [(8, 8), (4, 4), (2, 2)].iter().map(|&(h, w)| Tensor::<4>::random([3, channels, h, w], Distribution::Normal(0.0, 1.0), device)).collect()
    }

    fn vec(t: Tensor<1>) -> Vec<f32> {
        t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
    }

    /// Each term's value and each map's gradient, for `loss` run on leaves made of `maps`.
    fn run(maps: &[Tensor<4>], loss: impl Fn(&[Tensor<4>]) -> Vec<Tensor<1>>) -> Vec<Vec<f32>> {
        let leaves: Vec<Tensor<4>> = maps.iter().map(|m| m.clone().autodiff().require_grad()).collect();
        let terms = loss(&leaves);
        let grads = terms[0].clone().backward();
        let mut out: Vec<Vec<f32>> = terms.into_iter().map(vec).collect();
        out.extend(leaves.iter().map(|l| vec(l.grad(&grads).unwrap().flatten(0, 3))));
        out
    }

    #[test]
    fn yolo9_loss_is_the_same_with_fewer_padding_rows() {
        let device = Device::flex();
        let (nc, reg_max) = (3, 16);
        let maps = maps(4 * reg_max + nc, &device);
        let loss = Yolo9Loss::new(Yolo9Settings::default(), nc, reg_max);
        let at = |rows| {
            run(&maps, |m| {
                let t = loss.compute(m, &[8, 16, 32], targets(rows, &device));
                vec![t.total, t.box_loss, t.dfl_loss, t.cls_loss, t.num_fg]
            })
        };
        let full = at(300);
        assert!(full[4][0] > 0.0, "some anchors are positive");
        assert_eq!(at(8), full);
        assert_eq!(at(5), full);
    }

    #[test]
    fn yolox_loss_is_the_same_with_fewer_padding_rows() {
        let device = Device::flex();
        let nc = 3;
        let maps = maps(5 + nc, &device);
        let loss = YoloxLoss { nc, settings: YoloxSettings::default() };
        let at = |rows| {
            run(&maps, |m| {
                let t = loss.compute(m, &[8, 16, 32], targets(rows, &device), true, None);
                vec![t.total, t.iou, t.obj, t.cls, t.l1, t.num_fg]
            })
        };
        let full = at(50);
        assert!(full[5][0] > 0.0, "some anchors are foreground");
        assert_eq!(at(8), full);
        assert_eq!(at(5), full);
    }
}
