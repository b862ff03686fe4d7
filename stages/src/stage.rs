//! What a stage of the step DAG is to the engine: a [`Kind`] (its ports, whether it can run
//! inside a captured graph, how it relates to autodiff, how it is built) and the [`Stage`] it
//! builds (what it does each step). The values that flow between stages are [`Value`]s, read
//! and written through [`Io`] by port, in the slots the engine's program assigns to the
//! manifest's `inputs`.
//!
//! A kind is one file under `kinds/`, registered by one line in [`crate::kinds::builtin`].

use std::cell::{RefCell, RefMut};
use std::rc::Rc;

use burn::tensor::{Device, FloatDType, Tensor};
use libreyolo_families::{Ctx, Network, ParamId, ParamStore};

use crate::data::Batch;
use crate::ema::{DecayScalars, Ema};
use crate::loss_scale::LossScale;
use crate::optim::{Optimizer, Scalars};
use crate::schedule::Schedule;

/// The type of a value on a port: the DAG checks that every input reads a value of its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    /// A batch on the host, as the loader assembled it.
    Batch,
    /// A device tensor (images, targets).
    Tensor,
    /// Differentiable device tensors (a network's outputs): autodiff follows them.
    Activations,
    /// A differentiable scalar objective with its named parts ([`LossTerms`]).
    Loss,
    /// One gradient per trainable parameter.
    Grads,
    /// Nothing but an ordering: "this stage ran" (parameters updated, EMA updated, ...).
    Event,
    /// A value on the host of the named type ([`HostValue::TY`]), made by an eager stage for
    /// others that run eager (a batch's labels, the layout of its denoising queries): no graph
    /// reads or writes it, so only kinds that cannot be captured take it.
    Host(&'static str),
}

impl Ty {
    pub fn name(self) -> &'static str {
        match self {
            Ty::Batch => "a host batch",
            Ty::Tensor => "a tensor",
            Ty::Activations => "activations",
            Ty::Loss => "a loss",
            Ty::Grads => "gradients",
            Ty::Event => "an event",
            Ty::Host(name) => name,
        }
    }

    /// Whether autodiff follows values of this type.
    pub fn differentiable(self) -> bool {
        matches!(self, Ty::Activations | Ty::Loss)
    }
}

/// A named, typed input or output of a kind.
#[derive(Debug, Clone, Copy)]
pub struct Port {
    pub name: &'static str,
    pub ty: Ty,
    /// An input a stage may leave unconnected (after the required ones).
    pub optional: bool,
}

pub const fn port(name: &'static str, ty: Ty) -> Port {
    Port { name, ty, optional: false }
}

/// An input a manifest may leave out: `inputs` lists it or not, after the required ones.
pub const fn optional(name: &'static str, ty: Ty) -> Port {
    Port { name, ty, optional: true }
}

/// How a kind takes part in the step's autodiff. The engine's program places the backward:
/// a [`Autodiff::Backward`] stage becomes one vector-Jacobian product per part of the step that
/// ran in one way (one graph, or eager), so a seam can fall between a forward and its backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Autodiff {
    /// Reads and writes no differentiable value.
    None,
    /// Makes differentiable outputs from the parameters (a network's forward): it keeps its
    /// [`Ctx`] on the [`Tape`].
    Forward,
    /// Differentiable outputs from differentiable inputs (a loss).
    Through,
    /// Differentiates a [`Ty::Loss`] into [`Ty::Grads`].
    Backward,
}

/// Why a kind cannot run inside a graph under data parallelism (it runs a collective), if so.
pub type Collective = fn(&Parallel) -> Option<&'static str>;

/// The settings section a kind owns in the manifest (e.g. `[loss]`): checked when the manifest
/// is loaded, so a wrong key is an error at its line.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub section: &'static str,
    /// Its keys (for `key=value` overrides and suggestions).
    pub keys: &'static [&'static str],
    /// Parses the section; the error names the key (`box_gain`) and says what is wrong.
    pub check: fn(&toml::Table) -> Result<(), SettingsError>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsError {
    /// The key inside the section (`box_gain`, `assigner.topk`), empty for the section itself.
    pub key: String,
    pub message: String,
    pub help: Option<String>,
}

