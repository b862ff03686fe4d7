//! The step DAG: the manifest's `[[stage]]` tables as a petgraph graph, checked for unknown
//! kinds, dangling inputs, inputs of the wrong type, duplicate names and cycles, in a stable
//! execution order. Kinds come from a [`Registry`] (the built-in one, or one a caller extends).

mod plan;

use std::collections::HashMap;

use petgraph::algo::tarjan_scc;
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;

use libreyolo_stages::kinds::Registry;
use libreyolo_stages::stage::{Autodiff, Kind};

use crate::manifest::{Diagnostic, KeyPath, LoadedManifest, Part, did_you_mean, suggestion};

pub use plan::{Plan, Seam, Segment};

/// A value flowing between stages: output `output` of stage `stage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueRef {
    pub stage: usize,
    /// The output port's index, and its name.
    pub port: usize,
    pub output: &'static str,
}

/// One stage, checked against its kind.
#[derive(Debug)]
pub struct Stage {
    pub name: String,
    pub kind: &'static Kind,
    pub capture: bool,
    pub inputs: Vec<ValueRef>,
    /// Run events that invalidate the graphs holding this stage ([`RECAPTURE_EVENTS`]).
    pub recapture_on: Vec<String>,
    /// A `network.forward`'s seam inside the network: the layer after which the captured
    /// part ends ([`check_until`]).
    pub until: Option<String>,
}

/// The run events a stage may ask to re-capture on: `mosaic_close`, the first epoch without
/// mosaic (`augment.no_aug_epochs` before the end).
pub const RECAPTURE_EVENTS: &[&str] = &["mosaic_close"];

/// The checked step DAG.
#[derive(Debug)]
pub struct StepDag {
    pub stages: Vec<Stage>,
    graph: DiGraph<usize, ValueRef>,
    /// Stage indices in execution order: topological, ties broken by manifest order.
    pub order: Vec<usize>,
}

impl StepDag {
    /// The captured stages that ask to re-capture on `event`, by name.
    pub fn recapturing_on(&self, event: &str) -> Vec<&str> {
        self.stages.iter().filter(|s| s.capture && s.recapture_on.iter().any(|e| e == event)).map(|s| s.name.as_str()).collect()
    }

    /// Builds and checks the DAG of a loaded manifest with the built-in stage kinds.
    pub fn build(loaded: &LoadedManifest) -> Result<Self, Diagnostic> {
        Self::build_with(loaded, &libreyolo_stages::kinds::builtin())
    }

