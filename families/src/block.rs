//! What a topology's `block = "..."` names: a [`BlockKind`] (its arguments and how to build it)
//! and the [`Layer`] it builds. A block is one file under `blocks/` with its `BLOCK` and one line
//! in [`crate::registry::BLOCKS`].

use std::any::Any;
use std::collections::BTreeMap;
use std::rc::Rc;

use burn::tensor::Tensor;

use crate::ctx::Ctx;
use crate::params::Builder;
use crate::topology::{Arg, TopologyError};

/// A layer's output map, as the next layer sees it: channels and stride in pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub channels: usize,
    pub stride: usize,
}

/// The cells of a head's maps, scale by scale, row-major: `(x, y, stride)` rows as three
/// `(1, 1, A)` tensors, cell coordinates plus `offset` (YOLOv9 decodes at cell centres, 0.5;
/// YOLOX at corners, 0).
pub fn grid(maps: &[Tensor<4>], strides: &[usize], offset: f32) -> [Tensor<3>; 3] {
    let (mut xs, mut ys, mut ss) = (vec![], vec![], vec![]);
    for (map, &stride) in maps.iter().zip(strides) {
        let [_, _, h, w] = map.dims();
        for y in 0..h {
            for x in 0..w {
                xs.push(x as f32 + offset);
                ys.push(y as f32 + offset);
                ss.push(stride as f32);
            }
        }
    }
    let device = maps[0].device();
    [xs, ys, ss].map(|v| {
        let a = v.len();
        Tensor::from_data(burn::tensor::TensorData::new(v, [1, 1, a]), &device)
    })
}

/// What a layer makes: a feature map, or a head's maps (one a scale).
pub enum Out {
    Map(Tensor<4>),
    Head(Vec<Tensor<4>>),
}

/// A built layer of a network.
pub trait Layer: std::fmt::Debug {
    fn forward(&self, inputs: Vec<Tensor<4>>, cx: &Ctx) -> Out;
    /// The layer as `Any`, for the family code that reads its own head's settings (YOLOv9's
    /// loss reads `DDetect::reg_max`).
    fn as_any(&self) -> &dyn Any;
    /// Reads the images as loaded (f32, RGB in [0, 1]) rather than cast to the compute dtype:
    /// a layer that changes the pixels ([`crate::blocks::pixels`]) does so at full precision.
    fn reads_pixels(&self) -> bool {
        false
    }
    /// The layer as a network's head, if it is one.
    fn as_head(&self) -> Option<&dyn Head> {
        None
    }
}

/// What the engine needs of any network's head, whatever its task and family.
pub trait Head {
    /// Classes.
    fn nc(&self) -> usize;
    /// The head as a detector (its maps decode to boxes), if it is one. Validation, predict,
    /// the eval graphs and the detection losses ask for it and name the task they need.
    fn as_detector(&self) -> Option<&dyn Detector> {
        None
    }
    /// The head as a classifier (its maps are class logits), if it is one.
    fn as_classifier(&self) -> Option<&dyn Classifier> {
        None
    }
    /// What validation and the eval graphs read of the raw maps of an `image = [height,
    /// width]` input, in f32, as one `(B, R, A)` tensor: a detector's decode `(B, 4 + nc, A)`;
    /// a classifier's class probabilities `(B, nc, 1)`.
    fn eval(&self, maps: &[Tensor<4>], image: [usize; 2]) -> Tensor<3> {
        if let Some(d) = self.as_detector() {
            return d.decode(maps, image);
        }
        let c = self.as_classifier().expect("a head is a detector or a classifier");
        let p = c.probabilities(maps);
        let [b, nc] = p.dims();
        p.reshape([b, nc, 1])
    }
}

/// A classification head: validation reads its class probabilities, the loss its logits.
pub trait Classifier: Head {
    /// Softmax probabilities `(B, nc)` of the raw maps, in f32.
    fn probabilities(&self, maps: &[Tensor<4>]) -> Tensor<2>;
}

/// A detection head: validation, predict, the eval graphs and the losses read its strides, and
/// NMS reads its decode.
pub trait Detector: Head {
    /// The stride of each scale's map, in pixels.
    fn strides(&self) -> &[usize];
    /// Which (anchor, class) pairs its postprocess keeps as candidates before NMS.
    fn labels(&self) -> Labels {
        Labels::Multi
    }
    /// Detections of the raw maps of an `image = [height, width]` input, in f32 whatever the
    /// maps' dtype: `(B, 4 + nc, A)`, xyxy pixels then one score per class, anchors (or
    /// queries) in the head's order. A grid head knows its pixels from its maps' strides; a
    /// query head (RT-DETR) boxes relative to the image and scales by `image`.
    fn decode(&self, maps: &[Tensor<4>], image: [usize; 2]) -> Tensor<3>;
}

/// Which (anchor, class) pairs a detector's postprocess keeps as candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Labels {
    /// Every class above the confidence threshold (LibreYOLO's YOLOv9 postprocess).
    Multi,
    /// The best class of each anchor (LibreYOLO's YOLOX postprocess: `max(obj x cls)`).
    Best,
    /// The best `max_det` (query, class) pairs of all, without NMS (LibreYOLO's DETR
    /// postprocess, RT-DETR's); validation takes them at any confidence, as LibreYOLO does.
    TopK,
}

/// A kind of block a topology can name.
pub struct BlockKind {
    pub name: &'static str,
    /// The arguments it takes (`args = { ... }`).
    pub args: &'static [&'static str],
    /// A head: its output is the network's (maps per scale), not a feature map.
    pub head: bool,
    pub build: fn(&mut BlockBuild<'_, '_>) -> Built,
}

