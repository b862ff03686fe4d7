//! The gradients an optimizer step uses: summed over a gradient-accumulation window and, on its
//! last micro-batch of a data-parallel run, averaged over the replicas (every replica then
//! steps with the mean gradient of the whole batch). Not a manifest kind: the engine's program
//! places it after the backward when the run accumulates or has several GPUs. It runs eager:
//! the window is host control flow, and the all-reduce stays outside the graphs (each gradient
//! is moved into its all-reduce, so a uniquely owned one is reduced in its own buffer).

use std::cell::RefCell;
use std::rc::Rc;

use crate::stage::{Autodiff, Grads, Group, Io, Kind, Stage, Ty, Value, no_collective, port};

pub static KIND: Kind = Kind {
    name: "grad.sync",
    summary: "sums gradients over an accumulation window and averages them over the GPUs",
    inputs: &[port("grads", Ty::Grads)],
    outputs: &[port("grads", Ty::Grads)],
    not_capturable: Some("it keeps an accumulation window on the host and runs the gradient all-reduce"),
    autodiff: Autodiff::None,
    collective: no_collective,
    recapture_on: &[],
    settings: None,
    build: |b| Ok(Rc::new(GradSync { group: b.group.clone(), accumulate: b.update.accumulate, sum: RefCell::new(vec![]) })),
};

struct GradSync {
    group: Rc<dyn Group>,
    accumulate: usize,
    /// The window's running sum.
    sum: RefCell<Grads>,
}

impl Stage for GradSync {
    fn run(&self, io: &mut Io<'_>) -> anyhow::Result<()> {
        let mut grads = io.take_grads(0)?;
        if self.accumulate > 1 {
            let mut acc = self.sum.borrow_mut();
            for (id, g) in grads.drain(..) {
                match acc.iter_mut().find(|(p, _)| *p == id) {
                    Some((_, sum)) => *sum = sum.clone().add(g),
                    None => acc.push((id, g)),
                }
            }
            grads = if io.step.last_micro { std::mem::take(&mut *acc) } else { acc.clone() };
        }
        if io.step.last_micro {
            grads = self.group.average_gradients(grads);
        }
        io.output(0, Value::Grads(grads));
        Ok(())
    }
}
