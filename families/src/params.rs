//! Named parameters and buffers, in the order of LibreYOLO's `state_dict`.
//!
//! The network does not own its tensors: blocks hold `ParamId`s into one `ParamStore`. The
//! engine can then update every tensor in place (optimizer, EMA, BatchNorm statistics), which
//! CUDA-graph replay requires, and save or load them under LibreYOLO's key names.

use burn::tensor::{Device, Tensor, TensorData};

use crate::tensor::AnyTensor;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// What a tensor is for: the optimizer's parameter groups and the EMA are chosen by role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Conv or linear weight (weight decay applies).
    Weight,
    /// Conv or linear bias (no weight decay).
    Bias,
    /// BatchNorm scale (no weight decay).
    BnWeight,
    /// BatchNorm shift (no weight decay).
    BnBias,
    /// LayerNorm / GroupNorm scale (no weight decay).
    NormWeight,
    /// LayerNorm / GroupNorm shift (no weight decay).
    NormBias,
    /// A learned embedding (queries, positions; weight decay applies).
    Embedding,
    /// BatchNorm running mean (a buffer: no gradient).
    RunningMean,
    /// BatchNorm running variance (a buffer: no gradient).
    RunningVar,
    /// BatchNorm `num_batches_tracked` (an int64 scalar kept on the host).
    BatchCount,
}

impl Role {
    /// Trained by the optimizer.
    pub fn is_trainable(self) -> bool {
        matches!(self, Role::Weight | Role::Bias | Role::BnWeight | Role::BnBias | Role::NormWeight | Role::NormBias | Role::Embedding)
    }

    /// A BatchNorm running statistic: read by inference forwards only (training normalises by
    /// the batch's statistics) and written by the backward's fold.
    pub fn is_running_statistic(self) -> bool {
        matches!(self, Role::RunningMean | Role::RunningVar)
    }

    /// Weight decay applies to it (LibreYOLO's parameter groups: weights, not biases or norms).
    pub fn decays(self) -> bool {
        matches!(self, Role::Weight | Role::Embedding)
    }
}

/// How a weight matrix starts: PyTorch's initialisers a transformer family uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Init {
    /// `nn.Linear`'s default: U(-1/sqrt(in), 1/sqrt(in)).
    Torch,
    /// `xavier_uniform_`: U(-a, a), a = sqrt(6 / (in + out)).
    Xavier,
    /// `constant_(w, 0)`.
    Zeros,
}

/// A stored value.
#[derive(Debug, Clone)]
pub enum Value {
    /// A float tensor of any rank: conv weights `[out, in/groups, kh, kw]`, linear weights
    /// `[out, in]`, embeddings, vectors.
    Float(AnyTensor),
    /// `num_batches_tracked`.
    Count(i64),
}

impl Value {
    pub fn shape(&self) -> Vec<usize> {
        match self {
            Value::Float(t) => t.dims(),
            Value::Count(_) => vec![],
        }
    }

    /// The tensor as a flat vector (a view, no copy); `None` for a count.
    pub fn flat(&self) -> Option<Tensor<1>> {
        match self {
            Value::Float(t) => Some(t.flat()),
            Value::Count(_) => None,
        }
    }