/// What building a block gives: the layer and its output map (none for a head).
pub type Built = Result<(Rc<dyn Layer>, Option<Shape>), TopologyError>;

impl std::fmt::Debug for BlockKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockKind").field("name", &self.name).finish_non_exhaustive()
    }
}

/// What a block is built from: its parameters' builder, its inputs' shapes, its arguments.
pub struct BlockBuild<'a, 'b> {
    pub params: &'a mut Builder<'b>,
    pub inputs: &'a [Shape],
    /// Classes (a head's output width).
    pub nc: usize,
    /// The layer's name.
    pub name: &'a str,
    pub args: Args<'a>,
}

impl BlockBuild<'_, '_> {
    /// The one input of a block that takes one.
    pub fn single(&self) -> Result<Shape, TopologyError> {
        match self.inputs {
            [one] => Ok(*one),
            _ => Err(TopologyError::new(self.args.layer, Some("from"), format!("{} takes one input, got {}", self.args.block, self.inputs.len()))),
        }
    }
}

/// A layer's `args`, read key by key; unknown keys are reported by [`Args::finish`].
pub struct Args<'a> {
    pub layer: usize,
    pub block: &'a str,
    args: &'a BTreeMap<String, Arg>,
    read: Vec<&'static str>,
}

impl<'a> Args<'a> {
    pub fn new(layer: usize, block: &'a str, args: &'a BTreeMap<String, Arg>) -> Self {
        Self { layer, block, args, read: vec![] }
    }

    /// A required positive integer.
    pub fn usize(&mut self, key: &'static str) -> Result<usize, TopologyError> {
        self.read.push(key);
        match self.args.get(key) {
            None => Err(TopologyError::new(self.layer, Some("args"), format!("block `{}` needs `args.{key}`", self.block))),
            Some(Arg::Int(v)) if *v > 0 => Ok(*v as usize),
            Some(other) => Err(TopologyError::new(
                self.layer,
                Some(&format!("args.{key}")),
                format!("`args.{key}` of block `{}` must be a positive integer, got {other:?}", self.block),
            )),
        }
    }

    /// A positive integer, `default` when absent.
    pub fn usize_or(&mut self, key: &'static str, default: usize) -> Result<usize, TopologyError> {
        if self.args.contains_key(key) {
            self.usize(key)
        } else {
            self.read.push(key);
            Ok(default)
        }
    }

    /// A non-negative integer (a count that may be 0), `default` when absent.
    pub fn count_or(&mut self, key: &'static str, default: usize) -> Result<usize, TopologyError> {
        self.read.push(key);
        match self.args.get(key) {
            None => Ok(default),
            Some(Arg::Int(v)) if *v >= 0 => Ok(*v as usize),
            Some(other) => Err(TopologyError::new(
                self.layer,
                Some(&format!("args.{key}")),
                format!("`args.{key}` of block `{}` must be a non-negative integer, got {other:?}", self.block),
            )),
        }
    }

    /// A boolean (`true`/`false`), `default` when absent.
    pub fn bool_or(&mut self, key: &'static str, default: bool) -> Result<bool, TopologyError> {
        self.read.push(key);
        match self.args.get(key) {
            None => Ok(default),
            Some(Arg::Bool(v)) => Ok(*v),
            Some(other) => Err(TopologyError::new(
                self.layer,
                Some(&format!("args.{key}")),
                format!("`args.{key}` of block `{}` must be true or false, got {other:?}", self.block),
            )),
        }
    }

    /// A list of positive integers, `default` when absent.
    pub fn usizes_or(&mut self, key: &'static str, default: &[usize]) -> Result<Vec<usize>, TopologyError> {
        self.read.push(key);
        match self.args.get(key) {
            None => Ok(default.to_vec()),
            Some(Arg::List(v)) if !v.is_empty() && v.iter().all(|x| *x > 0) => Ok(v.iter().map(|x| *x as usize).collect()),
            Some(other) => Err(TopologyError::new(
                self.layer,
                Some(&format!("args.{key}")),
                format!("`args.{key}` of block `{}` must be a list of positive integers, got {other:?}", self.block),
            )),
        }
    }

    /// An error for the first argument the block did not read, naming what it takes.
    pub fn finish(self, allowed: &[&str]) -> Result<(), TopologyError> {
        if let Some(key) = self.args.keys().find(|k| !self.read.contains(&k.as_str())) {
            let mut e = TopologyError::new(self.layer, Some(&format!("args.{key}")), format!("block `{}` takes no argument `{key}`", self.block));
            e.help = did_you_mean(key, allowed)
                .map(|k| format!("did you mean `{k}`?"))
                .or_else(|| Some(format!("`{}` takes: {}", self.block, if allowed.is_empty() { "no arguments".to_string() } else { allowed.join(", ") })));
            return Err(e);
        }
        Ok(())
    }
}

/// The candidate nearest `word`, if near enough to suggest.
pub fn did_you_mean<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates.iter().map(|c| (strsim::damerau_levenshtein(word, c), *c)).filter(|(d, _)| *d <= (word.len() / 3).max(1)).min().map(|(_, c)| c)
}

/// `impl Layer` for a block of one input whose `forward(x, cx)` makes a feature map.
#[macro_export]
macro_rules! one_input_layer {
    ($ty:ident) => {
        impl $crate::block::Layer for $ty {
            fn forward(&self, mut inputs: Vec<burn::tensor::Tensor<4>>, cx: &$crate::ctx::Ctx) -> $crate::block::Out {
                $crate::block::Out::Map($ty::forward(self, inputs.remove(0), cx))
            }
            fn as_any(&self) -> &dyn std::any::Any {
                self
            }
        }
    };
}
