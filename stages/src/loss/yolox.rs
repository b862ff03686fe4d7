//! The YOLOX detection loss (LibreYOLO's `YOLOXHead.get_losses`): SimOTA assignment, then
//! `total = iou_gain * iou + obj + cls + l1` with
//!
//! - iou: `1 - IoU^2` of each foreground anchor's decoded box with its ground truth;
//! - obj: BCE-with-logits of the objectness against the foreground mask, over all anchors;
//! - cls: BCE-with-logits of the foreground anchors' class logits against the one-hot class
//!   scaled by the anchor's IoU;
//! - l1 (after mosaic closes, LibreYOLO's `use_l1`): `|raw box offsets - target offsets|` of the
//!   foreground anchors, targets `(cx / s - x, cy / s - y, ln(w / s + 1e-8), ln(h / s + 1e-8))`;
//!
//! each summed and divided by `max(foreground anchors in the batch, 1)` (under data parallelism
//! the mean over replicas of the global count, as LibreYOLO's `all_reduce_avg_scalar`). The
//! maps are raw `cat(reg, obj, cls)` per scale; boxes decode as `(xy + cell) * s`, `exp(wh) * s`.

use burn::tensor::{Device, Int, Tensor};

use super::bce;
use super::simota::{self, Matching, Predicted, SimOtaConfig, Truths};

/// The `[loss]` section of a YOLOX manifest: LibreYOLO's gain and SimOTA settings.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct YoloxSettings {
    /// Weight of the IoU loss (LibreYOLO's `reg_weight`).
    pub iou_gain: f64,
    /// Centre-region radius of SimOTA's candidates, in strides.
    pub center_radius: f64,
    /// Largest IoUs summed for a ground truth's dynamic_k.
    pub candidates: usize,
}

impl Default for YoloxSettings {
    /// LibreYOLO 1.6's `YOLOXHead`.
    fn default() -> Self {
        Self { iou_gain: 5.0, center_radius: 1.5, candidates: 10 }
    }
}

/// The loss for `nc` classes.
#[derive(Debug, Clone, Copy)]
pub struct YoloxLoss {
    pub nc: usize,
    pub settings: YoloxSettings,
}

/// The loss and what it is made of, on the device (0-dim values as shape `[1]`).
#[derive(Debug, Clone)]
pub struct YoloxTerms {
    pub total: Tensor<1>,
    /// Weighted terms under LibreYOLO's names: `iou` (times `iou_gain`), `obj`, `cls`, `l1`.
    pub iou: Tensor<1>,
    pub obj: Tensor<1>,
    pub cls: Tensor<1>,
    pub l1: Tensor<1>,
    /// The divisor of every term: foreground anchors, at least 1.
    pub num_fg: Tensor<1>,
    pub matching: Matching,
}

impl YoloxTerms {
    pub fn named(&self) -> crate::stage::LossTerms {
        crate::stage::LossTerms {
            total: self.total.clone(),
            parts: vec![("iou", self.iou.clone()), ("obj", self.obj.clone()), ("cls", self.cls.clone()), ("l1", self.l1.clone())],
        }
    }
}