    /// The float tensor, `None` for a count.
    pub fn float(&self) -> Option<&AnyTensor> {
        match self {
            Value::Float(t) => Some(t),
            Value::Count(_) => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Entry {
    pub name: String,
    pub role: Role,
    pub value: Value,
    /// Not trained although its role is (`model.freeze`, torch's `requires_grad = False`): no
    /// gradient, no update.
    pub frozen: bool,
}

impl Entry {
    /// Whether training computes its gradient and updates it.
    pub fn trains(&self) -> bool {
        self.role.is_trainable() && !self.frozen
    }
}

/// A float tensor of a store, borrowed mutably (to snapshot and restore state in place).
pub type TensorMut<'a> = &'a mut AnyTensor;

/// Index of an entry in a `ParamStore`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ParamId(pub usize);

/// All tensors of a network, in state-dict order.
#[derive(Debug, Clone, Default)]
pub struct ParamStore {
    entries: Vec<Entry>,
    /// Updates copy their result into each tensor's own buffer ([`update_in_place`](crate::tensor::update_in_place)).
    stable_buffers: bool,
}

impl ParamStore {
    /// Whether updates keep every tensor in its own buffer (a captured whole step needs it).
    pub fn stable_buffers(&self) -> bool {
        self.stable_buffers
    }

    pub fn set_stable_buffers(&mut self, on: bool) {
        self.stable_buffers = on;
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn entry(&self, id: ParamId) -> &Entry {
        &self.entries[id.0]
    }

    pub fn entry_mut(&mut self, id: ParamId) -> &mut Entry {
        &mut self.entries[id.0]
    }

    /// Replaces the value of `id` by `f(value)`, the value moved in.
    pub fn map_value(&mut self, id: ParamId, f: impl FnOnce(Value) -> Value) {
        let value = &mut self.entries[id.0].value;
        *value = f(std::mem::replace(value, Value::Count(0)));
    }

    pub fn find(&self, name: &str) -> Option<ParamId> {
        self.entries.iter().position(|e| e.name == name).map(ParamId)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Number of trainable scalars (PyTorch's `sum(p.numel() for p in parameters())`).
    pub fn num_parameters(&self) -> usize {
        self.entries.iter().filter(|e| e.role.is_trainable()).map(|e| e.value.shape().iter().product::<usize>()).sum()
    }

    fn push(&mut self, name: String, role: Role, value: Value) -> ParamId {
        self.entries.push(Entry { name, role, value, frozen: false });
        ParamId(self.entries.len() - 1)
    }

    pub fn rank4(&self, id: ParamId) -> &Tensor<4> {
        match &self.entries[id.0].value {
            Value::Float(AnyTensor::R4(t)) => t,
            _ => panic!("{} is not a rank-4 tensor", self.entries[id.0].name),
        }
    }

    pub fn rank1(&self, id: ParamId) -> &Tensor<1> {
        match &self.entries[id.0].value {
            Value::Float(AnyTensor::R1(t)) => t,
            _ => panic!("{} is not a rank-1 tensor", self.entries[id.0].name),
        }
    }

    /// Every float tensor, mutably, in store order.
    pub fn tensors_mut(&mut self) -> Vec<TensorMut<'_>> {
        self.tensors_mut_where(|_| true)
    }

    /// The trainable tensors (what an optimizer step writes), in state-dict order.
    pub fn trainable_tensors_mut(&mut self) -> Vec<TensorMut<'_>> {
        self.tensors_mut_where(|e| e.trains())
    }

    /// Freezes every trainable parameter whose name `matches` (see [`Entry::frozen`]); how many.
    pub fn freeze(&mut self, matches: impl Fn(&str) -> bool) -> usize {
        let mut n = 0;
        for e in self.entries.iter_mut().filter(|e| e.role.is_trainable() && matches(&e.name)) {
            e.frozen = true;
            n += 1;
        }
        n
    }

    /// The tensors of the roles `which` accepts, in state-dict order.
    pub fn tensors_mut_of(&mut self, which: impl Fn(Role) -> bool) -> Vec<TensorMut<'_>> {
        self.tensors_mut_where(|e| which(e.role))
    }

    /// The names of the tensors [`tensors_mut_of`](Self::tensors_mut_of) visits, in its order
    /// (diagnostics that name state tensors).
    pub fn names_of(&self, which: impl Fn(Role) -> bool) -> Vec<String> {
        self.entries.iter().filter(|e| which(e.role) && e.value.float().is_some()).map(|e| e.name.clone()).collect()
    }

    /// The tensors of the entries `keep` accepts, in state-dict order.
    fn tensors_mut_where(&mut self, keep: impl Fn(&Entry) -> bool) -> Vec<TensorMut<'_>> {
        self.entries
            .iter_mut()
            .filter(|e| keep(e))
            .filter_map(|e| match &mut e.value {
                Value::Float(t) => Some(t),
                Value::Count(_) => None,
            })
            .collect()
    }

    /// Moves every tensor to `device`.
    pub fn to_device(&mut self, device: &Device) {
        for e in &mut self.entries {
            if let Value::Float(t) = &mut e.value {
                *t = t.to_device(device);
            }
        }
    }
}

/// Builds a `ParamStore` while blocks are constructed, naming entries by path like candle's
/// `VarBuilder`: `b.pp("cv1").pp("conv")` creates `...cv1.conv.weight`.
pub struct Builder<'a> {
    store: &'a mut ParamStore,
    rng: &'a mut StdRng,
    device: Device,
    prefix: String,
}

/// The state of a fresh build: a store and the RNG for PyTorch-style initialisation.
pub struct BuildState {
    pub store: ParamStore,
    pub rng: StdRng,
}

impl BuildState {
    pub fn new(seed: u64) -> Self {
        Self { store: ParamStore::default(), rng: StdRng::seed_from_u64(seed) }
    }

    pub fn builder(&mut self, device: &Device) -> Builder<'_> {
        Builder { store: &mut self.store, rng: &mut self.rng, device: device.clone(), prefix: String::new() }
    }
}

