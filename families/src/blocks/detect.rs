//! DDetect: YOLOv9's anchor-free decoupled head, and the DFL decode of its raw maps.
//!
//! Per scale i, a box tower `cv2[i]` predicts 4 sides x `reg_max` distance bins (side-major)
//! and a class tower `cv3[i]` predicts `nc` logits; the raw map is `cat(box, cls)`.
//!
//! ```text
//! cv2[i]: Conv3x3(ch_i -> bw) -> Conv3x3(bw -> bw, groups 4) -> Conv2d1x1(bw -> 4*reg_max, groups 4)
//! cv3[i]: Conv3x3(ch_i -> cw) -> Conv3x3(cw -> cw)           -> Conv2d1x1(cw -> nc)
//! ```

use burn::tensor::activation::{sigmoid, softmax};
use burn::tensor::{FloatDType, Tensor};

use super::conv::{Conv, Conv2d, ConvShape};
use crate::ctx::Ctx;
use crate::params::Builder;

/// Groups of the box tower's last two convs.
const BOX_GROUPS: usize = 4;
/// Initial bias of the box tower's last conv.
const BOX_BIAS: f32 = 1.0;
/// Initial bias of the class tower's last conv: a foreground prior of sigmoid(-10) = 4.5e-5.
const CLASS_BIAS: f32 = -10.0;

#[derive(Debug, Clone)]
struct Tower {
    c0: Conv,
    c1: Conv,
    out: Conv2d,
}

impl Tower {
    fn forward(&self, x: Tensor<4>, cx: &Ctx) -> Tensor<4> {
        self.out.forward(self.c1.forward(self.c0.forward(x, cx), cx), cx)
    }
}

#[derive(Debug, Clone)]
pub struct DDetect {
    box_towers: Vec<Tower>,
    class_towers: Vec<Tower>,
    pub nc: usize,
    pub reg_max: usize,
    pub strides: Vec<usize>,
}

impl DDetect {
    /// `channels`: the width of each input scale; `strides`: its stride in pixels.
    pub fn new(b: &mut Builder, channels: &[usize], nc: usize, reg_max: usize, strides: Vec<usize>) -> Self {
        let box_out = 4 * reg_max;
        let box_width = round_up(channels[0] / 4, BOX_GROUPS).max(box_out).max(reg_max);
        let class_width = channels[0].max(nc.min(100));
        let box_towers = channels
            .iter()
            .enumerate()
            .map(|(i, &ch)| {
                let mut towers = b.pp("cv2");
                let mut b = towers.pp(i);
                Tower {
                    c0: Conv::new(&mut b.pp(0), ConvShape::new(ch, box_width, 3, 1)),
                    c1: Conv::new(&mut b.pp(1), ConvShape::new(box_width, box_width, 3, 1).groups(BOX_GROUPS)),
                    out: Conv2d::with_bias(&mut b.pp(2), ConvShape::new(box_width, box_out, 1, 1).groups(BOX_GROUPS), BOX_BIAS),
                }
            })
            .collect();
        let class_towers = channels
            .iter()
            .enumerate()
            .map(|(i, &ch)| {
                let mut towers = b.pp("cv3");
                let mut b = towers.pp(i);
                Tower {
                    c0: Conv::new(&mut b.pp(0), ConvShape::new(ch, class_width, 3, 1)),
                    c1: Conv::new(&mut b.pp(1), ConvShape::new(class_width, class_width, 3, 1)),
                    out: Conv2d::with_bias(&mut b.pp(2), ConvShape::new(class_width, nc, 1, 1), CLASS_BIAS),
                }
            })
            .collect();
        Self { box_towers, class_towers, nc, reg_max, strides }
    }

    /// Raw maps `(B, 4*reg_max + nc, H_i, W_i)`, one per scale.
    pub fn forward(&self, features: &[Tensor<4>], cx: &Ctx) -> Vec<Tensor<4>> {
        features
            .iter()
            .zip(self.box_towers.iter().zip(&self.class_towers))
            .map(|(f, (bt, ct))| cx.cat(vec![bt.forward(f.clone(), cx), ct.forward(f.clone(), cx)]))
            .collect()
    }

