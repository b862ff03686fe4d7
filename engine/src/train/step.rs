//! One training step: the manifest's stages run in DAG order, each reading the values its
//! inputs name and producing its outputs.

use std::cell::RefCell;
use std::rc::Rc;

use burn::tensor::{DType, Device, FloatDType, Int, Tensor, TensorData};
use libreyolo_families::{Ctx, HeadMaps, Network, ParamId, ParamStore};
use libreyolo_stages::data::Batch;
use libreyolo_stages::loss::{LossTerms, Yolo9Loss};

use super::Trainer;
use super::precision::{LossScale, read_finite};

/// Values flowing between the stages of one step.
#[derive(Default)]
pub struct StepValues {
    /// The host batch, until the data stage uploads it.
    pub batch: Option<Batch>,
    pub images: Option<Tensor<4>>,
    pub targets: Option<Tensor<3>>,
    pub ctx: Option<Ctx>,
    pub maps: Option<HeadMaps>,
    pub loss: Option<LossTerms>,
    pub grads: Option<Vec<(ParamId, Tensor<1>)>>,
    /// An optimizer step closed this step (not a gradient-accumulation micro-step): taken, or
    /// skipped by the loss scale; the EMA and the schedule advance either way (LibreYOLO).
    pub stepped: bool,
    /// An eager step's first run on its input shape: its name and the kernels compiled before
    /// it ([`crate::precompile`]), recorded once the step ran.
    pub first_run: Option<(String, u64)>,
}

/// Loss figures read back for logging (weighted terms, LibreYOLO's names).
#[derive(Debug, Clone, Copy, Default)]
pub struct StepLosses {
    pub box_loss: f64,
    pub dfl_loss: f64,
    pub cls_loss: f64,
}

/// One host-to-device copy of a batch, from its own buffers (no host copy), staged where the
/// backend offers it (pinned memory on CUDA); images travel as u8 and become f32 in [0, 1] on
/// the device. (Created without a dtype, an int tensor takes the device's default int type, and
/// burn converts the data on the host first: 4x the bytes, and the staged buffer thrown away.)
pub fn upload(batch: Batch, device: &Device) -> (Tensor<4>, Tensor<3>) {
    let (b, h, w) = (batch.size, batch.height as usize, batch.width as usize);
    let mut images = TensorData::new(batch.images, [b, 3, h, w]);
    let mut targets = TensorData::new(batch.targets, [b, batch.max_labels, 5]);
    device.staging([&mut images, &mut targets].into_iter());
    let images = Tensor::<4, Int>::from_data(images, (device, DType::U8)).float().div_scalar(255.0);
    let targets = Tensor::<3>::from_data(targets, device);
    (images, targets)
}

/// What the forward needs besides the parameters.
#[derive(Clone)]
pub struct ForwardSpec {
    pub compute: Option<FloatDType>,
    pub with_aux: bool,
    /// Every replica's device in a data-parallel run (empty alone): the loss normaliser is
    /// shared over them, and BatchNorm statistics too when `sync_bn`.
    pub replicas: Vec<Device>,
    pub sync_bn: bool,
}

impl ForwardSpec {
    /// The replicas' devices, `None` alone.
    pub fn group(&self) -> Option<&[Device]> {
        (self.replicas.len() > 1).then_some(self.replicas.as_slice())
    }
}

/// The network's training forward: the context (autodiff leaves, BatchNorm batch statistics)
/// and the head maps.
pub fn forward(network: &Network, params: &ParamStore, spec: &ForwardSpec, images: Tensor<4>) -> (Ctx, HeadMaps) {
    let cx = train_ctx(params, spec);
    let maps = network.forward(compute_input(images, spec), &cx, spec.with_aux);
    (cx, maps)
}

/// The images in the forward's compute dtype.
pub fn compute_input(images: Tensor<4>, spec: &ForwardSpec) -> Tensor<4> {
    match spec.compute {
        Some(d) => images.cast(d),
        None => images,
    }
}

