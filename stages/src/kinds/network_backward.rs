//! `network.backward`: the gradients of the loss with respect to every trainable parameter.
//!
//! The program runs this stage once for each part of the step that ran one way (a graph, or
//! eager; [`Tape`](crate::stage::Tape)), from the last to the first: a seam may fall between a
//! forward and its backward. Each run is one vector-Jacobian product: the objective is the loss
//! (times the loss scale and `1 / accumulate`) where that part made it, plus
//! `sum(output * upstream)` for each output a later part read, whose upstream gradient that
//! later part's backward wrote. It writes the gradients of the part's parameters (joined to the
//! later parts', in the store's order) and the upstream gradients of the part's inputs, then
//! drops the part's forward contexts and folds their BatchNorm batch statistics into the running
//! ones in place (no context holds them any more, so the update keeps their buffers).

use std::cell::RefCell;
use std::rc::Rc;

use burn::tensor::Tensor;
use libreyolo_families::{ParamStore, Role};

use crate::loss_scale::LossScale;
use crate::stage::{AnyTensor, Autodiff, Build, Grads, Io, Kind, Part, Stage, StateMut, Ty, Value, no_collective, port};

pub static KIND: Kind = Kind {
    name: "network.backward",
    summary: "back-propagates the loss into parameter gradients",
    inputs: &[port("loss", Ty::Loss)],
    outputs: &[port("grads", Ty::Grads)],
    not_capturable: None,
    autodiff: Autodiff::Backward,
    collective: no_collective,
    recapture_on: &[],
    settings: None,
    build: |b| Ok(Rc::new(NetworkBackward::new(b))),
};

pub struct NetworkBackward {
    params: Rc<RefCell<ParamStore>>,
    /// `1 / accumulate`: each micro-batch's share of an accumulated step.
    factor: f64,
    scaler: Option<Rc<RefCell<LossScale>>>,
}

impl NetworkBackward {
    pub fn new(b: &Build<'_>) -> Self {
        let factor = if b.update.accumulate > 1 { 1.0 / b.update.accumulate as f64 } else { 1.0 };
        Self { params: b.model.params.clone(), factor, scaler: b.scaler.clone() }
    }

    /// What the backward differentiates of a loss `total`: times `factor`, times the loss scale.
    pub fn scaled(&self, total: Tensor<1>) -> Tensor<1> {
        let total = if self.factor != 1.0 { total.mul_scalar(self.factor) } else { total };
        match &self.scaler {
            Some(s) => s.borrow().scale_loss(total),
            None => total,
        }
    }
}

impl Stage for NetworkBackward {
    fn run(&self, io: &mut Io<'_>) -> anyhow::Result<()> {
        let Part::Backward { objective } = io.part else { anyhow::bail!("network.backward runs as the backward of a part of the step") };
        let tape = std::mem::take(&mut *io.tape());
        // The objective of this part: the loss it made, and each output a later part read,
        // weighted by that part's upstream gradient.
        let mut terms: Vec<Tensor<1>> = vec![];
        for (slot, outputs) in &tape.outputs {
            if Some(*slot) == *objective {
                let AnyTensor::R1(total) = &outputs[0] else { anyhow::bail!("a loss is a [1] tensor") };
                terms.push(self.scaled(total.clone()));
            } else if let Some(&(_, grad)) = io.grad_slots.iter().find(|(v, _)| v == slot)
                && let Some(upstream) = io.board.get(grad)
            {
                let upstream = upstream.tensors();
                terms.push(outputs.iter().zip(&upstream).map(|(o, u)| o.dot(u)).reduce(|a, b| a.add(b)).expect("an output has tensors"));
            }
        }
        let Some(objective) = terms.into_iter().reduce(|a, b| a.add(b)) else { anyhow::bail!("nothing reaches the loss from this part of the step") };
        let grads = objective.backward();
        let mut params: Grads = vec![];
        let mut stats = vec![];
        for cx in tape.contexts {
            params.extend(cx.gradients(&grads));
            stats.extend(cx.take_batch_stats());
        }
        for (slot, leaves) in &tape.leaves {
            if let Some(&(_, grad)) = io.grad_slots.iter().find(|(v, _)| v == slot) {
                io.board.put(grad, Value::Tensors(leaves.iter().map(|l| l.grad(&grads)).collect()));
            }
        }
        drop((tape.outputs, tape.leaves, grads));
        // Gradients of later parts (already written) first, then these, in the store's order.
        if let Some(Value::Grads(later)) = io.board.take(io.outputs[0]) {
            // Inside a graph the later parts' gradients are its stable inputs: copied, so the
            // graph's output never shares the buffer refreshed before each replay.
            params.extend(later.into_iter().map(|(id, g)| (id, if io.in_graph { g.mul_scalar(1.0) } else { g })));
        }
        params.sort_by_key(|(id, _)| id.0);
        let mut store = self.params.borrow_mut();
        if io.hardware
            && let Some(name) = shared(&store, Role::is_running_statistic)
        {
            io.refuse(format!("the step updates `{name}` while another handle holds its buffer, so the update would not reach the graph"));
        }
        store.fold_batch_stats(&stats);
        drop(store);
        io.output(0, Value::Grads(params));
        Ok(())
    }

    /// The BatchNorm running statistics, which the backward folds the batch statistics into.
    fn state(&self, visit: &mut dyn FnMut(StateMut<'_>)) {
        for t in self.params.borrow_mut().tensors_mut_of(Role::is_running_statistic) {
            visit(StateMut::Any(t));
        }
    }

    fn state_names(&self) -> Vec<String> {
        self.params.borrow().names_of(Role::is_running_statistic)
    }
}

/// The name of the first tensor of `store` of a role `which` accepts whose buffer another handle
/// shares: its in-place update would land in a new buffer.
pub fn shared(store: &ParamStore, which: impl Fn(Role) -> bool) -> Option<String> {
    store.entries().iter().filter(|e| which(e.role)).find_map(|e| {
        let unique = e.value.float().is_none_or(|t| t.can_mut());
        (!unique).then(|| e.name.clone())
    })
}
