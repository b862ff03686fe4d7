//! What a forward pass reads: the parameters as this step sees them, and whether BatchNorm
//! uses batch statistics (training) or its running statistics (eval).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

use burn::tensor::{DType, Device, FloatDType, Gradients, Tensor};

use crate::params::{ParamId, ParamStore, Value};
use crate::tensor::AnyTensor;

/// A parameter as the forward pass uses it (`None`: a count, or a running statistic in training).
#[derive(Debug, Clone)]
struct Live(Option<AnyTensor>);

macro_rules! live_rank {
    ($name:ident, $variant:ident, $d:literal) => {
        fn $name(&self, id: ParamId) -> Tensor<$d> {
            match &self.0 {
                Some(AnyTensor::$variant(t)) => t.clone(),
                None => panic!("parameter {} has no tensor in this context: a count, or a running statistic, which a training context does not hold", id.0),
                other => panic!("parameter {} is not rank {}: {other:?}", id.0, $d),
            }
        }
    };
}

impl Live {
    live_rank!(rank1, R1, 1);
    live_rank!(rank2, R2, 2);
    live_rank!(rank3, R3, 3);
    live_rank!(rank4, R4, 4);
}

/// Batch statistics of one BatchNorm layer from a training forward, applied to the running
/// statistics afterwards by [`ParamStore::apply_batch_stats`], outside the forward, so that
/// extra forwards (graph-capture warm-up) need not advance them.
#[derive(Debug, Clone)]
pub struct BatchStats {
    pub running_mean: ParamId,
    pub running_var: ParamId,
    pub count: ParamId,
    /// The layer's momentum: `running = (1 - momentum) * running + momentum * batch`.
    pub momentum: f64,
    /// `[rows, C]` f32, detached, no autodiff: the batch mean in row 0 and the biased variance
    /// in row 1 (the fused BatchNorm's statistics tensor as it is).
    pub stats: Tensor<2>,
    /// `n / (n - 1)` for the n values a channel: the biased variance times it is the unbiased one
    /// the running variance follows.
    pub correction: f64,
}

/// One operation of a forward, recorded when tracing: the exact layer shapes of a network, for
/// the op-level benchmark (`bench ops`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TracedOp {
    /// A convolution on `input`; `bn_act` when BatchNorm and SiLU follow (LibreYOLO's Conv).
    Conv {
        input: [usize; 4],
        c_out: usize,
        k: usize,
        stride: usize,
        padding: usize,
        groups: usize,
        bias: bool,
        bn: bool,
        act: bool,
    },
    MaxPool {
        input: [usize; 4],
        k: usize,
        stride: usize,
        padding: usize,
    },
    /// A SiLU that does not follow a Conv block (RepConvN's, after the branch sum).
    Silu {
        input: [usize; 4],
    },
    AvgPool {
        input: [usize; 4],
        k: usize,
        stride: usize,
        padding: usize,
    },
    Upsample {
        input: [usize; 4],
        scale: usize,
    },
    /// Concatenation along channels.
    Concat {
        inputs: Vec<[usize; 4]>,
    },
    /// A gather of `rows` rows from each of `input[0]` `(tokens, channels)` maps and its
    /// backward, a scatter-add of the rows' gradients (one corner of the deformable attention's
    /// bilinear sampling at one level).
    GatherRows {
        input: [usize; 3],
        rows: usize,
    },
}

/// Inference fusion (LibreYOLO's `fuse()`): each Conv-BN as one convolution with a bias, each
/// RepConvN as one 3x3 convolution, folded at first use and kept for the context's life.
#[derive(Default)]
struct Fused {
    convs: HashMap<ParamId, (Tensor<4>, Tensor<1>)>,
    /// The stored parameters the folded convolutions replace.
    replaced: HashSet<ParamId>,
}