    /// Inference decode: `(B, 4 + nc, A)` with xyxy boxes in input pixels and sigmoid scores.
    /// Anchors are `(x + 0.5, y + 0.5)` grid cells, scale by scale, row-major; each side's
    /// distance is the expectation of its softmaxed bins. Always in f32, whatever the maps'
    /// dtype: a bf16 box coordinate near 640 px is only good to 4 px, and the anchors are f32.
    pub fn decode(&self, maps: &[Tensor<4>]) -> Tensor<3> {
        let (mut boxes, mut scores) = (vec![], vec![]);
        for map in maps {
            let [b, c, h, w] = map.dims();
            let flat = map.clone().cast(FloatDType::F32).reshape([b, c, h * w]);
            let mut parts = flat.split_with_sizes(vec![4 * self.reg_max, self.nc], 1);
            scores.push(parts.pop().expect("two parts"));
            boxes.push(parts.pop().expect("two parts"));
        }
        let [x, y, strides] = crate::block::grid(maps, &self.strides, 0.5);
        let anchors = Tensor::cat(vec![x, y], 1); // (1, 2, A)
        let a = anchors.dims()[2];

        let logits = Tensor::cat(boxes, 2);
        let b = logits.dims()[0];
        let dist = self.expected_distance(logits.reshape([b, 4, self.reg_max, a]));
        let lt = dist.clone().narrow(1, 0, 2);
        let rb = dist.narrow(1, 2, 2);
        let xyxy = Tensor::cat(vec![anchors.clone().sub(lt), anchors.add(rb)], 1).mul(strides);
        Tensor::cat(vec![xyxy, sigmoid(Tensor::cat(scores, 2))], 1)
    }

    /// `(B, 4, reg_max, A)` bin logits -> `(B, 4, A)` expected distance in grid cells.
    fn expected_distance(&self, bins: Tensor<4>) -> Tensor<3> {
        let [b, _, r, a] = bins.dims();
        let project = Tensor::<1, burn::tensor::Int>::arange(0..r as i64, &bins.device()).float().reshape([1, 1, r, 1]);
        softmax(bins, 2).mul(project).sum_dim(2).reshape([b, 4, a])
    }
}

fn round_up(value: usize, divisor: usize) -> usize {
    value.div_ceil(divisor) * divisor
}

/// `DDetect` in a topology: the head over its inputs' scales, `args = { reg_max = 16 }`.
pub static BLOCK: crate::block::BlockKind = crate::block::BlockKind {
    name: "DDetect",
    args: &["reg_max"],
    head: true,
    build: |b| {
        let reg_max = b.args.usize_or("reg_max", 16)?;
        let channels: Vec<usize> = b.inputs.iter().map(|s| s.channels).collect();
        let strides: Vec<usize> = b.inputs.iter().map(|s| s.stride).collect();
        Ok((std::rc::Rc::new(DDetect::new(b.params, &channels, b.nc, reg_max, strides)), None))
    },
};

impl crate::block::Layer for DDetect {
    fn forward(&self, inputs: Vec<Tensor<4>>, cx: &Ctx) -> crate::block::Out {
        crate::block::Out::Head(DDetect::forward(self, &inputs, cx))
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn as_head(&self) -> Option<&dyn crate::block::Head> {
        Some(self)
    }
}

impl crate::block::Head for DDetect {
    fn nc(&self) -> usize {
        self.nc
    }
    fn as_detector(&self) -> Option<&dyn crate::block::Detector> {
        Some(self)
    }
}

impl crate::block::Detector for DDetect {
    fn strides(&self) -> &[usize] {
        &self.strides
    }
    fn decode(&self, maps: &[Tensor<4>], _image: [usize; 2]) -> Tensor<3> {
        DDetect::decode(self, maps)
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Distribution, FloatDType, Tensor};

    use super::*;
    use crate::params::BuildState;

    /// Maps computed in bf16 (AMP) decode in f32, to what their f32 values decode to: the
    /// anchors are f32, and a fused backend refuses a binary op across dtypes.
    #[test]
    fn bf16_maps_decode_in_f32() {
        let device = Device::flex();
        let mut state = BuildState::new(0);
        let head = DDetect::new(&mut state.builder(&device), &[16, 32], 3, 4, vec![8, 16]);
        let maps: Vec<Tensor<4>> = [(8, 8), (4, 4)]
            .iter()
            .map(|&(h, w)| Tensor::<4>::random([2, 4 * 4 + 3, h, w], Distribution::Normal(0.0, 1.0), &device).cast(FloatDType::BF16))
            .collect();
        let from_bf16 = head.decode(&maps);
        let as_f32: Vec<Tensor<4>> = maps.iter().map(|m| m.clone().cast(FloatDType::F32)).collect();
        let from_f32 = head.decode(&as_f32);
        assert_eq!(from_bf16.dims(), [2, 4 + 3, 8 * 8 + 4 * 4]);
        assert_eq!(from_bf16.dtype(), from_f32.dtype());
        let err: f32 = from_bf16.sub(from_f32).abs().max().into_scalar();
        assert!(err == 0.0, "bf16 maps decode to their f32 values' boxes; max |diff| = {err}");
    }
}
