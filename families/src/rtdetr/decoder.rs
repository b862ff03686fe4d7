//! RT-DETR's decoder, the network's head (LibreYOLO's `RTDETRTransformer`): the encoder's maps
//! projected and flattened into tokens; every token scored and boxed against its anchor; the
//! `queries` best tokens chosen as the decoder's queries and reference boxes; decoder layers
//! refining the boxes, each with its own class and box heads.
//!
//! Its maps, as the loss and validation read them: in training `[boxes (L, B, Q, 4), logits
//! (L, B, Q, nc)]` for each of the L decoder layers, then the encoder's choice `[boxes (1, B, Q,
//! 4), logits (1, B, Q, nc)]`; in eval the last layer's boxes and logits only. Boxes are (cx, cy,
//! w, h) in [0, 1] of the image.

use std::rc::Rc;

use burn::tensor::activation::sigmoid;
use burn::tensor::{Bool, Tensor, TensorData};
use rand::SeedableRng;
use rand::rngs::StdRng;

use super::conv_norm::{Act, ConvNorm};
use super::decoder_layer::{DecoderLayer, Memory};
use super::denoising::{Denoising, DenoisingTensors, Noise};
use super::targets::DetrTargets;
use crate::block::{BlockKind, Detector, Head, Labels, Layer, Out};
use crate::blocks::ConvShape;
use crate::ctx::Ctx;
use crate::params::{Builder, Init, ParamId};
use crate::topology::TopologyError;
use crate::transformer::{LayerNorm, Linear, Mlp, inverse_sigmoid, tokens};

/// RT-DETR's anchors: a box of side 0.05 x 2^level at every cell centre; those within `EPS` of
/// the image's border are invalid.
const ANCHOR_SIZE: f32 = 0.05;
const EPS: f32 = 0.01;

#[derive(Debug, Clone)]
pub struct RtDetrDecoder {
    input_proj: Vec<ConvNorm>,
    layers: Vec<DecoderLayer>,
    /// The denoising queries' class embedding (`nc + 1` rows, the last the padding's).
    pub denoising_class_embed: Option<ParamId>,
    query_pos_head: Mlp,
    enc_output: Linear,
    enc_norm: LayerNorm,
    enc_score_head: Linear,
    enc_bbox_head: Mlp,
    dec_score_head: Vec<Linear>,
    dec_bbox_head: Vec<Mlp>,
    nc: usize,
    queries: usize,
    denoising: usize,
    strides: Vec<usize>,
    /// The denoising groups' seed (from the network's build), mixed with the step's number: a
    /// step draws the same groups however often it runs (a resumed run, a re-run step).
    seed: u64,
}

/// The decoder's settings (`args`).
struct Config {
    dim: usize,
    queries: usize,
    layers: usize,
    heads: usize,
    ffn: usize,
    points: usize,
    denoising: usize,
}

