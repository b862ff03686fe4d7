//! A network assembled from a topology: layers in order, each a block from the library,
//! reading the outputs of earlier layers.

use std::collections::BTreeMap;
use std::rc::Rc;

use burn::tensor::{Device, Tensor};

use crate::block::{Args, BlockBuild, Layer as Built, Out, Shape, did_you_mean};
use crate::ctx::Ctx;
use crate::params::{BuildState, ParamStore};
use crate::registry::BLOCKS;
use crate::topology::{INPUT, LayerSpec, Sources, TopologyError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Input,
    Layer(usize),
}

#[derive(Debug, Clone)]
struct Layer {
    name: String,
    inputs: Vec<Source>,
    block: Rc<dyn Built>,
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
    pub fn build(specs: &[LayerSpec], nc: usize, with_aux: bool, device: &Device, seed: u64) -> Result<(Network, ParamStore), TopologyError> {
        let mut state = BuildState::new(seed);
        let mut b = state.builder(device);
        let mut keys: std::collections::HashSet<String> = Default::default();
        let mut layers: Vec<Layer> = vec![];
        // Per built layer: its output map (None for heads).
        let mut shapes: Vec<Option<Shape>> = vec![];
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
                    Source::Input => in_shapes.push(Shape { channels: 3, stride: 1 }),
                    Source::Layer(j) => match shapes[*j] {
                        Some(s) => in_shapes.push(s),
                        None => {
                            return Err(TopologyError::new(
                                i,
                                Some("from"),
                                format!("layer `{}` reads the detection head `{}`, whose output is not a feature map", spec.name, layers[*j].name),
                            ));
                        }
                    },
                }
            }
            let Some(kind) = BLOCKS.iter().find(|k| k.name == spec.block) else {
                let known: Vec<&str> = BLOCKS.iter().map(|b| b.name).collect();
                let mut e = TopologyError::new(i, Some("block"), format!("unknown block `{}`", spec.block));
                e.help = did_you_mean(&spec.block, &known).map(|k| format!("did you mean `{k}`?")).or_else(|| Some(format!("blocks: {}", known.join(", "))));
                return Err(e);
            };
            let before = b.len();
            let mut pb = b.pp(spec.params.as_deref().unwrap_or(&spec.name));
            let mut build = BlockBuild { params: &mut pb, inputs: &in_shapes, nc, name: &spec.name, args: Args::new(i, &spec.block, &spec.args) };
            let (block, shape) = (kind.build)(&mut build)?;
            if kind.head {
                if block.as_head().is_none() {
                    return Err(TopologyError::new(i, Some("block"), format!("block `{}` is marked a head but its layer is not a `Head`", spec.block)));
                }
                let slot = if spec.aux { &mut aux_head } else { &mut main_head };
                if slot.is_some() {
                    return Err(TopologyError::new(i, Some("block"), format!("a second {} head `{}`", if spec.aux { "auxiliary" } else { "main" }, spec.name)));
                }
                *slot = Some(layers.len());
            }
            build.args.finish(kind.args)?;
            // Names are unique, but `params` can put two layers' parameters under one prefix.
            for key in b.names_since(before) {
                if !keys.insert(key.to_string()) {
                    let which = if spec.params.is_some() { "params" } else { "name" };
                    return Err(TopologyError::new(
                        i,
                        Some(which),
                        format!("layer `{}` makes parameter `{key}`, which an earlier layer already has", spec.name),
                    )
                    .with_help("give the layer a `params` prefix of its own"));
                }
            }
            names.insert(spec.name.clone(), layers.len());
            previous = Source::Layer(layers.len());
            shapes.push(shape);
            layers.push(Layer { name: spec.name.clone(), inputs, block, aux: spec.aux });
        }

        let main_head = main_head.ok_or_else(|| {
            TopologyError::new(
                specs.len().saturating_sub(1),
                None,
                "the topology has no head (a head block such as `DDetect` or `YOLOXHead`, with `aux = false`)",
            )
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

    /// The main head's layer (`as_any` gives its family's type).
    pub fn head_layer(&self) -> &dyn crate::block::Layer {
        self.layers[self.main_head].block.as_ref()
    }

    /// The main head, whatever its family.
    pub fn head(&self) -> &dyn crate::block::Head {
        self.head_layer().as_head().expect("a head block's layer is a Head")
    }

    /// The main head as a detector; an error names the head and what needs a detector.
    pub fn detector(&self, what: &str) -> anyhow::Result<&dyn crate::block::Detector> {
        self.head()
            .as_detector()
            .ok_or_else(|| anyhow::anyhow!("{what} needs a detection head; this network's head `{}` is not one", self.layers[self.main_head].name))
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
            let inputs: Vec<Tensor<4>> = layer
                .inputs
                .iter()
                .map(|s| match s {
                    Source::Input => {
                        let images = images.expect("only layers before a seam read the images").clone();
                        if layer.block.reads_pixels() { images } else { cx.compute_input(images) }
                    }
                    Source::Layer(j) => values[*j].clone().expect("inputs run before their readers"),
                })
                .collect();
            match layer.block.forward(inputs, cx) {
                Out::Head(maps) => {
                    if Some(i) == self.aux_head {
                        aux = Some(maps)
                    } else {
                        main = Some(maps)
                    }
                }
                Out::Map(x) => values[i] = Some(x),
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

fn resolve(layer: usize, name: &str, names: &BTreeMap<String, usize>, specs: &[LayerSpec], with_aux: bool) -> Result<Source, TopologyError> {
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