/// A training context over `params` for `spec`: autodiff leaves, the compute dtype, and
/// BatchNorm statistics shared over the replicas when `sync_bn`.
pub fn train_ctx(params: &ParamStore, spec: &ForwardSpec) -> Ctx {
    let cx = match spec.compute {
        Some(d) => Ctx::train_in(params, d),
        None => Ctx::train(params),
    };
    if spec.sync_bn { cx.synced_over(spec.replicas.clone()) } else { cx }
}

/// The loss of the main head plus `aux_weight` times the auxiliary head's, in f32.
/// `group`: the replicas of a data-parallel run, which share the normaliser.
pub fn loss(loss: &Yolo9Loss, aux_weight: f64, strides: &[usize], maps: HeadMaps, targets: Tensor<3>, group: Option<&[Device]>) -> LossTerms {
    let f32s = |m: Vec<Tensor<4>>| m.into_iter().map(|t| t.cast(FloatDType::F32)).collect::<Vec<_>>();
    let mut terms = loss.compute_over(&f32s(maps.main), strides, targets.clone(), group);
    if let Some(aux) = maps.aux {
        let a = loss.compute_over(&f32s(aux), strides, targets, group);
        terms.total = terms.total.add(a.total.mul_scalar(aux_weight));
        terms.box_loss = terms.box_loss.add(a.box_loss.mul_scalar(aux_weight));
        terms.dfl_loss = terms.dfl_loss.add(a.dfl_loss.mul_scalar(aux_weight));
        terms.cls_loss = terms.cls_loss.add(a.cls_loss.mul_scalar(aux_weight));
    }
    terms
}

/// What backward differentiates: `total * factor`, times the loss scale with one.
pub fn scaled_total(total: &Tensor<1>, factor: f64, scaler: Option<&Rc<RefCell<LossScale>>>) -> Tensor<1> {
    let total = if factor != 1.0 { total.clone().mul_scalar(factor) } else { total.clone() };
    match scaler {
        Some(s) => s.borrow().scale_loss(total),
        None => total,
    }
}

/// Gradients of [`scaled_total`] for every trainable parameter of `cx`.
pub fn backward(total: &Tensor<1>, factor: f64, scaler: Option<&Rc<RefCell<LossScale>>>, cx: &Ctx) -> Vec<(ParamId, Tensor<1>)> {
    cx.gradients(&scaled_total(total, factor, scaler).backward())
}

