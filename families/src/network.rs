//! A network assembled from a topology: layers in order, each a block from the library,
//! reading the outputs of earlier layers.

use std::collections::BTreeMap;

use burn::tensor::module::interpolate;
use burn::tensor::ops::{InterpolateMode, InterpolateOptions};
use burn::tensor::{Device, Tensor};

use crate::blocks::{ADown, AConv, Conv, ConvShape, DDetect, Elan, RepNCSPELAN, SPPELAN};
use crate::ctx::{Ctx, TracedOp};
use crate::params::{BuildState, ParamStore};
use crate::topology::{Arg, INPUT, LayerSpec, Sources, TopologyError};

/// Blocks a topology can name, with their arguments.
pub const BLOCKS: &[(&str, &[&str])] = &[
    ("Conv", &["out", "k", "s", "g"]),
    ("ELAN", &["out", "part", "hidden"]),
    ("RepNCSPELAN", &["out", "part", "hidden", "n"]),
    ("AConv", &["out"]),
    ("ADown", &["out"]),
    ("SPPELAN", &["out", "hidden"]),
    ("Upsample", &["scale"]),
    ("Concat", &[]),
    ("DDetect", &["reg_max"]),
];

#[derive(Debug, Clone)]
enum Block {
    Conv(Conv),
    Elan(Elan),
    RepNCSPELAN(RepNCSPELAN),
    AConv(AConv),
    ADown(ADown),
    SPPELAN(SPPELAN),
    Upsample(usize),
    Concat,
    Detect(DDetect),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Input,
    Layer(usize),
}

#[derive(Debug, Clone)]
struct Layer {
    name: String,
    inputs: Vec<Source>,
    block: Block,
    aux: bool,
}

/// Raw head maps of one forward.
#[derive(Debug, Clone)]
pub struct HeadMaps {
    /// Main head: one `(B, 4*reg_max + nc, H_i, W_i)` map per scale.
    pub main: Vec<Tensor<4>>,
    /// PGI auxiliary head, when the branch exists and the forward asked for it.
    pub aux: Option<Vec<Tensor<4>>>,
}

#[derive(Debug, Clone)]
pub struct Network {
    layers: Vec<Layer>,
    main_head: usize,
    aux_head: Option<usize>,
    /// For each layer, the last layer that reads it (to drop activations early).
    last_use: Vec<usize>,
}