/// Forward context.
pub struct Ctx {
    /// What the forward reads (in the compute dtype).
    live: Vec<Live>,
    /// The autodiff leaves (f32 master weights) whose gradients the optimizer uses.
    leaves: Vec<Live>,
    training: bool,
    batch_stats: RefCell<Vec<BatchStats>>,
    /// The operations of the forward, when tracing.
    trace: RefCell<Option<Vec<TracedOp>>>,
    /// The compute dtype the forward reads parameters in (`None`: as stored).
    dtype: Option<FloatDType>,
    /// Folded convolutions, in an inference context ([`eval_fused`](Self::eval_fused)).
    fused: Option<RefCell<Fused>>,
    /// The devices of a data-parallel training run whose BatchNorm statistics are shared
    /// (SyncBatchNorm): every device runs the same forward, and each BatchNorm all-reduces its
    /// sums over them.
    sync_group: Option<Vec<Device>>,
    /// Device tensors a head conditions on in training besides its features, as the forward
    /// stage's extra input gave them (RT-DETR's denoising queries, built on the host from the
    /// labels by an eager stage before the forward, so a captured forward reads them as
    /// inputs).
    head_inputs: Vec<AnyTensor>,
}

impl Ctx {
    /// Eval mode: the stored tensors, BatchNorm on running statistics.
    pub fn eval(store: &ParamStore) -> Self {
        Self::new(store, false, None)
    }

    /// Eval mode computing in `dtype`.
    pub fn eval_in(store: &ParamStore, dtype: FloatDType) -> Self {
        Self::new(store, false, Some(dtype))
    }

    /// Eval mode with inference fusion, computing in `dtype` (`None`: as stored): BatchNorm
    /// folded into its convolution and RepConvN's two branches into one 3x3 convolution, in
    /// f32 at first use, then reused. Build it once per set of weights (e.g. one `predict`
    /// run): the folded tensors do not follow later updates of the store.
    pub fn eval_fused(store: &ParamStore, dtype: Option<FloatDType>) -> Self {
        let mut cx = Self::new(store, false, dtype);
        cx.fused = Some(RefCell::new(Fused::default()));
        cx
    }

    /// Training mode: trainable tensors become autodiff leaves that keep their gradient;
    /// BatchNorm normalises with batch statistics.
    pub fn train(store: &ParamStore) -> Self {
        Self::new(store, true, None)
    }

    /// Training with mixed precision: the leaves stay in the store's dtype (f32 master
    /// weights) and the forward reads them cast to `dtype`; gradients come back in f32.
    pub fn train_in(store: &ParamStore, dtype: FloatDType) -> Self {
        Self::new(store, true, Some(dtype))
    }

    fn new(store: &ParamStore, training: bool, dtype: Option<FloatDType>) -> Self {
        let leaves: Vec<Live> = store
            .entries()
            .iter()
            .map(|e| {
                let track = training && e.trains();
                Live(match &e.value {
                    Value::Float(t) if track => Some(crate::each_rank!(t, x => x.clone().autodiff().require_grad())),
                    // A training forward never reads the running statistics. Held here, their
                    // buffers would be shared for as long as this context's tape lives, so the
                    // fold of another part of the step could not write them in place: inside a
                    // hardware graph that refuses the capture (a seam inside the network, e.g.
                    // `until = "neck.elan_down2"` with the rest of the step captured).
                    Value::Float(_) if training && e.role.is_running_statistic() => None,
                    Value::Float(t) => Some(t.clone()),
                    Value::Count(_) => None,
                })
            })
            .collect();
        let live = leaves.iter().map(|l| Live(l.0.as_ref().map(|t| dtype.map_or_else(|| t.clone(), |d| t.cast(d))))).collect();
        Self { live, leaves, training, batch_stats: RefCell::new(vec![]), trace: RefCell::new(None), dtype, fused: None, sync_group: None, head_inputs: vec![] }
    }

    /// This inference context with its parameters and folded convolutions copied to `device`:
    /// what an exporter runs on a graph-capture device (`Device::capture()`), where tensors
    /// copied in become the graph's constants. Run one forward first, so that the folding is
    /// done here and the copy holds the folded tensors rather than the ops that fold them.
    pub fn copied_to(&self, device: &Device) -> Ctx {
        debug_assert!(!self.training, "an inference context is copied, not a training one");
        let copy = |l: &[Live]| -> Vec<Live> { l.iter().map(|l| Live(l.0.as_ref().map(|t| crate::each_rank!(t, x => x.clone().to_device(device))))).collect() };
        let fused = self.fused.as_ref().map(|f| {
            let f = f.borrow();
            let convs = f.convs.iter().map(|(k, (w, b))| (*k, (w.clone().to_device(device), b.clone().to_device(device)))).collect();
            RefCell::new(Fused { convs, replaced: f.replaced.clone() })
        });
        Self {
            live: copy(&self.live),
            leaves: copy(&self.leaves),
            training: false,
            batch_stats: RefCell::new(vec![]),
            trace: RefCell::new(None),
            dtype: self.dtype,
            fused,
            sync_group: None,
            head_inputs: vec![],
        }
    }