impl Trainer<'_> {
    /// The factor of the loss before backward (the loss scale apart): 1 / the micro-batches of
    /// an accumulation window.
    pub(super) fn loss_factor(&self) -> f64 {
        if self.accumulate > 1 { 1.0 / self.accumulate as f64 } else { 1.0 }
    }

    /// Writes this step's optimizer and EMA scalars into their device buffers.
    fn write_scalars(&mut self) {
        let (lr, momentum) = self.schedule.at(self.iteration);
        self.scalars.borrow_mut().write(lr, momentum);
        if let Some(ema) = &self.ema {
            self.ema_scalars.borrow_mut().write(ema.borrow().next_decay());
        }
    }

    /// Host bookkeeping of a captured whole step: the EMA's update count (the optimizer keeps
    /// its own on the device).
    fn finish_captured_update(&mut self) {
        if let Some(ema) = &self.ema {
            ema.borrow_mut().finish_update(&self.model.params.borrow());
        }
    }

    /// Runs the stages of one micro-batch. `last_micro` closes a gradient-accumulation window.
    pub(super) fn run_step(&mut self, batch: Batch, last_micro: bool) -> anyhow::Result<StepValues> {
        let mut v = StepValues { batch: Some(batch), ..Default::default() };
        let dag = self.dag; // a shared borrow for the run, apart from `self`
        for &i in &dag.order {
            let stage = &dag.stages[i];
            if let Some(p) = self.profiler.as_mut() {
                p.enter(&stage.name);
            }
            // `LIBREYOLO_LOG=libreyolo_run::train=debug` shows where each replica is: a
            // multi-GPU hang is a collective one rank reached and another did not.
            tracing::debug!(rank = self.replica.rank, stage = %stage.name, "stage");
            self.run_stage(stage.kind.name, &mut v, last_micro)?;
            if let Some(p) = self.profiler.as_mut() {
                p.exit();
            }
        }
        if let Some(first) = v.first_run.take() {
            self.record_first_run(first);
        }
        Ok(v)
    }

    /// Runs one stage of kind `kind`.
    fn run_stage(&mut self, kind: &str, v: &mut StepValues, last_micro: bool) -> anyhow::Result<()> {
        {
            match kind {
                "data.yolo" => {
                    let batch = v.batch.take().ok_or_else(|| anyhow::anyhow!("the data stage ran twice in one step"))?;
                    let (images, targets) = upload(batch, &self.device);
                    v.images = Some(images);
                    v.targets = Some(targets);
                }
                "network.forward" => {
                    let images = v.images.take().ok_or_else(|| anyhow::anyhow!("network.forward ran before data"))?;
                    if self.graphs.is_some() {
                        // forward + loss + backward (and, when the update is captured, the
                        // optimizer and the EMA) through the capture manager; host bookkeeping
                        // stays here. A data-parallel rank whose update is captured all-reduces
                        // its gradients inside the segment, between its graphs.
                        let targets = v.targets.clone().ok_or_else(|| anyhow::anyhow!("the captured segment ran before data"))?;
                        if self.captures_update {
                            self.write_scalars();
                        }
                        let out = self.run_segment(images, targets);
                        if self.captures_update {
                            self.model.params.borrow_mut().count_batches(&out.stats);
                            self.finish_captured_update();
                            v.stepped = true;
                        } else {
                            self.model.params.borrow_mut().apply_batch_stats(out.stats, libreyolo_families::blocks::batch_norm::MOMENTUM);
                            // A data-parallel rank's graphs hold its own gradients: the all-reduce
                            // runs here, eager, between the backward graph and the optimizer
                            // (capture_plan::data_parallel_capture).
                            v.grads = Some(self.step_gradients(out.grads, last_micro));
                        }
                        v.loss = Some(out.terms);
                        return Ok(());
                    }
                    if let Some(targets) = &v.targets {
                        v.first_run = self.precompile_eager(&images, targets);
                    }
                    let (cx, maps) = forward(&self.model.network, &self.model.params.borrow(), &self.forward_spec(), images);
                    // BatchNorm running statistics advance with every training forward.
                    self.model.params.borrow_mut().apply_batch_stats(cx.take_batch_stats(), libreyolo_families::blocks::batch_norm::MOMENTUM);
                    v.maps = Some(maps);
                    v.ctx = Some(cx);
                }
                "loss.yolo9" => {
                    if self.graphs.is_some() {
                        return Ok(()); // inside the captured segment
                    }
                    let maps = v.maps.take().ok_or_else(|| anyhow::anyhow!("loss ran before network.forward"))?;
                    let targets = v.targets.clone().ok_or_else(|| anyhow::anyhow!("loss ran before data"))?;
                    let strides = self.model.network.head().strides.clone();
                    v.loss = Some(loss(&self.loss, self.aux_weight, &strides, maps, targets, self.replica.group_devices()));
                }
                "network.backward" => {
                    if self.graphs.is_some() {
                        return Ok(()); // inside the captured segment
                    }
                    let total = v.loss.as_ref().ok_or_else(|| anyhow::anyhow!("network.backward ran before the loss"))?.total.clone();
                    let cx = v.ctx.take().ok_or_else(|| anyhow::anyhow!("network.backward without a forward"))?;
                    let grads = backward(&total, self.loss_factor(), self.precision.scaler.as_ref(), &cx);
                    v.grads = Some(self.step_gradients(grads, last_micro));
                }
                "grad.clip" => {
                    if self.captures_update {
                        return Ok(()); // inside the captured step
                    }
                    if let (Some(grads), true) = (v.grads.as_mut(), last_micro) {
                        clip_global_norm(grads, self.loaded.manifest.optim.clip_max_norm);
                    }
                }
                "optimizer" => {
                    if !last_micro || self.captures_update {
                        return Ok(());
                    }
                    let mut grads = v.grads.take().unwrap_or_default();
                    self.write_scalars();
                    if let Some(s) = &self.precision.scaler
                        && !read_finite(s.borrow_mut().unscale(&mut grads))
                    {
                        // Non-finite gradients: `GradScaler.step` skips the optimizer; LibreYOLO's
                        // EMA and schedule go on.
                        v.stepped = true;
                        return Ok(());
                    }
                    self.optim.borrow_mut().step(&mut self.model.params.borrow_mut(), grads, &self.scalars.borrow());
                    v.stepped = true;
                }
                "ema" => {
                    if v.stepped
                        && !self.captures_update
                        && let Some(ema) = self.ema.as_ref()
                    {
                        let mut ema = ema.borrow_mut();
                        let params = self.model.params.borrow();
                        ema.update_device(&params, &self.ema_scalars.borrow());
                        ema.finish_update(&params);
                    }
                }
                "schedule" => {
                    if v.stepped {
                        self.iteration += 1;
                    }
                }
                other => anyhow::bail!("stage kind `{other}` has no implementation in the training executor yet"),
            }
        }
        Ok(())
    }

    /// The gradients the optimizer steps with: summed over the accumulation window and, on its
    /// last micro-batch of a data-parallel run, averaged over the replicas (every replica steps
    /// with the mean gradient of the whole batch).
    fn step_gradients(&mut self, mut grads: Vec<(ParamId, Tensor<1>)>, last_micro: bool) -> Vec<(ParamId, Tensor<1>)> {
        self.accumulate_grads(&mut grads);
        if last_micro { self.replica.average_gradients(grads) } else { grads }
    }

    /// Sums gradients over an accumulation window; on its last micro-batch `grads` holds the sum.
    fn accumulate_grads(&mut self, grads: &mut Vec<(ParamId, Tensor<1>)>) {
        if self.accumulate <= 1 {
            return;
        }
        let acc = &mut self.grad_accumulator;
        for (id, g) in grads.drain(..) {
            match acc.iter_mut().find(|(p, _)| *p == id) {
                Some((_, sum)) => *sum = sum.clone().add(g),
                None => acc.push((id, g)),
            }
        }
        *grads = acc.clone();
    }
}

