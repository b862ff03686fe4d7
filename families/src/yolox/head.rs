//! YOLOX's decoupled head. Per scale i: a 1x1 stem to `hidden` channels, then a class tower and
//! a regression tower of two 3x3 convs each; the class tower ends in `nc` logits, the
//! regression tower in 4 box offsets and 1 objectness logit. The raw map is
//! `cat(reg, obj, cls)`, `(B, 5 + nc, H, W)`, as LibreYOLO's training branch assembles it;
//! decoding (`(xy + grid) * stride`, `exp(wh) * stride`, sigmoids) is the family's decode.
//!
//! ```text
//! stems[i]: Conv1x1(ch_i -> hidden)
//! cls_convs[i]: Conv3x3 -> Conv3x3 -> cls_preds[i]: Conv2d1x1(-> nc)
//! reg_convs[i]: Conv3x3 -> Conv3x3 -> reg_preds[i]: Conv2d1x1(-> 4), obj_preds[i]: Conv2d1x1(-> 1)
//! ```

use burn::tensor::activation::sigmoid;
use burn::tensor::{FloatDType, Tensor};

use crate::blocks::{Conv, Conv2d, ConvShape};
use crate::ctx::Ctx;
use crate::params::Builder;

/// The foreground prior of the class and objectness biases at initialisation (YOLOX's
/// `initialize_biases(0.01)`): bias `-ln((1 - p) / p)`.
const PRIOR: f32 = 0.01;

#[derive(Debug, Clone)]
struct Scale {
    stem: Conv,
    cls_convs: [Conv; 2],
    reg_convs: [Conv; 2],
    cls_pred: Conv2d,
    reg_pred: Conv2d,
    obj_pred: Conv2d,
}

impl Scale {
    fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        let x = self.stem.forward(x, cx);
        let cls = self.cls_convs.iter().fold(x.clone(), |y, c| c.forward(y, cx));
        let reg = self.reg_convs.iter().fold(x, |y, c| c.forward(y, cx));
        let (box_, obj, cls) = (self.reg_pred.forward(reg.clone(), cx), self.obj_pred.forward(reg, cx), self.cls_pred.forward(cls, cx));
        cx.cat(vec![box_, obj, cls])
    }
}

#[derive(Debug, Clone)]
pub struct YOLOXHead {
    scales: Vec<Scale>,
    pub nc: usize,
    pub strides: Vec<usize>,
}

impl YOLOXHead {
    /// `channels`: the width of each input scale; `strides`: its stride in pixels.
    pub fn new(b: &mut Builder, channels: &[usize], hidden: usize, nc: usize, strides: Vec<usize>) -> Self {
        let prior = -((1.0 - PRIOR) / PRIOR).ln();
        let tower = |b: &mut Builder, name: &str, i: usize| -> [Conv; 2] {
            let mut towers = b.pp(name);
            let mut t = towers.pp(i);
            [0, 1].map(|j| Conv::new(&mut t.pp(j), ConvShape::new(hidden, hidden, 3, 1)))
        };
        let pred = |b: &mut Builder, name: &str, i: usize, out: usize, bias: Option<f32>| {
            let mut preds = b.pp(name);
            let shape = ConvShape::new(hidden, out, 1, 1);
            match bias {
                Some(v) => Conv2d::with_bias(&mut preds.pp(i), shape, v),
                None => Conv2d::new(&mut preds.pp(i), shape),
            }
        };
        // Created in LibreYOLO's registration order (its state_dict's key order): every
        // scale's class towers, then regression towers, the three predictions, the stems.
        let n = channels.len();
        let cls_convs: Vec<_> = (0..n).map(|i| tower(b, "cls_convs", i)).collect();
        let reg_convs: Vec<_> = (0..n).map(|i| tower(b, "reg_convs", i)).collect();
        let cls_preds: Vec<_> = (0..n).map(|i| pred(b, "cls_preds", i, nc, Some(prior))).collect();
        let reg_preds: Vec<_> = (0..n).map(|i| pred(b, "reg_preds", i, 4, None)).collect();
        let obj_preds: Vec<_> = (0..n).map(|i| pred(b, "obj_preds", i, 1, Some(prior))).collect();
        let stems = channels.iter().enumerate().map(|(i, &ch)| Conv::new(&mut b.pp("stems").pp(i), ConvShape::new(ch, hidden, 1, 1)));
        let scales = stems
            .zip(cls_convs)
            .zip(reg_convs)
            .zip(cls_preds.into_iter().zip(reg_preds).zip(obj_preds))
            .map(|(((stem, cls_convs), reg_convs), ((cls_pred, reg_pred), obj_pred))| Scale { stem, cls_convs, reg_convs, cls_pred, reg_pred, obj_pred })
            .collect();
        Self { scales, nc, strides }
    }