    /// BatchNorm statistics over the whole batch of all `devices` (SyncBatchNorm): each
    /// BatchNorm's per-channel sums are all-reduced (NCCL) in the forward, and their gradients
    /// in the backward. One device (or none) is plain BatchNorm.
    pub fn synced_over(mut self, devices: Vec<Device>) -> Self {
        self.sync_group = (devices.len() > 1).then_some(devices);
        self
    }

    /// The devices BatchNorm statistics are shared over, when synced.
    /// This context with tensors for the head to condition on in training (see the field).
    pub fn with_head_inputs(mut self, tensors: Vec<AnyTensor>) -> Self {
        self.head_inputs = tensors;
        self
    }

    /// The head's extra inputs (empty when the forward was given none).
    pub fn head_inputs(&self) -> &[AnyTensor] {
        &self.head_inputs
    }

    pub fn sync_group(&self) -> Option<&[Device]> {
        self.sync_group.as_deref()
    }

    /// Records the forward's operations (see [`take_trace`](Self::take_trace)).
    pub fn tracing(self) -> Self {
        *self.trace.borrow_mut() = Some(vec![]);
        self
    }

    /// Notes `op` when tracing (a no-op otherwise).
    pub fn trace(&self, op: impl FnOnce() -> TracedOp) {
        if let Some(ops) = self.trace.borrow_mut().as_mut() {
            ops.push(op());
        }
    }

    /// Concatenates along channels (traced).
    pub fn cat(&self, tensors: Vec<Tensor<4>>) -> Tensor<4> {
        self.trace(|| TracedOp::Concat { inputs: tensors.iter().map(|t| t.dims()).collect() });
        Tensor::cat(tensors, 1)
    }