/// Scales all gradients so that their global L2 norm is at most `max_norm` (0: off), on the
/// device (no read back).
pub fn clip_global_norm(grads: &mut [(ParamId, Tensor<1>)], max_norm: f64) {
    if max_norm <= 0.0 || grads.is_empty() {
        return;
    }
    let norm = grads.iter().map(|(_, g)| g.clone().square().sum()).reduce(|a, b| a.add(b)).unwrap().sqrt();
    let factor = norm.add_scalar(1e-6).recip().mul_scalar(max_norm).clamp_max(1.0);
    for (_, g) in grads.iter_mut() {
        let t = std::mem::replace(g, g.zeros_like());
        *g = t.mul(factor.clone());
    }
}

/// Reads the loss terms back (one sync); in a data-parallel run, their mean over the replicas
/// (the whole batch's loss, as one GPU logs it).
pub fn read_losses(terms: &LossTerms, replica: &super::replica::Replica) -> StepLosses {
    queue_losses(terms).read(replica)
}

/// A step's logged losses, copied into a buffer of their own on the device and read back
/// later: reading them one step late lets the host queue the next step before it waits, so the
/// GPU is not idle while the host prepares a step.
pub struct QueuedLosses(Tensor<1>);

/// Queues the copy of this step's loss terms (a captured step's outputs are rewritten by the
/// next replay; the copy runs before it, in stream order).
pub fn queue_losses(terms: &LossTerms) -> QueuedLosses {
    QueuedLosses(Tensor::cat(vec![terms.box_loss.clone(), terms.dfl_loss.clone(), terms.cls_loss.clone()], 0).detach())
}

impl QueuedLosses {
    /// The replicas' mean (a collective that waits for it, so it runs here, at the read, which
    /// every rank reaches in the same order), read back.
    pub fn read(self, replica: &super::replica::Replica) -> StepLosses {
        let v = replica.mean(self.0).into_data().convert::<f32>().try_to_vec::<f32>().unwrap_or_default();
        StepLosses { box_loss: v[0] as f64, dfl_loss: v[1] as f64, cls_loss: v[2] as f64 }
    }
}
