//! `optimizer`: one optimizer step (SGD with Nesterov momentum, or AdamW; `[optim]`) over the
//! parameters, in place, with this step's learning rate and momentum read from device scalars
//! (written before the step from the schedule, so a graph replays them). With fp16's dynamic
//! loss scale the gradients are unscaled first and a step whose gradients are not finite is
//! skipped (`GradScaler.step`): eagerly by reading the verdict back, inside a graph by putting
//! the parameters and the optimizer state back on the device, nothing read.

use std::cell::RefCell;
use std::rc::Rc;

use burn::tensor::{Bool, Tensor};
use libreyolo_families::ParamStore;
use libreyolo_families::tensor::write_into;

use crate::loss_scale::{LossScale, read_finite};
use crate::stage::{AnyTensor, Autodiff, Io, Kind, Stage, StateMut, StepInfo, Ty, Update, Value, no_collective, port};

pub static KIND: Kind = Kind {
    name: "optimizer",
    summary: "updates parameters in place (SGD with Nesterov momentum, or AdamW)",
    inputs: &[port("grads", Ty::Grads)],
    outputs: &[port("params", Ty::Event)],
    not_capturable: None,
    autodiff: Autodiff::None,
    collective: no_collective,
    recapture_on: &[],
    settings: None,
    build: |b| Ok(Rc::new(OptimizerStage { params: b.model.params.clone(), update: b.update.clone(), scaler: b.scaler.clone() })),
};

struct OptimizerStage {
    params: Rc<RefCell<ParamStore>>,
    update: Update,
    scaler: Option<Rc<RefCell<LossScale>>>,
}

impl Stage for OptimizerStage {
    /// This step's learning rate and momentum into their device buffers.
    fn prepare(&self, step: &StepInfo) {
        let (lr, momentum) = self.update.schedule.at(step.iteration);
        self.update.scalars.borrow_mut().write(lr, momentum);
    }

    fn run(&self, io: &mut Io<'_>) -> anyhow::Result<()> {
        io.output(0, Value::Event);
        if !io.step.last_micro {
            return Ok(()); // a micro-batch of an accumulation window
        }
        let mut grads = match io.input(0)? {
            Value::Grads(g) => g.clone(),
            other => anyhow::bail!("optimizer reads gradients, got {}", other.ty().name()),
        };
        // The input's handles go, so each gradient is used by the update alone.
        io.board.take(io.inputs[0]);
        let mut params = self.params.borrow_mut();
        let mut optim = self.update.optim.borrow_mut();
        if io.hardware {
            if let Some(name) = super::network_backward::shared(&params, |r| r.is_trainable()) {
                io.refuse(format!("the step updates `{name}` while another handle holds its buffer, so the update would not reach the graph"));
            }
            if let Some(s) = &self.scaler
                && !s.borrow().owns_its_buffers()
            {
                io.refuse("the step updates the loss scale while another handle holds its buffers".into());
            }
        }
        let finite = self.scaler.as_ref().map(|s| s.borrow_mut().unscale(&mut grads));
        let scalars = self.update.scalars.borrow();
        match finite {
            // Eager: non-finite gradients skip the step (the EMA and the schedule go on, as
            // LibreYOLO's do).
            Some(finite) if !io.in_graph => {
                if read_finite(finite) {
                    optim.step(&mut params, grads, &scalars);
                }
            }
            // In a graph: the step runs, and is undone on the device where it was not finite.
            Some(finite) => {
                let kept = save(updated(&mut params, &mut **optim));
                optim.step(&mut params, grads, &scalars);
                keep_unless(&finite, updated(&mut params, &mut **optim), &kept);
            }
            None => optim.step(&mut params, grads, &scalars),
        }
        Ok(())
    }

    /// The trainable parameters, the optimizer's state and the loss scale.
    fn state(&self, visit: &mut dyn FnMut(StateMut<'_>)) {
        self.params.borrow_mut().tensors_mut_of(|r| r.is_trainable()).into_iter().for_each(|t| visit(StateMut::Any(t)));
        self.update.optim.borrow_mut().tensors_mut().into_iter().for_each(|t| visit(StateMut::Vector(t)));
        if let Some(s) = &self.scaler {
            s.borrow_mut().tensors_mut().into_iter().for_each(|t| visit(StateMut::Vector(t)));
        }
    }

    /// The parameters and the optimizer's state by name; the loss scale's vectors by place.
    fn state_names(&self) -> Vec<String> {
        let params = self.params.borrow();
        let mut names = params.names_of(|r| r.is_trainable());
        names.extend(self.update.optim.borrow().tensor_names(&params));
        if let Some(s) = &self.scaler {
            names.extend((0..s.borrow_mut().tensors_mut().len()).map(|k| format!("loss scale {k}")));
        }
        names
    }
}

/// A state tensor as saved: a copy in a buffer of its own.
pub type Saved = AnyTensor;

/// A deep copy of `t`.
pub fn save_one(t: StateMut<'_>) -> Saved {
    match t {
        StateMut::Any(t) => t.deep_copy(),
        StateMut::Vector(t) => AnyTensor::R1(t.clone().mul_scalar(1.0)),
    }
}

/// Deep copies of `tensors`.
pub fn save(tensors: Vec<StateMut<'_>>) -> Vec<Saved> {
    tensors.into_iter().map(save_one).collect()
}

/// What an optimizer step writes: the trainable parameters and the optimizer's state.
fn updated<'a>(params: &'a mut ParamStore, optim: &'a mut dyn crate::optim::Optimizer) -> Vec<StateMut<'a>> {
    let mut out: Vec<StateMut<'a>> = params.trainable_tensors_mut().into_iter().map(StateMut::Any).collect();
    out.extend(optim.tensors_mut().into_iter().map(StateMut::Vector));
    out
}

/// Puts `kept` back into `tensors`, in place, unless `finite` (`[1]`, on the device) holds:
/// a skipped step decided without reading anything back.
fn keep_unless(finite: &Tensor<1, Bool>, tensors: Vec<StateMut<'_>>, kept: &[Saved]) {
    for (t, old) in tensors.into_iter().zip(kept) {
        write_saved(t, old, Some(finite));
    }
}

/// Writes `saved` into `t`, in place; with `unless`, only where it is false (`[1]`, on the
/// device), `t` keeping its value where it holds.
pub fn write_saved(t: StateMut<'_>, saved: &Saved, unless: Option<&Tensor<1, Bool>>) {
    fn select<const D: usize>(old: &Tensor<D>, now: &Tensor<D>, unless: Option<&Tensor<1, Bool>>) -> Tensor<D> {
        match unless {
            Some(keep_new) => old.clone().mask_where(keep_new.clone().reshape([1; D]).expand(now.dims()), now.clone()),
            None => old.clone(),
        }
    }
    match t {
        StateMut::Vector(t) => match saved {
            AnyTensor::R1(old) => {
                let value = select(old, t, unless);
                write_into(t, value);
            }
            _ => unreachable!("written back in the order saved"),
        },
        StateMut::Any(t) => {
            let value = libreyolo_families::each_rank2!(saved, &*t, old, now => select(old, now, unless));
            t.write(value);
        }
    }
}