impl Network {
    /// Builds the network and its freshly initialised parameters (PyTorch's default init,
    /// detection-prior biases, BatchNorm at identity). Aux layers are built only if `with_aux`.
    pub fn build(
        specs: &[LayerSpec],
        nc: usize,
        with_aux: bool,
        device: &Device,
        seed: u64,
    ) -> Result<(Network, ParamStore), TopologyError> {
        let mut state = BuildState::new(seed);
        let mut b = state.builder(device);
        let mut layers: Vec<Layer> = vec![];
        // Per built layer: output channels and stride (None for heads).
        let mut shapes: Vec<Option<(usize, usize)>> = vec![];
        let mut names: BTreeMap<String, usize> = BTreeMap::new();
        let mut previous = Source::Input;
        let (mut main_head, mut aux_head) = (None, None);

        for (i, spec) in specs.iter().enumerate() {
            if names.contains_key(&spec.name) || spec.name == INPUT {
                return Err(TopologyError::new(i, Some("name"), format!("duplicate layer name `{}`", spec.name)));
            }
            if spec.aux && !with_aux {
                continue;
            }
            let inputs: Vec<Source> = match &spec.from {
                Sources::Previous => vec![previous],
                Sources::One(s) => vec![resolve(i, s, &names, specs, with_aux)?],
                Sources::Many(v) => v.iter().map(|s| resolve(i, s, &names, specs, with_aux)).collect::<Result<_, _>>()?,
            };
            let mut in_shapes = vec![];
            for src in &inputs {
                match src {
                    Source::Input => in_shapes.push((3, 1)),
                    Source::Layer(j) => match shapes[*j] {
                        Some(s) => in_shapes.push(s),
                        None => {
                            return Err(TopologyError::new(i, Some("from"), format!(
                                "layer `{}` reads the detection head `{}`, whose output is not a feature map",
                                spec.name, layers[*j].name
                            )));
                        }
                    },
                }
            }
            let mut args = Args::new(i, spec)?;
            let mut pb = b.pp(&spec.name);
            let single = |what: &str| -> Result<(usize, usize), TopologyError> {
                match in_shapes.as_slice() {
                    [one] => Ok(*one),
                    _ => Err(TopologyError::new(i, Some("from"), format!("{what} takes one input, got {}", in_shapes.len()))),
                }
            };
            let (block, shape) = match spec.block.as_str() {
                "Conv" => {
                    let (c_in, stride) = single("Conv")?;
                    let (out, k, s, g) = (args.usize("out")?, args.usize_or("k", 1)?, args.usize_or("s", 1)?, args.usize_or("g", 1)?);
                    (Block::Conv(Conv::new(&mut pb, ConvShape::new(c_in, out, k, s).groups(g))), Some((out, stride * s)))
                }
                "ELAN" => {
                    let (c_in, stride) = single("ELAN")?;
                    let (out, part, hidden) = (args.usize("out")?, args.usize("part")?, args.usize("hidden")?);
                    (Block::Elan(Elan::new(&mut pb, c_in, part, hidden, out)), Some((out, stride)))
                }
                "RepNCSPELAN" => {
                    let (c_in, stride) = single("RepNCSPELAN")?;
                    let (out, part, hidden, n) = (args.usize("out")?, args.usize("part")?, args.usize("hidden")?, args.usize_or("n", 1)?);
                    (Block::RepNCSPELAN(RepNCSPELAN::new(&mut pb, c_in, part, hidden, out, n)), Some((out, stride)))
                }
                "AConv" => {
                    let (c_in, stride) = single("AConv")?;
                    let out = args.usize("out")?;
                    (Block::AConv(AConv::new(&mut pb, c_in, out)), Some((out, stride * 2)))
                }
                "ADown" => {
                    let (c_in, stride) = single("ADown")?;
                    let out = args.usize("out")?;
                    (Block::ADown(ADown::new(&mut pb, c_in, out)), Some((out, stride * 2)))
                }
                "SPPELAN" => {
                    let (c_in, stride) = single("SPPELAN")?;
                    let (out, hidden) = (args.usize("out")?, args.usize("hidden")?);
                    (Block::SPPELAN(SPPELAN::new(&mut pb, c_in, hidden, out)), Some((out, stride)))
                }
                "Upsample" => {
                    let (c_in, stride) = single("Upsample")?;
                    let scale = args.usize_or("scale", 2)?;
                    if stride % scale != 0 {
                        return Err(TopologyError::new(i, Some("args.scale"), format!("upsampling a stride-{stride} map by {scale} does not give a whole stride")));
                    }
                    (Block::Upsample(scale), Some((c_in, stride / scale)))
                }
                "Concat" => {
                    let strides: Vec<usize> = in_shapes.iter().map(|s| s.1).collect();
                    if strides.windows(2).any(|w| w[0] != w[1]) {
                        return Err(TopologyError::new(i, Some("from"), format!(
                            "`{}` concatenates maps of different strides {strides:?}; their sizes would not match",
                            spec.name
                        )));
                    }
                    (Block::Concat, Some((in_shapes.iter().map(|s| s.0).sum(), strides[0])))
                }
                "DDetect" => {
                    let reg_max = args.usize_or("reg_max", 16)?;
                    let channels: Vec<usize> = in_shapes.iter().map(|s| s.0).collect();
                    let strides: Vec<usize> = in_shapes.iter().map(|s| s.1).collect();
                    let head = DDetect::new(&mut pb, &channels, nc, reg_max, strides);
                    let slot = if spec.aux { &mut aux_head } else { &mut main_head };
                    if slot.is_some() {
                        return Err(TopologyError::new(i, Some("block"), format!(
                            "a second {} detection head `{}`",
                            if spec.aux { "auxiliary" } else { "main" },
                            spec.name
                        )));
                    }
                    *slot = Some(layers.len());
                    (Block::Detect(head), None)
                }
                other => {
                    let known: Vec<&str> = BLOCKS.iter().map(|b| b.0).collect();
                    let mut e = TopologyError::new(i, Some("block"), format!("unknown block `{other}`"));
                    e.help = did_you_mean(other, &known).map(|k| format!("did you mean `{k}`?"))
                        .or_else(|| Some(format!("blocks: {}", known.join(", "))));
                    return Err(e);
                }
            };
            args.finish()?;
            names.insert(spec.name.clone(), layers.len());
            previous = Source::Layer(layers.len());
            shapes.push(shape);
            layers.push(Layer { name: spec.name.clone(), inputs, block, aux: spec.aux });
        }

        let main_head = main_head.ok_or_else(|| {
            TopologyError::new(specs.len().saturating_sub(1), None, "the topology has no `DDetect` head (a layer with `aux = false`)")
        })?;
        let mut last_use: Vec<usize> = (0..layers.len()).collect();
        for (i, layer) in layers.iter().enumerate() {
            for src in &layer.inputs {
                if let Source::Layer(j) = src {
                    last_use[*j] = i;
                }
            }
        }
        drop(b);
        Ok((Network { layers, main_head, aux_head, last_use }, state.store))
    }