impl RtDetrDecoder {
    fn new(b: &mut Builder, nc: usize, c: &Config, strides: Vec<usize>) -> Self {
        let (dim, levels) = (c.dim, strides.len());
        let mut proj_b = b.pp("input_proj");
        let input_proj = (0..levels).map(|i| ConvNorm::new(&mut proj_b.pp(i), ConvShape::new(dim, dim, 1, 1), Act::None)).collect();
        let mut decoder_b = b.pp("decoder");
        let mut layers_b = decoder_b.pp("layers");
        let layers = (0..c.layers).map(|i| DecoderLayer::new(&mut layers_b.pp(i), dim, c.heads, c.ffn, levels, c.points)).collect();
        let denoising_class_embed = (c.denoising > 0).then(|| b.pp("denoising_class_embed").embedding_padded("weight", nc + 1, dim, Some(nc)));
        let query_pos_head = Mlp::new(&mut b.pp("query_pos_head"), 4, 2 * dim, dim, 2, Init::Xavier, false);
        let enc_output = Linear::weight_init(&mut b.pp("enc_output").pp(0), dim, dim, Init::Xavier);
        let enc_norm = LayerNorm::new(&mut b.pp("enc_output").pp(1), dim);
        // the classification prior of 0.01, as `bias_init_with_prob(0.01)`
        let prior = -((1.0f32 - 0.01) / 0.01).ln();
        let enc_score_head = Linear::init(&mut b.pp("enc_score_head"), dim, nc, Init::Torch, prior);
        let enc_bbox_head = Mlp::new(&mut b.pp("enc_bbox_head"), dim, dim, 4, 3, Init::Torch, true);
        let mut score_b = b.pp("dec_score_head");
        let dec_score_head = (0..c.layers).map(|i| Linear::init(&mut score_b.pp(i), dim, nc, Init::Torch, prior)).collect();
        let mut bbox_b = b.pp("dec_bbox_head");
        let dec_bbox_head = (0..c.layers).map(|i| Mlp::new(&mut bbox_b.pp(i), dim, dim, 4, 3, Init::Torch, true)).collect();
        Self {
            input_proj,
            layers,
            denoising_class_embed,
            query_pos_head,
            enc_output,
            enc_norm,
            enc_score_head,
            enc_bbox_head,
            dec_score_head,
            dec_bbox_head,
            nc,
            queries: c.queries,
            denoising: c.denoising,
            strides,
            seed: b.seed(),
        }
    }

    /// The head's maps (see the module's documentation). In training, with this batch's
    /// denoising queries among the context's head inputs ([`DenoisingTensors`]), the decoder
    /// also refines them.
    pub fn forward_maps(&self, feats: Vec<Tensor<4>>, cx: &Ctx) -> Vec<Tensor<4>> {
        let denoising = if cx.training() { DenoisingTensors::from_any(cx.head_inputs()) } else { None };
        self.forward_denoised(feats, cx, denoising.as_ref())
    }

    /// Whether the decoder refines denoising queries in training (`args.denoising > 0`).
    pub fn denoises(&self) -> bool {
        self.denoising > 0
    }