    /// Builds and checks the DAG of a loaded manifest with the kinds of `registry`.
    pub fn build_with(loaded: &LoadedManifest, registry: &Registry) -> Result<Self, Diagnostic> {
        let specs = &loaded.manifest.stages;
        let source = &loaded.source;
        if specs.is_empty() {
            return Err(source
                .error_at(&KeyPath::root(), Part::Key, "the manifest has no `[[stage]]` tables")
                .with_help(Some("a training step needs at least `data.yolo`, `network.forward`, a loss, `network.backward` and `optimizer` stages".into())));
        }

        let mut by_name: HashMap<&str, usize> = HashMap::new();
        for (i, spec) in specs.iter().enumerate() {
            if let Some(&first) = by_name.get(spec.name.as_str()) {
                return Err(source
                    .error_at(&KeyPath::stage(i).key("name"), Part::Value, format!("duplicate stage name `{}`", spec.name))
                    .with_label("defined again here")
                    .with_related(source.span_of(&KeyPath::stage(first).key("name"), Part::Value), "first defined here"));
            }
            by_name.insert(&spec.name, i);
        }

        let mut stages = Vec::with_capacity(specs.len());
        let mut type_error = None;
        for (i, spec) in specs.iter().enumerate() {
            let Some(kind) = registry.get(&spec.kind) else {
                let names = registry.names();
                return Err(source
                    .error_at(&KeyPath::stage(i).key("kind"), Part::Value, format!("unknown stage kind `{}` in stage `{}`", spec.kind, spec.name))
                    .with_label("unknown kind")
                    .with_help(suggestion(&spec.kind, names.iter().copied()))
                    .with_note(format!("known kinds: {}", names.join(", "))));
            };
            let required = kind.inputs.iter().filter(|p| !p.optional).count();
            if spec.inputs.len() < required || spec.inputs.len() > kind.inputs.len() {
                let takes = if required == kind.inputs.len() { format!("{required}") } else { format!("{required} to {}", kind.inputs.len()) };
                return Err(source
                    .error_at(
                        &KeyPath::stage(i).key("inputs"),
                        Part::Value,
                        format!("stage `{}` (kind `{}`) takes {takes} input(s), got {}", spec.name, kind.name, spec.inputs.len()),
                    )
                    .with_label(if kind.inputs.is_empty() {
                        "expected no inputs".to_string()
                    } else {
                        format!(
                            "expected [{}]",
                            kind.inputs.iter().map(|p| if p.optional { format!("{}?", p.name) } else { p.name.to_string() }).collect::<Vec<_>>().join(", ")
                        )
                    }));
            }
            let mut inputs = Vec::new();
            for (j, reference) in spec.inputs.iter().enumerate() {
                let at = KeyPath::stage(i).key("inputs").index(j);
                let input = resolve_input(loaded, registry, &by_name, &spec.name, reference, &at)?;
                let (wanted, got) = (kind.inputs[j], registry.get(&specs[input.stage].kind).expect("checked").outputs[input.port]);
                if wanted.ty != got.ty && type_error.is_none() {
                    // Reported after the cycle check: a cycle is the more basic mistake.
                    type_error = Some(
                        source
                            .error_at(
                                &at,
                                Part::Value,
                                format!(
                                    "stage `{}` reads `{reference}` as its `{}` input, which takes {}, but `{reference}` is {}",
                                    spec.name,
                                    wanted.name,
                                    wanted.ty.name(),
                                    got.ty.name()
                                ),
                            )
                            .with_label(format!("{} expected", wanted.ty.name())),
                    );
                }
                inputs.push(input);
            }
            if spec.capture
                && let Some(why) = kind.not_capturable
            {
                return Err(source
                    .error_at(&KeyPath::stage(i).key("capture"), Part::Value, format!("stage `{}` (kind `{}`) cannot be captured: {why}", spec.name, kind.name))
                    .with_label("set `capture = false`"));
            }
            for (j, event) in spec.recapture_on.iter().enumerate() {
                if !RECAPTURE_EVENTS.contains(&event.as_str()) {
                    return Err(source
                        .error_at(&KeyPath::stage(i).key("recapture_on").index(j), Part::Value, format!("unknown run event `{event}` in stage `{}`", spec.name))
                        .with_label("unknown event")
                        .with_help(suggestion(event, RECAPTURE_EVENTS.iter().copied()))
                        .with_note(format!("known events: {}", RECAPTURE_EVENTS.join(", "))));
                }
            }
            if let Some(layer) = &spec.until {
                check_until(loaded, i, kind, layer)?;
            }
            if let Some(settings) = &kind.settings {
                check_settings(loaded, settings)?;
            }
            stages.push(Stage {
                name: spec.name.clone(),
                kind,
                capture: spec.capture,
                inputs,
                recapture_on: {
                    let mut events: Vec<String> = kind.recapture_on.iter().map(|e| e.to_string()).collect();
                    events.extend(spec.recapture_on.iter().filter(|e| !kind.recapture_on.contains(&e.as_str())).cloned());
                    events
                },
                until: spec.until.clone(),
            });
        }

        let mut graph = DiGraph::new();
        let nodes: Vec<NodeIndex> = (0..stages.len()).map(|i| graph.add_node(i)).collect();
        for (i, stage) in stages.iter().enumerate() {
            for input in &stage.inputs {
                graph.add_edge(nodes[input.stage], nodes[i], *input);
            }
        }
        if let Some(cycle) = find_cycle(&graph) {
            let names: Vec<&str> = cycle.iter().map(|&i| stages[i].name.as_str()).collect();
            let mut d = source
                .error_at(&KeyPath::stage(cycle[0]).key("inputs"), Part::Value, format!("the step DAG has a cycle: {} -> {}", names.join(" -> "), names[0]))
                .with_label(format!("`{}` waits on `{}`", names[0], names[names.len() - 1]));
            for &i in &cycle[1..] {
                d = d.with_related(source.span_of(&KeyPath::stage(i).key("inputs"), Part::Value), format!("inputs of `{}`", stages[i].name));
            }
            return Err(d.with_help(Some("a step runs each stage once; break the loop by removing one of these inputs".into())));
        }
        if let Some(e) = type_error {
            return Err(e);
        }
        let order = stable_topological_order(&graph, stages.len());
        Ok(Self { stages, graph, order })
    }