impl SettingsError {
    /// `table` as the settings `T` of kind `kind`, whose keys are `keys`: an unknown key is
    /// named with the kind's keys as help, any other error at its key path.
    pub fn parse<T: serde::de::DeserializeOwned>(table: &toml::Table, kind: &str, keys: &[&str]) -> Result<T, SettingsError> {
        serde_path_to_error::deserialize(toml::Value::Table(table.clone())).map_err(|e| {
            let message = e.inner().message().to_string();
            let mut key = e.path().to_string();
            if let Some(field) = message.strip_prefix("unknown field `").and_then(|m| m.split('`').next()) {
                key = field.to_string();
            }
            let help = message.contains("unknown field").then(|| format!("`{kind}` takes: {}", keys.join(", ")));
            SettingsError { key: if key == "." { String::new() } else { key }, message, help }
        })
    }
}

/// A stage kind: what a manifest's `kind = "..."` names.
pub struct Kind {
    pub name: &'static str,
    pub summary: &'static str,
    /// Input ports, bound in order to the stage's `inputs`.
    pub inputs: &'static [Port],
    /// Values other stages can read as `stage.output`.
    pub outputs: &'static [Port],
    /// `None` when the stage can be captured; otherwise why it cannot.
    pub not_capturable: Option<&'static str>,
    pub autodiff: Autodiff,
    /// Under data parallelism, why the stage cannot be captured (a collective inside it).
    pub collective: Collective,
    /// Run events after which the kind computes something else (`mosaic_close`: YOLOX's loss
    /// adds its L1 term), so graphs holding it are captured again: a stage re-captures on
    /// these and on any its manifest `[[stage]]` lists.
    pub recapture_on: &'static [&'static str],
    pub settings: Option<Settings>,
    /// Builds the stage of a run.
    pub build: fn(&Build<'_>) -> anyhow::Result<Rc<dyn Stage>>,
}

impl std::fmt::Debug for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kind").field("name", &self.name).finish_non_exhaustive()
    }
}

impl Kind {
    pub fn capturable(&self) -> bool {
        self.not_capturable.is_none()
    }
}

/// No collective in this kind.
pub fn no_collective(_: &Parallel) -> Option<&'static str> {
    None
}