impl Builder<'_> {
    /// A builder whose names are prefixed with `name.`.
    pub fn pp(&mut self, name: impl std::fmt::Display) -> Builder<'_> {
        let prefix = if self.prefix.is_empty() { name.to_string() } else { format!("{}.{name}", self.prefix) };
        Builder { store: self.store, rng: self.rng, device: self.device.clone(), prefix }
    }

    /// The names of the entries made since the store held `start` of them.
    pub fn names_since(&self, start: usize) -> impl Iterator<Item = &str> {
        self.store.entries[start..].iter().map(|e| e.name.as_str())
    }

    /// How many entries the store holds.
    pub fn len(&self) -> usize {
        self.store.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.store.entries.is_empty()
    }

    fn key(&self, leaf: &str) -> String {
        if self.prefix.is_empty() { leaf.to_string() } else { format!("{}.{leaf}", self.prefix) }
    }

    /// A conv weight with PyTorch's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    pub fn conv_weight(&mut self, out: usize, in_per_group: usize, k: usize) -> ParamId {
        let fan_in = in_per_group * k * k;
        let values = self.uniform(out * fan_in, 1.0 / (fan_in as f32).sqrt());
        let t = Tensor::<4>::from_data(TensorData::new(values, [out, in_per_group, k, k]), &self.device);
        self.store.push(self.key("weight"), Role::Weight, Value::Float(AnyTensor::R4(t)))
    }

    /// A conv bias with PyTorch's default init (same bound as its weight).
    pub fn conv_bias(&mut self, out: usize, fan_in: usize) -> ParamId {
        let values = self.uniform(out, 1.0 / (fan_in as f32).sqrt());
        self.vector("bias", Role::Bias, values)
    }

    /// A vector filled with `value`.
    pub fn constant(&mut self, leaf: &str, role: Role, len: usize, value: f32) -> ParamId {
        self.vector(leaf, role, vec![value; len])
    }

    pub fn count(&mut self, leaf: &str) -> ParamId {
        self.store.push(self.key(leaf), Role::BatchCount, Value::Count(0))
    }

    fn vector(&mut self, leaf: &str, role: Role, values: Vec<f32>) -> ParamId {
        let len = values.len();
        let t = Tensor::<1>::from_data(TensorData::new(values, [len]), &self.device);
        self.store.push(self.key(leaf), role, Value::Float(AnyTensor::R1(t)))
    }

    /// A linear weight `[out, in]` with PyTorch's default init: U(-1/sqrt(in), 1/sqrt(in)).
    pub fn linear_weight(&mut self, out: usize, input: usize) -> ParamId {
        self.matrix("weight", out, input, Init::Torch)
    }

    /// A weight matrix `[out, in]` named `leaf` (`in_proj_weight` of an attention), started by
    /// `init`.
    pub fn matrix(&mut self, leaf: &str, out: usize, input: usize, init: Init) -> ParamId {
        let values = match init {
            Init::Torch => self.uniform(out * input, 1.0 / (input as f32).sqrt()),
            Init::Xavier => self.uniform(out * input, (6.0 / (input + out) as f32).sqrt()),
            Init::Zeros => vec![0.0; out * input],
        };
        let t = Tensor::<2>::from_data(TensorData::new(values, [out, input]), &self.device);
        self.store.push(self.key(leaf), Role::Weight, Value::Float(AnyTensor::R2(t)))
    }

    /// A vector named `leaf` holding `values` (a bias a family initialises itself).
    pub fn values(&mut self, leaf: &str, role: Role, values: Vec<f32>) -> ParamId {
        self.vector(leaf, role, values)
    }

    /// A linear bias with PyTorch's default init (the bound of its weight).
    pub fn linear_bias(&mut self, out: usize, input: usize) -> ParamId {
        let values = self.uniform(out, 1.0 / (input as f32).sqrt());
        self.vector("bias", Role::Bias, values)
    }

    /// A LayerNorm's scale (ones) and shift (zeros), as PyTorch initialises them.
    pub fn norm(&mut self, channels: usize) -> (ParamId, ParamId) {
        (self.constant("weight", Role::NormWeight, channels, 1.0), self.constant("bias", Role::NormBias, channels, 0.0))
    }

    /// An embedding `[n, dim]` with PyTorch's default init, N(0, 1) (Box-Muller on this
    /// builder's RNG).
    pub fn embedding(&mut self, leaf: &str, n: usize, dim: usize) -> ParamId {
        self.embedding_padded(leaf, n, dim, None)
    }

    /// An embedding whose row `padding` starts at zero, as `nn.Embedding(padding_idx=...)`.
    pub fn embedding_padded(&mut self, leaf: &str, n: usize, dim: usize, padding: Option<usize>) -> ParamId {
        let mut values: Vec<f32> = (0..n * dim)
            .map(|_| {
                let (u1, u2) = (self.rng.random_range(f32::EPSILON..1.0), self.rng.random_range(0.0..1.0f32));
                (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
            })
            .collect();
        if let Some(row) = padding {
            values[row * dim..(row + 1) * dim].fill(0.0);
        }
        let t = Tensor::<2>::from_data(TensorData::new(values, [n, dim]), &self.device);
        self.store.push(self.key(leaf), Role::Embedding, Value::Float(AnyTensor::R2(t)))
    }

    /// A seed drawn from this builder's RNG, for a layer that draws at run time (DETR's
    /// denoising noise): runs built with one seed draw the same.
    pub fn seed(&mut self) -> u64 {
        self.rng.random()
    }

    fn uniform(&mut self, n: usize, bound: f32) -> Vec<f32> {
        (0..n).map(|_| self.rng.random_range(-bound..bound)).collect()
    }
}