    /// The stages that read `value`.
    pub fn readers(&self, value: ValueRef) -> impl Iterator<Item = usize> + '_ {
        self.graph.edges(NodeIndex::new(value.stage)).filter(move |e| *e.weight() == value).map(|e| self.graph[e.target()])
    }

    /// The seam inside the network (`until` of the `network.forward` stage), if any.
    pub fn network_seam(&self) -> Option<&str> {
        self.stages.iter().find_map(|s| s.until.as_deref())
    }

    /// Splits the DAG at its capture seams; with `capture_enabled` false every stage is eager.
    pub fn plan(&self, capture_enabled: bool) -> Plan {
        plan::plan(self, capture_enabled)
    }

    pub fn name(&self, value: ValueRef) -> String {
        format!("{}.{}", self.stages[value.stage].name, value.output)
    }
}

/// Checks the settings section a kind owns (e.g. `[loss]`): an error points at the key.
fn check_settings(loaded: &LoadedManifest, settings: &libreyolo_stages::stage::Settings) -> Result<(), Diagnostic> {
    let table = toml::Table::try_from(&loaded.manifest).expect("the manifest serializes");
    let section = table.get(settings.section).and_then(|v| v.as_table()).cloned().unwrap_or_default();
    (settings.check)(&section).map_err(|e| {
        let at = if e.key.is_empty() { KeyPath::root().key(settings.section) } else { KeyPath::dotted(&format!("{}.{}", settings.section, e.key)) };
        let part = if e.message.contains("unknown field") { Part::Key } else { Part::Value };
        loaded.source.error_at(&at, part, format!("[{}] {}", settings.section, e.message)).with_help(e.help)
    })
}

/// Checks stage `i`'s `until = "LAYER"`: a `network.forward` stage, a layer of
/// `model.layers` of the main branch, before every detection head, and no layer after it reading
/// the images (the part after the seam starts from the activations that cross it).
fn check_until(loaded: &LoadedManifest, i: usize, kind: &Kind, layer: &str) -> Result<(), Diagnostic> {
    let source = &loaded.source;
    let at = KeyPath::stage(i).key("until");
    let stage = &loaded.manifest.stages[i].name;
    if kind.autodiff != Autodiff::Forward {
        let kind = kind.name;
        return Err(source
            .error_at(&at, Part::Key, format!("stage `{stage}` (kind `{kind}`) takes no `until`"))
            .with_label("only `network.forward` stages are cut inside the network"));
    }
    let layers = &loaded.manifest.model.layers;
    let Some(seam) = layers.iter().position(|l| l.name == layer) else {
        return Err(source
            .error_at(&at, Part::Value, format!("stage `{stage}` cuts the network after `{layer}`, but `model.layers` has no layer of that name"))
            .with_label("unknown layer")
            .with_help(suggestion(layer, layers.iter().map(|l| l.name.as_str()))));
    };
    let reads_images = |l: &libreyolo_families::LayerSpec| match &l.from {
        libreyolo_families::topology::Sources::One(s) => s == libreyolo_families::topology::INPUT,
        libreyolo_families::topology::Sources::Many(v) => v.iter().any(|s| s == libreyolo_families::topology::INPUT),
        libreyolo_families::topology::Sources::Previous => false,
    };
    let why = if layers[seam].aux {
        Some("it is a layer of the PGI auxiliary branch, which runs only in training with `aux_weight > 0`".to_string())
    } else if let Some(head) = layers[..=seam].iter().find(|l| libreyolo_families::registry::BLOCKS.iter().any(|k| k.head && k.name == l.block)) {
        Some(format!("the detection head `{}` comes before it: the seam must come before every head, whose maps the eager loss reads", head.name))
    } else {
        layers[seam + 1..].iter().find(|l| reads_images(l)).map(|l| format!("layer `{}` after it reads the images", l.name))
    };
    match why {
        Some(why) => Err(source.error_at(&at, Part::Value, format!("stage `{stage}` cannot cut the network after `{layer}`: {why}")).with_label("not a seam")),
        None => Ok(()),
    }
}