/// What a stage does each step. Every method takes `&self`: a captured graph's closure holds
/// the stage while the trainer calls `prepare` and `finish` around its replays.
pub trait Stage {
    /// Host work before the step's device work, outside any graph (e.g. this step's learning
    /// rate written into its device buffer).
    fn prepare(&self, _step: &StepInfo) {}
    /// The device work: reads the inputs, writes the outputs. Inside a captured segment this is
    /// what a graph records, so it reads nothing back to the host and allocates from the
    /// values it is given.
    fn run(&self, io: &mut Io<'_>) -> anyhow::Result<()>;
    /// Host bookkeeping after the step's device work (counters).
    fn finish(&self, _step: &StepInfo) {}
    /// Every device tensor this stage writes in place (to snapshot and restore around a
    /// capture's warm-up runs), in a fixed order.
    fn state(&self, _visit: &mut dyn FnMut(StateMut<'_>)) {}
    /// The names of [`state`](Self::state)'s tensors, in its order, for diagnostics (a refused
    /// capture names the tensors its replay moved differently); empty where unnamed.
    fn state_names(&self) -> Vec<String> {
        vec![]
    }
}

/// A state tensor, borrowed mutably: one of the store's, or an optimizer's or loss scale's
/// vector.
pub enum StateMut<'a> {
    Any(&'a mut AnyTensor),
    Vector(&'a mut Tensor<1>),
}

/// Where a step is.
#[derive(Debug, Clone, Copy, Default)]
pub struct StepInfo {
    /// Optimizer steps taken before this one.
    pub iteration: usize,
    /// This micro-batch closes a gradient-accumulation window (always, without accumulation).
    pub last_micro: bool,
    /// The run is in its last `augment.no_aug_epochs` epochs (mosaic closed; YOLOX's loss adds
    /// its L1 term). A stage whose computation this changes lists `mosaic_close` in its kind's
    /// `recapture_on`, so its graphs are captured again.
    pub mosaic_closed: bool,
}

pub use libreyolo_families::tensor::AnyTensor;

/// A loss: the differentiable total and its named parts (detached, for logging), LibreYOLO's
/// `box_loss`, `dfl_loss`, ... in the order the progress bar shows them.
#[derive(Debug, Clone)]
pub struct LossTerms {
    pub total: Tensor<1>,
    pub parts: Vec<(&'static str, Tensor<1>)>,
}

impl LossTerms {
    pub fn names(&self) -> Vec<&'static str> {
        self.parts.iter().map(|(n, _)| *n).collect()
    }

    /// The part called `name`.
    pub fn part(&self, name: &str) -> Option<&Tensor<1>> {
        self.parts.iter().find(|(n, _)| *n == name).map(|(_, t)| t)
    }
}

/// Differentiable device tensors, in groups (e.g. a detector's main head, then its auxiliary
/// head).
#[derive(Debug, Clone)]
pub struct Activations {
    pub groups: Vec<Vec<AnyTensor>>,
}

impl Activations {
    pub fn flat(&self) -> Vec<AnyTensor> {
        self.groups.iter().flatten().cloned().collect()
    }

    /// The same grouping over `tensors` (as [`flat`](Self::flat) lists them).
    pub fn regroup(&self, tensors: Vec<AnyTensor>) -> Activations {
        let mut it = tensors.into_iter();
        Activations { groups: self.groups.iter().map(|g| it.by_ref().take(g.len()).collect()).collect() }
    }

    /// The rank-4 tensors of group `i` (a detector's maps).
    pub fn maps(&self, i: usize) -> Vec<Tensor<4>> {
        self.groups
            .get(i)
            .into_iter()
            .flatten()
            .map(|t| match t {
                AnyTensor::R4(t) => t.clone(),
                other => panic!("expected a rank-4 map, got {:?}", other.dims()),
            })
            .collect()
    }
}

pub type Grads = Vec<(ParamId, Tensor<1>)>;

/// A type that travels between stages on the host ([`Ty::Host`]).
pub trait HostValue: std::any::Any {
    /// Its name in port types and errors (`host labels`).
    const TY: &'static str;
}

/// A host value on the board: its type's name and the value, shared.
#[derive(Clone)]
pub struct Host {
    ty: &'static str,
    value: Rc<dyn std::any::Any>,
}

impl Host {
    pub fn new<T: HostValue>(value: T) -> Self {
        Self { ty: T::TY, value: Rc::new(value) }
    }

    /// The value as a `T`, `None` when it is another type.
    pub fn get<T: HostValue>(&self) -> Option<Rc<T>> {
        self.value.clone().downcast::<T>().ok()
    }
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Host({})", self.ty)
    }
}

/// A value between stages.
#[derive(Debug, Clone)]
pub enum Value {
    Batch(Rc<Batch>),
    Tensor(AnyTensor),
    Activations(Activations),
    Loss(LossTerms),
    Grads(Grads),
    /// Tensors without a port type of their own: the upstream gradients of a value's
    /// differentiable tensors ([`Value::differentiable`] order).
    Tensors(Vec<AnyTensor>),
    Event,
    Host(Host),
}

impl Value {
    pub fn ty(&self) -> Ty {
        match self {
            Value::Batch(_) => Ty::Batch,
            Value::Tensor(_) => Ty::Tensor,
            Value::Activations(_) => Ty::Activations,
            Value::Loss(_) => Ty::Loss,
            Value::Grads(_) => Ty::Grads,
            Value::Tensors(_) => Ty::Tensor,
            Value::Event => Ty::Event,
            Value::Host(h) => Ty::Host(h.ty),
        }
    }

    /// Its device tensors, in a fixed order (what a graph reads or writes of it).
    pub fn tensors(&self) -> Vec<AnyTensor> {
        match self {
            Value::Batch(_) | Value::Event | Value::Host(_) => vec![],
            Value::Tensor(t) => vec![t.clone()],
            Value::Activations(a) => a.flat(),
            Value::Loss(l) => std::iter::once(&l.total).chain(l.parts.iter().map(|(_, t)| t)).map(|t| AnyTensor::R1(t.clone())).collect(),
            Value::Grads(g) => g.iter().map(|(_, t)| AnyTensor::R1(t.clone())).collect(),
            Value::Tensors(t) => t.clone(),
        }
    }

    /// The same value with each tensor replaced by `f` of it, the tensors moved (no handle is
    /// cloned: a buffer owned by this value stays uniquely owned).
    pub fn try_map_tensors<E>(self, mut f: impl FnMut(AnyTensor) -> Result<AnyTensor, E>) -> Result<Value, E> {
        fn r1(t: AnyTensor) -> Tensor<1> {
            match t {
                AnyTensor::R1(t) => t,
                other => panic!("expected a rank-1 tensor, got {:?}", other.dims()),
            }
        }
        Ok(match self {
            Value::Batch(_) | Value::Event | Value::Host(_) => self,
            Value::Tensor(t) => Value::Tensor(f(t)?),
            Value::Activations(a) => Value::Activations(Activations {
                groups: a.groups.into_iter().map(|g| g.into_iter().map(&mut f).collect::<Result<_, E>>()).collect::<Result<_, E>>()?,
            }),
            Value::Loss(l) => {
                let total = r1(f(AnyTensor::R1(l.total))?);
                let parts = l.parts.into_iter().map(|(n, t)| Ok((n, r1(f(AnyTensor::R1(t))?)))).collect::<Result<_, E>>()?;
                Value::Loss(LossTerms { total, parts })
            }
            Value::Grads(g) => Value::Grads(g.into_iter().map(|(id, t)| Ok((id, r1(f(AnyTensor::R1(t))?)))).collect::<Result<_, E>>()?),
            Value::Tensors(v) => Value::Tensors(v.into_iter().map(f).collect::<Result<_, E>>()?),
        })
    }

    /// The tensors autodiff follows: activations, a loss's total.
    pub fn differentiable(&self) -> Vec<AnyTensor> {
        match self {
            Value::Activations(a) => a.flat(),
            Value::Loss(l) => vec![AnyTensor::R1(l.total.clone())],
            _ => vec![],
        }
    }

    /// The same value with other differentiable tensors (as [`differentiable`](Self::differentiable)
    /// lists them), e.g. leaves of a new autodiff graph.
    pub fn with_differentiable(&self, tensors: Vec<AnyTensor>) -> Value {
        match self {
            Value::Activations(a) => Value::Activations(a.regroup(tensors)),
            Value::Loss(l) => match tensors.into_iter().next() {
                Some(AnyTensor::R1(total)) => Value::Loss(LossTerms { total, parts: l.parts.clone() }),
                _ => panic!("a loss's total is one [1] tensor"),
            },
            other => other.clone(),
        }
    }

    /// The same value over other tensors (as [`tensors`](Self::tensors) lists them).
    pub fn with_tensors(&self, tensors: Vec<AnyTensor>) -> Value {
        let r1 = |t: AnyTensor| match t {
            AnyTensor::R1(t) => t,
            other => panic!("expected a rank-1 tensor, got {:?}", other.dims()),
        };
        let mut it = tensors.into_iter();
        match self {
            Value::Batch(_) | Value::Event | Value::Host(_) => self.clone(),
            Value::Tensor(_) => Value::Tensor(it.next().expect("one tensor")),
            Value::Activations(a) => Value::Activations(a.regroup(it.collect())),
            Value::Loss(l) => Value::Loss(LossTerms {
                total: r1(it.next().expect("the total")),
                parts: l.parts.iter().map(|(n, _)| (*n, r1(it.next().expect("a part")))).collect(),
            }),
            Value::Grads(g) => Value::Grads(g.iter().map(|(id, _)| (*id, r1(it.next().expect("a gradient")))).collect()),
            Value::Tensors(_) => Value::Tensors(it.collect()),
        }
    }
}

/// A slot of the step's values: where a port's value lives (assigned by the engine's program).
pub type Slot = usize;

/// The values of one step, by slot.
#[derive(Debug, Clone, Default)]
pub struct Board {
    slots: Vec<Option<Value>>,
}

impl Board {
    pub fn new(slots: usize) -> Self {
        Self { slots: vec![None; slots] }
    }

    pub fn get(&self, slot: Slot) -> Option<&Value> {
        self.slots.get(slot).and_then(Option::as_ref)
    }

    pub fn take(&mut self, slot: Slot) -> Option<Value> {
        self.slots.get_mut(slot).and_then(Option::take)
    }

    pub fn put(&mut self, slot: Slot, value: Value) {
        if slot >= self.slots.len() {
            self.slots.resize(slot + 1, None);
        }
        self.slots[slot] = Some(value);
    }
}

/// The autodiff state of one part of the step that runs one way (a graph, or eager): the
/// forward contexts made in it, the leaves its differentiable inputs became, and its
/// differentiable outputs read elsewhere. The backward of that part consumes it.
#[derive(Default)]
pub struct Tape {
    pub contexts: Vec<Ctx>,
    pub leaves: Vec<(Slot, Vec<AnyTensor>)>,
    pub outputs: Vec<(Slot, Vec<AnyTensor>)>,
}

/// Which part of its stage an item of the program runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Whole,
    /// A forward cut inside the network: the layers up to `layer` (their outputs that cross the
    /// cut go to the second part).
    Until(String),
    /// The layers after `layer`, from the activations that cross the cut.
    From(String),
    /// The backward of one part of the step ([`Tape`]); `objective`: the slot of the loss the
    /// backward stage differentiates, when that part made it.
    Backward {
        objective: Option<Slot>,
    },
}

/// What a stage reads and writes when it runs.
pub struct Io<'a> {
    pub board: &'a mut Board,
    pub inputs: &'a [Slot],
    pub outputs: &'a [Slot],
    pub part: &'a Part,
    /// The part of the step's autodiff this run belongs to.
    pub tape: &'a RefCell<Tape>,
    /// Gradient slots of the differentiable inputs of this part ([`Part::Backward`] writes them,
    /// reads those of its outputs): `(value slot, gradient slot)`.
    pub grad_slots: &'a [(Slot, Slot)],
    /// This run is inside a captured segment (a graph records it, or replays re-run it).
    pub in_graph: bool,
    /// Recorded by a hardware graph (or a software capture standing in for one): an in-place
    /// write to a shared buffer would be lost, so a stage refuses the capture instead.
    pub hardware: bool,
    /// Set by a stage inside a hardware graph that found a state tensor it writes shared.
    pub refused: &'a RefCell<Option<String>>,
    pub step: StepInfo,
}

/// The slot the trainer puts each step's host batch in, for the data stage to take
/// ([`Io::take_batch`]).
pub const BATCH_SLOT: Slot = 0;

impl Io<'_> {
    /// The host batch the trainer put in [`BATCH_SLOT`] for this step
    /// (a data stage's input), taken: owned without a copy unless something else holds it.
    pub fn take_batch(&mut self) -> anyhow::Result<Batch> {
        let Some(Value::Batch(batch)) = self.board.take(BATCH_SLOT) else { anyhow::bail!("the data stage found no batch (it ran twice in one step)") };
        Ok(Rc::try_unwrap(batch).unwrap_or_else(|b| (*b).clone()))
    }