impl ParamStore {
    /// Casts every float tensor to `dtype` (mixed-precision working copies, benchmarks).
    pub fn cast(&mut self, dtype: burn::tensor::FloatDType) {
        for e in &mut self.entries {
            if let Value::Float(t) = &mut e.value {
                *t = t.cast(dtype);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Tensor};

    use super::*;
    use crate::ctx::Ctx;

    /// A transformer family's parameters: a linear weight `[out, in]` and bias, a LayerNorm's
    /// scale and shift, an embedding table. Each is trainable with its role's decay, takes a
    /// gradient through a training context, and round-trips through a safetensors file.
    #[test]
    fn linear_norm_and_embedding_parameters_train_and_round_trip() {
        let device = Device::flex();
        let mut state = BuildState::new(7);
        let mut b = state.builder(&device);
        let (w, bias) = {
            let mut l = b.pp("proj");
            (l.linear_weight(3, 4), l.linear_bias(3, 4))
        };
        let (gamma, beta) = b.pp("norm").norm(3);
        let table = b.pp("queries").embedding("weight", 5, 4);
        let store = state.store;
        assert_eq!(store.entry(w).value.shape(), vec![3, 4]);
        assert_eq!(store.entry(table).value.shape(), vec![5, 4]);
        assert!([w, bias, gamma, beta, table].iter().all(|&id| store.entry(id).role.is_trainable()));
        assert_eq!([w, bias, gamma, beta, table].map(|id| store.entry(id).role.decays()), [true, false, false, false, true]);
        assert_eq!(store.num_parameters(), 12 + 3 + 3 + 3 + 20);

        // y = norm-free affine of (queries @ W^T + b): every parameter reaches the loss.
        let cx = Ctx::train(&store);
        let y = cx.rank2(table).matmul(cx.rank2(w).transpose()).add(cx.rank1(bias).unsqueeze::<2>());
        let y = y.mul(cx.rank1(gamma).unsqueeze::<2>()).add(cx.rank1(beta).unsqueeze::<2>());
        let grads = cx.gradients(&y.sum().backward());
        let ids: Vec<usize> = grads.iter().map(|(id, _)| id.0).collect();
        assert_eq!(ids, vec![w.0, bias.0, gamma.0, beta.0, table.0]);
        assert_eq!(grads[0].1.dims(), [12], "a rank-2 gradient comes back flat");
        // d(sum y)/d beta = the number of rows.
        let dbeta = grads[3].1.clone().into_data().convert::<f32>().try_into_vec::<f32>().unwrap();
        assert_eq!(dbeta, vec![5.0; 3]);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.safetensors");
        crate::weights::write(&path, crate::weights::owned(&store, ""), None).unwrap();
        let mut fresh = BuildState::new(8);
        let mut b = fresh.builder(&device);
        {
            let mut l = b.pp("proj");
            l.linear_weight(3, 4);
            l.linear_bias(3, 4);
        }
        b.pp("norm").norm(3);
        b.pp("queries").embedding("weight", 5, 4);
        let mut loaded = fresh.store;
        crate::weights::load_prefixed(&mut loaded, &path, "", false).unwrap();
        let flat = |s: &ParamStore, id: ParamId| s.entry(id).value.flat().unwrap().into_data().convert::<f32>().try_into_vec::<f32>().unwrap();
        for id in [w, bias, table] {
            assert_eq!(flat(&loaded, id), flat(&store, id));
        }
        assert_eq!(loaded.entry(table).value.shape(), vec![5, 4]);
        let _ = Tensor::<1>::zeros([1], &device);
    }
}