    pub fn head(&self) -> &DDetect {
        match &self.layers[self.main_head].block {
            Block::Detect(d) => d,
            _ => unreachable!("main_head indexes a DDetect layer"),
        }
    }

    pub fn has_aux(&self) -> bool {
        self.aux_head.is_some()
    }

    /// Runs the layers in order. The auxiliary branch runs only when `with_aux` and it exists.
    pub fn forward(&self, images: Tensor<4>, cx: &Ctx, with_aux: bool) -> HeadMaps {
        let mut values: Vec<Option<Tensor<4>>> = vec![None; self.layers.len()];
        let (main, aux) = self.run_layers(0..self.layers.len(), &mut values, Some(&images), cx, with_aux);
        HeadMaps { main: main.expect("the main head runs"), aux }
    }

    /// The index of layer `name`.
    pub fn layer_index(&self, name: &str) -> Option<usize> {
        self.layers.iter().position(|l| l.name == name)
    }

    /// The layers up to `seam` (included) whose outputs a later layer reads, in layer order:
    /// the activations that cross a seam after layer `seam`.
    pub fn crossing(&self, seam: usize, with_aux: bool) -> Vec<usize> {
        let mut crossing: Vec<usize> = self.layers[seam + 1..]
            .iter()
            .filter(|l| with_aux || !l.aux)
            .flat_map(|l| l.inputs.iter())
            .filter_map(|s| match s {
                Source::Layer(j) if *j <= seam => Some(*j),
                _ => None,
            })
            .collect();
        crossing.sort_unstable();
        crossing.dedup();
        crossing
    }

    /// The first part of a forward cut after layer `seam`: the activations that cross the seam
    /// ([`crossing`](Self::crossing) order). The seam comes before every head (checked when the
    /// manifest is loaded).
    pub fn forward_until(&self, seam: usize, images: Tensor<4>, cx: &Ctx, with_aux: bool) -> Vec<Tensor<4>> {
        let mut values: Vec<Option<Tensor<4>>> = vec![None; self.layers.len()];
        let (main, aux) = self.run_layers(0..seam + 1, &mut values, Some(&images), cx, with_aux);
        assert!(main.is_none() && aux.is_none(), "a seam after a detection head");
        self.crossing(seam, with_aux).into_iter().map(|j| values[j].take().expect("a crossing activation is computed")).collect()
    }

    /// The rest of a forward cut after layer `seam`, from the activations that cross it (as
    /// [`forward_until`](Self::forward_until) returns them).
    pub fn forward_from(&self, seam: usize, crossing: Vec<Tensor<4>>, cx: &Ctx, with_aux: bool) -> HeadMaps {
        let mut values: Vec<Option<Tensor<4>>> = vec![None; self.layers.len()];
        for (j, t) in self.crossing(seam, with_aux).into_iter().zip(crossing) {
            values[j] = Some(t);
        }
        let (main, aux) = self.run_layers(seam + 1..self.layers.len(), &mut values, None, cx, with_aux);
        HeadMaps { main: main.expect("the main head runs after the seam"), aux }
    }

    /// Runs the layers of `range` reading and writing `values`; the head maps they produce.
    /// `images`: the network input, `None` after a seam (no later layer reads it).
    fn run_layers(
        &self,
        range: std::ops::Range<usize>,
        values: &mut [Option<Tensor<4>>],
        images: Option<&Tensor<4>>,
        cx: &Ctx,
        with_aux: bool,
    ) -> (Option<Vec<Tensor<4>>>, Option<Vec<Tensor<4>>>) {
        let (mut main, mut aux) = (None, None);
        for i in range {
            let layer = &self.layers[i];
            if layer.aux && !with_aux {
                continue;
            }
            let mut inputs: Vec<Tensor<4>> = layer
                .inputs
                .iter()
                .map(|s| match s {
                    Source::Input => images.expect("only layers before a seam read the images").clone(),
                    Source::Layer(j) => values[*j].clone().expect("inputs run before their readers"),
                })
                .collect();
            match &layer.block {
                Block::Detect(head) => {
                    let maps = head.forward(&inputs, cx);
                    if Some(i) == self.aux_head { aux = Some(maps) } else { main = Some(maps) }
                }
                block => {
                    let x = if matches!(block, Block::Concat) { cx.cat(inputs) } else { inputs.remove(0) };
                    values[i] = Some(match block {
                        Block::Conv(m) => m.forward(x, cx),
                        Block::Elan(m) => m.forward(x, cx),
                        Block::RepNCSPELAN(m) => m.forward(x, cx),
                        Block::AConv(m) => m.forward(x, cx),
                        Block::ADown(m) => m.forward(x, cx),
                        Block::SPPELAN(m) => m.forward(x, cx),
                        Block::Upsample(s) => interpolate(
                            {
                                cx.trace(|| TracedOp::Upsample { input: x.dims(), scale: *s });
                                x
                            },
                            InterpolateOptions::new(InterpolateMode::Nearest).with_scale_factor([*s as f32, *s as f32]),
                        ),
                        Block::Concat => x,
                        Block::Detect(_) => unreachable!(),
                    });
                }
            }
            // Free activations nobody reads any more.
            for src in &layer.inputs {
                if let Source::Layer(k) = src
                    && self.last_use[*k] == i
                {
                    values[*k] = None;
                }
            }
        }
        (main, aux)
    }
}