    /// The value on input port `i`.
    pub fn input(&self, i: usize) -> anyhow::Result<&Value> {
        self.board.get(self.inputs[i]).ok_or_else(|| anyhow::anyhow!("input {i} has no value yet (a stage ran before its input)"))
    }

    /// The value on input port `i`, taken (a host batch is moved, not copied).
    pub fn take_input(&mut self, i: usize) -> anyhow::Result<Value> {
        self.board.take(self.inputs[i]).ok_or_else(|| anyhow::anyhow!("input {i} has no value (read twice, or before its stage ran)"))
    }

    /// The tensors on optional input port `i` ([`tensors`](Self::tensors)), `None` when the
    /// manifest left it unconnected.
    pub fn optional_tensors(&self, i: usize) -> anyhow::Result<Option<Vec<AnyTensor>>> {
        if i >= self.inputs.len() {
            return Ok(None);
        }
        self.tensors(i).map(Some)
    }

    pub fn tensor(&self, i: usize) -> anyhow::Result<AnyTensor> {
        match self.input(i)? {
            Value::Tensor(t) => Ok(t.clone()),
            other => anyhow::bail!("input {i} is {}, not a tensor", other.ty().name()),
        }
    }

    /// The tensors of input port `i`: a [`Value::Tensors`] (several tensors on one port), or
    /// one tensor.
    pub fn tensors(&self, i: usize) -> anyhow::Result<Vec<AnyTensor>> {
        match self.input(i)? {
            Value::Tensors(t) => Ok(t.clone()),
            Value::Tensor(t) => Ok(vec![t.clone()]),
            other => anyhow::bail!("input {i} is {}, not tensors", other.ty().name()),
        }
    }