    /// The operations traced so far.
    pub fn take_trace(&self) -> Vec<TracedOp> {
        self.trace.borrow_mut().as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The images as the network's layers read them: in the compute dtype (as given without one).
    pub fn compute_input(&self, images: Tensor<4>) -> Tensor<4> {
        match self.dtype {
            Some(d) => images.cast(d),
            None => images,
        }
    }

    pub fn training(&self) -> bool {
        self.training
    }

    pub fn rank4(&self, id: ParamId) -> Tensor<4> {
        self.live[id.0].rank4(id)
    }

    pub fn rank3(&self, id: ParamId) -> Tensor<3> {
        self.live[id.0].rank3(id)
    }

    pub fn rank2(&self, id: ParamId) -> Tensor<2> {
        self.live[id.0].rank2(id)
    }

    pub fn rank1(&self, id: ParamId) -> Tensor<1> {
        self.live[id.0].rank1(id)
    }

    /// Whether this is an inference context that folds convolutions.
    pub fn fusing(&self) -> bool {
        self.fused.is_some()
    }

    /// A vector parameter as trained, before the compute cast: the f32 master tensor (its
    /// autodiff leaf in training). What mixed precision keeps in f32, as PyTorch's autocast
    /// leaves BatchNorm's affine parameters (their gradients then are not rounded either).
    pub fn master_rank1(&self, id: ParamId) -> Tensor<1> {
        self.leaves[id.0].rank1(id)
    }

    /// A parameter as stored, before the compute cast, in f32: what folding reads (a store
    /// cast to bf16 folds in f32 too, and the folded tensors then match `Tensor::zeros`).
    pub fn stored_rank4(&self, id: ParamId) -> Tensor<4> {
        self.leaves[id.0].rank4(id).cast(FloatDType::F32)
    }

    pub fn stored_rank1(&self, id: ParamId) -> Tensor<1> {
        self.leaves[id.0].rank1(id).cast(FloatDType::F32)
    }

    /// The folded convolution `(weight, bias)` keyed by `key`, made by `fold` (from stored
    /// tensors) at first use and cast to the compute dtype; it replaces `replaced`.
    pub fn fused_conv(&self, key: ParamId, replaced: &[ParamId], fold: impl FnOnce() -> (Tensor<4>, Tensor<1>)) -> (Tensor<4>, Tensor<1>) {
        let fused = self.fused.as_ref().expect("fused_conv in a context that does not fuse");
        if let Some(conv) = fused.borrow().convs.get(&key) {
            return conv.clone();
        }
        let (w, b) = fold();
        // Folded in f32; computed in the context's dtype, or the store's when it has none.
        let dtype = self.dtype.map(DType::from).unwrap_or_else(|| self.leaves[key.0].rank4(key).dtype());
        let conv = (w.cast(dtype), b.cast(dtype));
        let mut fused = fused.borrow_mut();
        fused.replaced.extend(replaced.iter().copied());
        fused.convs.insert(key, conv.clone());
        conv
    }

    /// The parameter count of the fused network once a forward has folded it: LibreYOLO's
    /// count after `fuse()` (the stored parameters not replaced, plus the folded ones).
    pub fn fused_parameters(&self, store: &ParamStore) -> usize {
        let fused = self.fused.as_ref().expect("fused_parameters in a context that does not fuse").borrow();
        let kept: usize = store
            .entries()
            .iter()
            .enumerate()
            .filter(|(i, e)| e.role.is_trainable() && !fused.replaced.contains(&ParamId(*i)))
            .map(|(_, e)| e.value.shape().iter().product::<usize>())
            .sum();
        kept + fused.convs.values().map(|(w, b)| w.shape().num_elements() + b.dims()[0]).sum::<usize>()
    }

    pub(crate) fn record(&self, stats: BatchStats) {
        self.batch_stats.borrow_mut().push(stats);
    }

    /// The BatchNorm statistics gathered by the forward passes so far.
    pub fn take_batch_stats(&self) -> Vec<BatchStats> {
        std::mem::take(&mut self.batch_stats.borrow_mut())
    }

    /// The gradient of every trainable parameter that took part in the loss, flattened.
    pub fn gradients(&self, grads: &Gradients) -> Vec<(ParamId, Tensor<1>)> {
        self.leaves
            .iter()
            .enumerate()
            .filter_map(|(i, l)| {
                let t = l.0.as_ref()?;
                let n = t.num_elements();
                let g = crate::with_rank!(t, x => x.grad(grads).map(|g| g.reshape([n])))?;
                Some((ParamId(i), g))
            })
            .collect()
    }
}

impl ParamStore {
    /// Folds batch statistics into the running statistics in place, with PyTorch's rule:
    /// `running = (1 - momentum) * running + momentum * batch` (unbiased variance, each layer's
    /// momentum), and counts the batch in `num_batches_tracked`.
    pub fn apply_batch_stats(&mut self, stats: Vec<BatchStats>) {
        self.fold_batch_stats(&stats);
        self.count_batches(&stats);
    }

    /// The device half of [`apply_batch_stats`](Self::apply_batch_stats): the running
    /// statistics, in place (what a captured step records), one kernel a layer on the GPU.
    pub fn fold_batch_stats(&mut self, stats: &[BatchStats]) {
        for s in stats {
            let (Some(mean), Some(var)) = (self.take_rank1(s.running_mean), self.take_rank1(s.running_var)) else {
                panic!("BatchNorm running statistics {:?} and {:?} are vectors", s.running_mean, s.running_var);
            };
            let (mean, var) = libreyolo_kernels::in_place::running_stats(mean, var, &s.stats, s.momentum, s.correction);
            self.entry_mut(s.running_mean).value = Value::Float(AnyTensor::R1(mean));
            self.entry_mut(s.running_var).value = Value::Float(AnyTensor::R1(var));
        }
    }

    /// The vector stored at `id`, moved out (so that an in-place update owns its buffer); the
    /// entry is left untouched when it holds anything else.
    fn take_rank1(&mut self, id: ParamId) -> Option<Tensor<1>> {
        let value = &mut self.entry_mut(id).value;
        match std::mem::replace(value, Value::Count(0)) {
            Value::Float(AnyTensor::R1(r)) => Some(r),
            other => {
                *value = other;
                None
            }
        }
    }

    /// The host half: `num_batches_tracked += 1` for each layer of `stats`.
    pub fn count_batches(&mut self, stats: &[BatchStats]) {
        for s in stats {
            if let Value::Count(n) = &mut self.entry_mut(s.count).value {
                *n += 1;
            }
        }
    }
}