    /// This batch's denoising groups (`None` without denoising): drawn from the network's seed
    /// mixed with the optimizer step, so a step draws the same groups however often it runs;
    /// laid in `2 x num_denoising` slots an image; all padding for a batch without a box (the
    /// decoder keeps its shapes).
    pub fn denoising(&self, targets: &DetrTargets, step: u64) -> Option<Denoising> {
        if !self.denoises() {
            return None;
        }
        let mut rng = StdRng::seed_from_u64(self.seed ^ step.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let built = Denoising::build(targets, self.nc, self.queries, self.denoising, |b, n| Noise::draw(&mut rng, b, n, self.nc));
        Some(built.unwrap_or_else(|| Denoising::padding_only(targets.labels.len(), self.nc, 2 * self.denoising, self.queries)))
    }

    /// [`forward_maps`](Self::forward_maps) with the denoising queries given: in training the
    /// maps end with every denoising slot's boxes and logits, every layer's, `(L, B, S, 4)` and
    /// `(L, B, S, nc)` (the padding's too: one shape for every batch; the loss reads the real
    /// queries, the first of each image's slots).
    pub fn forward_denoised(&self, feats: Vec<Tensor<4>>, cx: &Ctx, denoising: Option<&DenoisingTensors>) -> Vec<Tensor<4>> {
        let mut shapes = vec![];
        let levels: Vec<Tensor<3>> = feats
            .into_iter()
            .zip(&self.input_proj)
            .map(|(f, proj)| {
                let y = proj.forward(f, cx);
                let [_, _, h, w] = y.dims();
                shapes.push((h, w));
                tokens(y)
            })
            .collect();
        let memory = Tensor::cat(levels, 1);
        let (mut target, mut reference, enc_boxes, enc_logits) = self.select_queries(memory.clone(), &shapes, cx);
        let mut mask = None;
        if let Some(dn) = denoising {
            let (queries, boxes, dn_mask) = self.denoising_queries(dn, &reference, cx);
            target = Tensor::cat(vec![queries, target], 1);
            reference = Tensor::cat(vec![boxes, reference], 1);
            mask = Some(dn_mask);
        }
        let memory = Memory { tokens: memory, shapes: &shapes, mask };
        let (boxes, logits) = self.decode_queries(target, reference, &memory, cx);
        let stack =
            |v: &[Tensor<3>], range: std::ops::Range<usize>| Tensor::cat(v.iter().map(|t| t.clone().slice_dim(1, range.clone()).unsqueeze::<4>()).collect(), 0);
        let slots = denoising.map_or(0, DenoisingTensors::slots);
        let all = slots..slots + self.queries;
        let mut maps = vec![stack(&boxes, all.clone()), stack(&logits, all)];
        if cx.training() {
            maps.extend([enc_boxes.unsqueeze::<4>(), enc_logits.unsqueeze::<4>()]);
            if slots > 0 {
                maps.extend([stack(&boxes, 0..slots), stack(&logits, 0..slots)]);
            }
        }
        maps
    }

    /// The denoising slots' content (their classes' embeddings, `(B, S, C)`), and their boxes
    /// before the sigmoid `(B, S, 4)` and the attention mask `(T, T)`.
    fn denoising_queries(&self, dn: &DenoisingTensors, reference: &Tensor<3>, cx: &Ctx) -> (Tensor<3>, Tensor<3>, Tensor<2, Bool>) {
        let [b, _, _] = reference.dims();
        let n = dn.slots();
        let table = cx.rank2(self.denoising_class_embed.expect("denoising groups need the class embedding"));
        let c = table.dims()[1];
        // `nn.Embedding(padding_idx=nc)`: the padding row is read but never trained
        let table = Tensor::cat(vec![table.clone().slice_dim(0, 0..self.nc), table.slice_dim(0, self.nc..self.nc + 1).detach()], 0);
        let queries = table.select(0, dn.class_indices()).reshape([b, n, c]);
        let dtype = burn::tensor::FloatDType::from(reference.dtype());
        (queries, dn.boxes.clone().cast(dtype), dn.blocked())
    }

    /// The encoder's tokens scored and boxed, and the `queries` best chosen: their features
    /// (detached: the queries' content), their boxes before the sigmoid (detached: the first
    /// reference boxes), and their boxes and logits (the encoder's loss terms).
    fn select_queries(&self, memory: Tensor<3>, shapes: &[(usize, usize)], cx: &Ctx) -> (Tensor<3>, Tensor<3>, Tensor<3>, Tensor<3>) {
        let [b, s, c] = memory.dims();
        // A forward cannot return an error; the message names the fix.
        assert!(
            s >= self.queries,
            "RT-DETR's decoder picks {} queries from the encoder's {s} tokens: the image is too small (imgsz 128 gives 336 tokens)",
            self.queries
        );
        let (anchors, valid) = anchors(shapes);
        let device = memory.device();
        let dtype = burn::tensor::FloatDType::from(memory.dtype());
        let anchors = Tensor::<3>::from_data(TensorData::new(anchors, [1, s, 4]), &device).cast(dtype);
        let valid = Tensor::<3>::from_data(TensorData::new(valid, [1, s, 1]), &device).cast(dtype);
        let features = self.enc_norm.forward(self.enc_output.forward(memory.mul(valid), cx), cx);
        let enc_class = self.enc_score_head.forward(features.clone(), cx);
        let enc_coord = self.enc_bbox_head.forward(features.clone(), cx).add(anchors);
        // The choice in f32: under bf16 many scores tie, and burn's top-k of a bf16 tensor in eval
        // failed every kernel on the H200 (its values' and indices' rows padded to different
        // strides), leaving the indices unwritten. Without autodiff: only the indices are used,
        // and burn's autodiff top-k sorts the whole row on the host (a read back every step, and
        // no CUDA graph can hold it), where the inner backend's runs on the device.
        let scores = enc_class.clone().without_autodiff().max_dim(2).reshape([b, s]).cast(burn::tensor::FloatDType::F32);
        let (_, index) = scores.topk_with_indices(self.queries, 1);
        let index = index.reshape([b, self.queries, 1]);
        let pick = |t: Tensor<3>, width: usize| t.gather(1, index.clone().repeat_dim(2, width));
        let reference = pick(enc_coord, 4);
        let enc_boxes = sigmoid(reference.clone());
        let enc_logits = pick(enc_class, self.nc);
        let target = pick(features, c).detach();
        (target, reference.detach(), enc_boxes, enc_logits)
    }

    /// The decoder layers from the chosen queries: each layer's boxes and logits (eval: the
    /// last layer's only). A layer's reference boxes are the previous layer's, detached in
    /// training; its boxes for the loss refine the previous layer's undetached boxes.
    fn decode_queries(&self, target: Tensor<3>, reference: Tensor<3>, memory: &Memory, cx: &Ctx) -> (Vec<Tensor<3>>, Vec<Tensor<3>>) {
        let training = cx.training();
        let (mut boxes, mut logits) = (vec![], vec![]);
        let mut detached = sigmoid(reference);
        let mut previous = detached.clone();
        let mut out = target;
        let last = self.layers.len() - 1;
        for (i, layer) in self.layers.iter().enumerate() {
            let pos = self.query_pos_head.forward(detached.clone(), cx);
            out = layer.forward(out, detached.clone(), pos, memory, cx);
            let delta = self.dec_bbox_head[i].forward(out.clone(), cx);
            let refined = sigmoid(delta.clone().add(inverse_sigmoid(detached.clone())));
            if training {
                logits.push(self.dec_score_head[i].forward(out.clone(), cx));
                boxes.push(if i == 0 { refined.clone() } else { sigmoid(delta.add(inverse_sigmoid(previous))) });
            } else if i == last {
                logits.push(self.dec_score_head[i].forward(out.clone(), cx));
                boxes.push(refined);
                break;
            }
            previous = refined.clone();
            detached = if training { refined.detach() } else { refined };
        }
        (boxes, logits)
    }
}

/// RT-DETR's anchors for maps of `shapes`, as `_generate_anchors` makes them: per cell (row-major,
/// level after level) `logit(cx, cy, s, s)`, `+inf` where any coordinate is not within (EPS,
/// 1 - EPS); and the validity (1 or 0) of each.
pub fn anchors(shapes: &[(usize, usize)]) -> (Vec<f32>, Vec<f32>) {
    let (mut out, mut valid) = (vec![], vec![]);
    for (level, &(h, w)) in shapes.iter().enumerate() {
        let side = ANCHOR_SIZE * 2f32.powi(level as i32);
        for y in 0..h {
            for x in 0..w {
                let a = [(x as f32 + 0.5) / w as f32, (y as f32 + 0.5) / h as f32, side, side];
                let ok = a.iter().all(|v| *v > EPS && *v < 1.0 - EPS);
                out.extend(a.map(|v| if ok { (v / (1.0 - v)).ln() } else { f32::INFINITY }));
                valid.push(if ok { 1.0 } else { 0.0 });
            }
        }
    }
    (out, valid)
}

impl Layer for RtDetrDecoder {
    fn forward(&self, inputs: Vec<Tensor<4>>, cx: &Ctx) -> Out {
        Out::Head(self.forward_maps(inputs, cx))
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn as_head(&self) -> Option<&dyn Head> {
        Some(self)
    }
}

impl Head for RtDetrDecoder {
    fn nc(&self) -> usize {
        self.nc
    }
    fn as_detector(&self) -> Option<&dyn Detector> {
        Some(self)
    }
}

impl Detector for RtDetrDecoder {
    fn strides(&self) -> &[usize] {
        &self.strides
    }
    fn labels(&self) -> Labels {
        Labels::TopK
    }
    /// The last decoder layer's queries: their (cx, cy, w, h) of the image as xyxy pixels, then
    /// the sigmoid of each class's logit (LibreYOLO's `postprocess`, before its top-k).
    fn decode(&self, maps: &[Tensor<4>], image: [usize; 2]) -> Tensor<3> {
        decode(&maps[0], &maps[1], image)
    }
}

/// [`Detector::decode`] of the last layer's `boxes` `(L, B, Q, 4)` and `logits` `(L, B, Q, nc)`
/// for an `image` of `[height, width]`: `(B, 4 + nc, Q)`.
fn decode(boxes: &Tensor<4>, logits: &Tensor<4>, [height, width]: [usize; 2]) -> Tensor<3> {
    let last = |m: &Tensor<4>| {
        let [l, b, q, c] = m.dims();
        m.clone().cast(burn::tensor::FloatDType::F32).narrow(0, l - 1, 1).reshape([b, q, c])
    };
    let (boxes, logits) = (last(boxes), last(logits));
    let part = |i: usize| boxes.clone().narrow(2, i, 1);
    let (half_w, half_h) = (part(2).div_scalar(2.0), part(3).div_scalar(2.0));
    let (w, h) = (width as f64, height as f64);
    let xyxy = vec![
        part(0).sub(half_w.clone()).mul_scalar(w),
        part(1).sub(half_h.clone()).mul_scalar(h),
        part(0).add(half_w).mul_scalar(w),
        part(1).add(half_h).mul_scalar(h),
        sigmoid(logits),
    ];
    Tensor::cat(xyxy, 2).swap_dims(1, 2)
}

/// `RTDETRDecoder` in a topology: the encoder's maps in (`from = [...]`, one width), `args = {
/// queries = 300, layers = 3, heads = 8, ffn = 1024, points = 4, denoising = 100 }`.
pub static BLOCK: BlockKind = BlockKind {
    name: "RTDETRDecoder",
    args: &["queries", "layers", "heads", "ffn", "points", "denoising"],
    head: true,
    build: |b| {
        let dim = b.inputs[0].channels;
        if let Some(other) = b.inputs.iter().find(|s| s.channels != dim) {
            return Err(TopologyError::new(b.args.layer, Some("from"), format!("`{}` reads maps of one width, got {dim} and {}", b.name, other.channels)));
        }
        let config = Config {
            dim,
            queries: b.args.usize_or("queries", 300)?,
            layers: b.args.usize_or("layers", 3)?,
            heads: b.args.usize_or("heads", 8)?,
            ffn: b.args.usize_or("ffn", 1024)?,
            points: b.args.usize_or("points", 4)?,
            denoising: b.args.count_or("denoising", 100)?,
        };
        if !dim.is_multiple_of(config.heads) {
            return Err(TopologyError::new(b.args.layer, Some("args.heads"), format!("`{}`: {dim} channels do not split into {} heads", b.name, config.heads)));
        }
        let strides = b.inputs.iter().map(|s| s.stride).collect();
        Ok((Rc::new(RtDetrDecoder::new(b.params, b.nc, &config, strides)), None))
    },
};

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Tensor, TensorData};

    /// A query's (cx, cy, w, h) of the image become xyxy pixels of a 100 x 200 (h x w) input, its
    /// logits sigmoid scores, the last layer's only.
    #[test]
    fn queries_decode_to_pixels_and_scores() {
        let device = Device::flex();
        // two layers, one image, one query; the first layer's box is ignored
        let boxes = Tensor::<4>::from_data(TensorData::new(vec![0.1f32, 0.1, 0.1, 0.1, 0.5, 0.25, 0.2, 0.5], [2, 1, 1, 4]), &device);
        let logits = Tensor::<4>::from_data(TensorData::new(vec![9.0f32, 9.0, 0.0, 2.0f32.ln()], [2, 1, 1, 2]), &device);
        let out = super::decode(&boxes, &logits, [100, 200]);
        assert_eq!(out.dims(), [1, 6, 1]);
        let got = out.into_data().convert::<f32>().try_to_vec::<f32>().unwrap();
        let want = [80.0, 0.0, 120.0, 50.0, 0.5, 2.0 / 3.0];
        assert!(got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-5), "{got:?}");
    }
}