    /// The host value of type `T` on input port `i`.
    pub fn host<T: HostValue>(&self, i: usize) -> anyhow::Result<Rc<T>> {
        match self.input(i)? {
            Value::Host(h) => h.get::<T>().ok_or_else(|| anyhow::anyhow!("input {i} holds {}, not {}", h.ty, T::TY)),
            other => anyhow::bail!("input {i} is {}, not {}", other.ty().name(), T::TY),
        }
    }

    /// The host value of type `T` on optional input port `i`, `None` when unconnected.
    pub fn optional_host<T: HostValue>(&self, i: usize) -> anyhow::Result<Option<Rc<T>>> {
        if i >= self.inputs.len() {
            return Ok(None);
        }
        self.host(i).map(Some)
    }

    pub fn activations(&self, i: usize) -> anyhow::Result<Activations> {
        match self.input(i)? {
            Value::Activations(a) => Ok(a.clone()),
            other => anyhow::bail!("input {i} is {}, not activations", other.ty().name()),
        }
    }

    pub fn loss(&self, i: usize) -> anyhow::Result<LossTerms> {
        match self.input(i)? {
            Value::Loss(l) => Ok(l.clone()),
            other => anyhow::bail!("input {i} is {}, not a loss", other.ty().name()),
        }
    }