fn resolve_input(
    loaded: &LoadedManifest,
    registry: &Registry,
    by_name: &HashMap<&str, usize>,
    reader: &str,
    reference: &str,
    at: &KeyPath,
) -> Result<ValueRef, Diagnostic> {
    let source = &loaded.source;
    let (stage_name, output) = match reference.split_once('.') {
        Some((s, o)) => (s, Some(o)),
        None => (reference, None),
    };
    let Some(&stage) = by_name.get(stage_name) else {
        let help = did_you_mean(stage_name, by_name.keys().copied()).map(|s| match output {
            Some(o) => format!("did you mean `{s}.{o}`?"),
            None => format!("did you mean `{s}`?"),
        });
        return Err(source
            .error_at(at, Part::Value, format!("stage `{reader}` reads `{reference}`, but no stage is named `{stage_name}`"))
            .with_label("missing input")
            .with_help(help));
    };
    let kind = registry.get(&loaded.manifest.stages[stage].kind).expect("kinds are checked in manifest order");
    let names: Vec<&'static str> = kind.outputs.iter().map(|p| p.name).collect();
    let port = match output {
        Some(o) => names.iter().position(|k| *k == o).ok_or_else(|| {
            source
                .error_at(at, Part::Value, format!("stage `{stage_name}` (kind `{}`) has no output `{o}`", kind.name))
                .with_label(format!("outputs: {}", names.join(", ")))
                .with_help(suggestion(o, names.iter().copied()))
        })?,
        None => match names.as_slice() {
            [_] => 0,
            outputs => {
                return Err(source
                    .error_at(at, Part::Value, format!("`{reference}` is ambiguous: stage `{stage_name}` has several outputs"))
                    .with_label(format!("write one of {}", outputs.iter().map(|o| format!("`{stage_name}.{o}`")).collect::<Vec<_>>().join(", "))));
            }
        },
    };
    let output = names[port];
    if stage_name == reader {
        return Err(source
            .error_at(at, Part::Value, format!("stage `{reader}` reads its own output `{reference}`"))
            .with_label("a stage cannot be its own input"));
    }
    Ok(ValueRef { stage, port, output })
}

/// A cycle as stage indices in order, starting from its first stage in manifest order.
fn find_cycle(graph: &DiGraph<usize, ValueRef>) -> Option<Vec<usize>> {
    let scc = tarjan_scc(graph).into_iter().filter(|c| c.len() > 1).min_by_key(|c| c.iter().map(|n| graph[*n]).min())?;
    let start = *scc.iter().min_by_key(|n| graph[**n])?;
    // Walk edges inside the component until we are back at the start: a depth-first search
    // that keeps its path.
    let mut path = vec![start];
    let mut visited = vec![start];
    fn walk(graph: &DiGraph<usize, ValueRef>, scc: &[NodeIndex], start: NodeIndex, path: &mut Vec<NodeIndex>, visited: &mut Vec<NodeIndex>) -> bool {
        let here = *path.last().unwrap();
        let mut next: Vec<NodeIndex> = graph.neighbors(here).filter(|n| scc.contains(n)).collect();
        next.sort_by_key(|n| graph[*n]);
        for n in next {
            if n == start {
                return true;
            }
            if !visited.contains(&n) {
                visited.push(n);
                path.push(n);
                if walk(graph, scc, start, path, visited) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    walk(graph, &scc, start, &mut path, &mut visited);
    Some(path.into_iter().map(|n| graph[n]).collect())
}

/// Kahn's algorithm, always taking the ready stage that comes first in the manifest, so the
/// order is the manifest's wherever the data flow allows it.
fn stable_topological_order(graph: &DiGraph<usize, ValueRef>, n: usize) -> Vec<usize> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut indegree = vec![0usize; n];
    for e in graph.edge_references() {
        indegree[graph[e.target()]] += 1;
    }
    let mut ready: BinaryHeap<Reverse<usize>> = (0..n).filter(|&i| indegree[i] == 0).map(Reverse).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(Reverse(i)) = ready.pop() {
        order.push(i);
        for e in graph.edges(NodeIndex::new(i)) {
            let t = graph[e.target()];
            indegree[t] -= 1;
            if indegree[t] == 0 {
                ready.push(Reverse(t));
            }
        }
    }
    order
}