    /// Raw maps, one per scale: `(B, 5 + nc, H_i, W_i)`.
    pub fn forward(&self, inputs: &[Tensor<4>], cx: &Ctx) -> Vec<Tensor<4>> {
        self.scales.iter().zip(inputs).map(|(s, x)| s.forward(x.clone(), cx)).collect()
    }

    /// Detections of raw maps, in f32 whatever the maps' dtype, `(B, 4 + nc, A)`: xyxy pixels,
    /// then per class `sigmoid(obj) * sigmoid(cls)` (LibreYOLO's confidence). YOLOX's grid has
    /// no half-cell offset: centre `(t_xy + (x, y)) * stride`, size `exp(t_wh) * stride`.
    pub fn decode(&self, maps: &[Tensor<4>]) -> Tensor<3> {
        let flat = maps.iter().map(|m| {
            let [b, c, h, w] = m.dims();
            m.clone().cast(FloatDType::F32).reshape([b, c, h * w])
        });
        let [gx, gy, s] = crate::block::grid(maps, &self.strides, 0.0);
        let all = Tensor::cat(flat.collect(), 2); // (B, 5 + nc, A)
        let part = |i: usize, n: usize| all.clone().narrow(1, i, n);
        let (cx, cy) = (part(0, 1).add(gx).mul(s.clone()), part(1, 1).add(gy).mul(s.clone()));
        let (half_w, half_h) = (part(2, 1).exp().mul(s.clone()).div_scalar(2.0), part(3, 1).exp().mul(s).div_scalar(2.0));
        let scores = sigmoid(part(5, self.nc)).mul(sigmoid(part(4, 1)));
        Tensor::cat(vec![cx.clone().sub(half_w.clone()), cy.clone().sub(half_h.clone()), cx.add(half_w), cy.add(half_h), scores], 1)
    }
}

/// `YOLOXHead` in a topology: `args = { hidden }` (256 x width), on the neck's maps.
pub static BLOCK: crate::block::BlockKind = crate::block::BlockKind {
    name: "YOLOXHead",
    args: &["hidden"],
    head: true,
    build: |b| {
        let hidden = b.args.usize("hidden")?;
        let channels: Vec<usize> = b.inputs.iter().map(|s| s.channels).collect();
        let strides: Vec<usize> = b.inputs.iter().map(|s| s.stride).collect();
        Ok((std::rc::Rc::new(YOLOXHead::new(b.params, &channels, hidden, b.nc, strides)), None))
    },
};

impl crate::block::Layer for YOLOXHead {
    fn forward(&self, inputs: Vec<Tensor<4>>, cx: &Ctx) -> crate::block::Out {
        crate::block::Out::Head(YOLOXHead::forward(self, &inputs, cx))
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn as_head(&self) -> Option<&dyn crate::block::Head> {
        Some(self)
    }
}

impl crate::block::Head for YOLOXHead {
    fn nc(&self) -> usize {
        self.nc
    }
    fn as_detector(&self) -> Option<&dyn crate::block::Detector> {
        Some(self)
    }
}

impl crate::block::Detector for YOLOXHead {
    fn labels(&self) -> crate::block::Labels {
        crate::block::Labels::Best
    }
    fn strides(&self) -> &[usize] {
        &self.strides
    }
    fn decode(&self, maps: &[Tensor<4>], _image: [usize; 2]) -> Tensor<3> {
        YOLOXHead::decode(self, maps)
    }
}