    pub fn take_grads(&mut self, i: usize) -> anyhow::Result<Grads> {
        match self.take_input(i)? {
            Value::Grads(g) => Ok(g),
            other => anyhow::bail!("input {i} is {}, not gradients", other.ty().name()),
        }
    }

    /// Writes output port `i`.
    pub fn output(&mut self, i: usize, value: Value) {
        self.board.put(self.outputs[i], value);
    }

    pub fn tape(&self) -> RefMut<'_, Tape> {
        self.tape.borrow_mut()
    }

    /// Notes, inside a hardware graph, that the state tensor `name` is shared, so its in-place
    /// update would not reach the graph: the capture is refused with this reason.
    pub fn refuse(&self, why: String) {
        self.refused.borrow_mut().get_or_insert(why);
    }
}

/// The data-parallel run a stage is part of: its collectives.
pub trait Group {
    /// Every replica's device, `None` when training alone.
    fn devices(&self) -> Option<&[Device]>;
    /// The gradients averaged over the replicas, each in its own buffer.
    fn average_gradients(&self, grads: Grads) -> Grads;
}

/// Training alone.
pub struct Alone;

impl Group for Alone {
    fn devices(&self) -> Option<&[Device]> {
        None
    }
    fn average_gradients(&self, grads: Grads) -> Grads {
        grads
    }
}

/// The data parallelism a capture decision needs.
#[derive(Debug, Clone, Copy)]
pub struct Parallel {
    pub world: usize,
    pub sync_bn: bool,
}

/// The network and its parameters, shared (`Rc`) so a graph can borrow them across replays
/// while the updates write the parameters in place.
#[derive(Clone)]
pub struct Model {
    pub network: Rc<Network>,
    pub params: Rc<RefCell<ParamStore>>,
    pub nc: usize,
    /// The network's training-only branch is built (YOLOv9's PGI).
    pub with_aux: bool,
}

/// The optimizer side of a run: its state, this step's device scalars and the schedule.
#[derive(Clone)]
pub struct Update {
    pub optim: Rc<RefCell<Box<dyn Optimizer>>>,
    pub scalars: Rc<RefCell<Scalars>>,
    pub ema: Option<Rc<RefCell<Ema>>>,
    pub ema_scalars: Rc<RefCell<DecayScalars>>,
    pub schedule: Rc<Schedule>,
    /// Optimizer steps taken (the schedule's position).
    pub iteration: Rc<std::cell::Cell<usize>>,
    /// Micro-batches per optimizer step.
    pub accumulate: usize,
    pub clip_max_norm: f64,
}

/// What a run's stages are built from.
pub struct Build<'a> {
    /// The stage's name in the manifest.
    pub stage: &'a str,
    /// The resolved manifest; a kind reads its own settings section from it.
    pub manifest: &'a toml::Table,
    pub device: Device,
    pub model: Model,
    pub update: Update,
    /// The forward's compute dtype (`None`: f32).
    pub compute: Option<FloatDType>,
    /// fp16's dynamic loss scale.
    pub scaler: Option<Rc<RefCell<LossScale>>>,
    pub group: Rc<dyn Group>,
    pub parallel: Parallel,
}

impl Build<'_> {
    /// The manifest section `name` (empty when absent).
    pub fn section(&self, name: &str) -> toml::Table {
        self.manifest.get(name).and_then(|v| v.as_table()).cloned().unwrap_or_default()
    }
}