impl YoloxLoss {
    /// `maps`: raw head maps `(B, 5 + nc, H_i, W_i)` at `strides`, f32; `targets`: `(B, M, 5)`
    /// rows `[cls, x1, y1, x2, y2]` normalised to [0, 1], padding rows with class -1; `use_l1`:
    /// add the L1 term (after mosaic closes).
    pub fn compute(&self, maps: &[Tensor<4>], strides: &[usize], targets: Tensor<3>, use_l1: bool, group: Option<&[Device]>) -> YoloxTerms {
        let device = maps[0].device();
        let b = maps[0].dims()[0];
        let nc = self.nc;
        let (height, width) = (maps[0].dims()[2] * strides[0], maps[0].dims()[3] * strides[0]);
        let [gx, gy, stride] = libreyolo_families::block::grid(maps, strides, 0.0).map(|t| t.reshape([1, -1]));
        let a = gx.dims()[1];

        // Per anchor: (B, A, 5 + nc), scale after scale, row-major.
        let raw = Tensor::cat(maps.iter().map(|m| m.clone().flatten::<3>(2, 3).swap_dims(1, 2)).collect(), 1);
        let channel = |i: usize| raw.clone().narrow(2, i, 1).reshape([b, a]);
        let reg = raw.clone().narrow(2, 0, 4);
        let obj = channel(4);
        let cls = raw.clone().narrow(2, 5, nc);
        let pred = Predicted {
            cx: channel(0).add(gx.clone()).mul(stride.clone()),
            cy: channel(1).add(gy.clone()).mul(stride.clone()),
            w: channel(2).exp().mul(stride.clone()),
            h: channel(3).exp().mul(stride.clone()),
            gx,
            gy,
            stride,
        };

        // Ground truths in pixels, centre and size.
        let m = targets.dims()[1];
        let [cls_t, x1, y1, x2, y2] = targets.chunk(5, 2).try_into().map(|p: [Tensor<3>; 5]| p.map(|t| t.reshape([b, m]))).expect("five columns");
        let (x1, x2) = (x1.mul_scalar(width as f64), x2.mul_scalar(width as f64));
        let (y1, y2) = (y1.mul_scalar(height as f64), y2.mul_scalar(height as f64));
        let truths = Truths {
            cx: x1.clone().add(x2.clone()).div_scalar(2.0),
            cy: y1.clone().add(y2.clone()).div_scalar(2.0),
            w: x2.sub(x1),
            h: y2.sub(y1),
            valid: cls_t.clone().greater_equal_elem(0.0).float(),
            class: cls_t.clamp_min(0.0),
        };
        let detached =
            Predicted { cx: pred.cx.clone().detach(), cy: pred.cy.clone().detach(), w: pred.w.clone().detach(), h: pred.h.clone().detach(), ..pred.clone() };
        let cfg = SimOtaConfig { center_radius: self.settings.center_radius, candidates: self.settings.candidates };
        let matching = simota::assign(cfg, &truths, &detached, cls.clone().detach(), obj.clone().detach().reshape([b, a, 1]));

        let fg = matching.fg.clone();
        let num_fg = super::normaliser(fg.clone().sum(), group);
        let matched = |t: &Tensor<2>| t.clone().gather(1, matching.gt_index.clone());
        let (tcx, tcy, tw, th) = (matched(&truths.cx), matched(&truths.cy), matched(&truths.w), matched(&truths.h));

        // iou: background anchors compare a unit box with itself (selected, not multiplied by 0:
        // an overflowing exp there would be inf * 0), so nothing there is NaN.
        let background = fg.clone().lower_elem(0.5);
        let keep = |t: Tensor<2>| t.mask_fill(background.clone(), 1.0);
        let iou = simota::iou_cxcywh(
            [&keep(pred.cx.clone()), &keep(pred.cy.clone()), &keep(pred.w.clone()), &keep(pred.h.clone())],
            [&keep(tcx.clone()), &keep(tcy.clone()), &keep(tw.clone()), &keep(th.clone())],
            1e-16,
        );
        let iou_loss = iou.powi_scalar(2).neg().add_scalar(1.0).mul(fg.clone()).sum().div(num_fg.clone()).mul_scalar(self.settings.iou_gain);

        let obj_loss = bce(obj, fg.clone()).sum().div(num_fg.clone());

        let class = matched(&truths.class).int().reshape([b, a, 1]);
        let onehot = Tensor::<1, Int>::arange(0..nc as i64, &device).reshape([1, 1, nc]).expand([b, a, nc]).equal(class.expand([b, a, nc])).float();
        let cls_target = onehot.mul(matching.iou.clone().reshape([b, a, 1]));
        let cls_loss = bce(cls, cls_target).mul(fg.clone().reshape([b, a, 1])).sum().div(num_fg.clone());

        let l1_loss = if use_l1 {
            let s = &detached.stride;
            let target = Tensor::stack::<3>(
                vec![
                    tcx.div(s.clone()).sub(detached.gx.clone()),
                    tcy.div(s.clone()).sub(detached.gy.clone()),
                    tw.div(s.clone()).add_scalar(1e-8).log(),
                    th.div(s.clone()).add_scalar(1e-8).log(),
                ],
                2,
            );
            reg.sub(target).abs().mul(fg.clone().reshape([b, a, 1])).sum().div(num_fg.clone())
        } else {
            Tensor::zeros([1], &device)
        };

        let total = iou_loss.clone().add(obj_loss.clone()).add(cls_loss.clone()).add(l1_loss.clone());
        YoloxTerms { total, iou: iou_loss, obj: obj_loss, cls: cls_loss, l1: l1_loss, num_fg, matching }
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Distribution, TensorData};

    use super::*;

    /// A batch without a single box (background images, or every label filtered away): no
    /// foreground, the objectness term alone, everything finite, gradients included.
    #[test]
    fn a_batch_without_boxes_has_only_an_objectness_loss() {
        let device = Device::flex();
        let maps: Vec<Tensor<4>> = [(8, 8), (4, 4)]
            .iter()
            .map(|&(h, w)| Tensor::<4>::random([2, 5 + 3, h, w], Distribution::Normal(0.0, 1.0), &device).autodiff().require_grad())
            .collect();
        let mut padding = vec![0f32; 2 * 6 * 5];
        padding.iter_mut().step_by(5).for_each(|c| *c = -1.0);
        let targets = Tensor::<3>::from_data(TensorData::new(padding, [2, 6, 5]), &device);
        let terms = YoloxLoss { nc: 3, settings: YoloxSettings::default() }.compute(&maps, &[8, 16], targets, true, None);
        let value = |t: &Tensor<1>| t.clone().into_scalar::<f32>();
        assert_eq!(value(&terms.matching.fg.clone().sum()), 0.0);
        assert_eq!([value(&terms.iou), value(&terms.cls), value(&terms.l1)], [0.0; 3]);
        assert!(value(&terms.obj) > 0.0 && value(&terms.total).is_finite());
        let grads = terms.total.backward();
        for map in &maps {
            let g: Vec<f32> = map.grad(&grads).unwrap().into_data().convert::<f32>().try_to_vec::<f32>().unwrap();
            assert!(g.iter().all(|v| v.is_finite()));
        }
    }
}