fn resolve(
    layer: usize,
    name: &str,
    names: &BTreeMap<String, usize>,
    specs: &[LayerSpec],
    with_aux: bool,
) -> Result<Source, TopologyError> {
    if name == INPUT {
        return Ok(Source::Input);
    }
    if let Some(&j) = names.get(name) {
        return Ok(Source::Layer(j));
    }
    let message = if specs[..layer].iter().any(|s| s.name == name && s.aux && !with_aux) {
        format!("layer `{}` reads the auxiliary layer `{name}`, which is not built without PGI", specs[layer].name)
    } else if specs[layer..].iter().any(|s| s.name == name) {
        format!("layer `{}` reads `{name}`, which comes later in the list", specs[layer].name)
    } else {
        format!("layer `{}` reads `{name}`, but no earlier layer has that name", specs[layer].name)
    };
    let mut candidates: Vec<&str> = names.keys().map(String::as_str).collect();
    candidates.push(INPUT);
    let mut e = TopologyError::new(layer, Some("from"), message);
    e.help = did_you_mean(name, &candidates).map(|c| format!("did you mean `{c}`?"));
    Err(e)
}

fn did_you_mean<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (strsim::damerau_levenshtein(word, c), *c))
        .filter(|(d, _)| *d <= (word.len() / 3).max(1))
        .min()
        .map(|(_, c)| c)
}

/// A layer's `args`, read key by key; unknown keys are reported at the end.
struct Args<'a> {
    layer: usize,
    block: &'a str,
    args: &'a BTreeMap<String, Arg>,
    read: Vec<&'static str>,
}

impl<'a> Args<'a> {
    fn new(layer: usize, spec: &'a LayerSpec) -> Result<Self, TopologyError> {
        Ok(Self { layer, block: &spec.block, args: &spec.args, read: vec![] })
    }

    fn usize(&mut self, key: &'static str) -> Result<usize, TopologyError> {
        self.read.push(key);
        match self.args.get(key) {
            None => Err(TopologyError::new(self.layer, Some("args"), format!("block `{}` needs `args.{key}`", self.block))),
            Some(Arg::Int(v)) if *v > 0 => Ok(*v as usize),
            Some(other) => Err(TopologyError::new(self.layer, Some(&format!("args.{key}")), format!(
                "`args.{key}` of block `{}` must be a positive integer, got {other:?}",
                self.block
            ))),
        }
    }

    fn usize_or(&mut self, key: &'static str, default: usize) -> Result<usize, TopologyError> {
        if self.args.contains_key(key) { self.usize(key) } else {
            self.read.push(key);
            Ok(default)
        }
    }

    fn finish(self) -> Result<(), TopologyError> {
        let allowed = BLOCKS.iter().find(|b| b.0 == self.block).map(|b| b.1).unwrap_or(&[]);
        if let Some(key) = self.args.keys().find(|k| !self.read.contains(&k.as_str())) {
            let mut e = TopologyError::new(self.layer, Some(&format!("args.{key}")), format!("block `{}` takes no argument `{key}`", self.block));
            e.help = did_you_mean(key, allowed).map(|k| format!("did you mean `{k}`?"))
                .or_else(|| Some(format!("`{}` takes: {}", self.block, if allowed.is_empty() { "no arguments".to_string() } else { allowed.join(", ") })));
            return Err(e);
        }
        Ok(())
    }
}

impl Network {
    /// Layer names in build order (for reports).
    pub fn layer_names(&self) -> impl Iterator<Item = &str> {
        self.layers.iter().map(|l| l.name.as_str())
    }

    /// `true` if the layer belongs to the auxiliary branch.
    pub fn is_aux_layer(&self, name: &str) -> bool {
        self.layers.iter().any(|l| l.name == name && l.aux)
    }
}
