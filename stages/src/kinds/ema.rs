//! `ema`: the exponential moving average of every float tensor of the model (LibreYOLO's
//! `ModelEMA`), updated in place after each optimizer step with this step's decay read from
//! device scalars; the host half (update count, BatchNorm counts) after the step.

use std::rc::Rc;

use crate::stage::{Autodiff, Io, Kind, Model, Stage, StateMut, StepInfo, Ty, Update, Value, no_collective, port};

pub static KIND: Kind = Kind {
    name: "ema",
    summary: "updates the exponential moving average of all float state",
    inputs: &[port("params", Ty::Event)],
    outputs: &[port("ema", Ty::Event)],
    not_capturable: None,
    autodiff: Autodiff::None,
    collective: no_collective,
    recapture_on: &[],
    settings: None,
    build: |b| Ok(Rc::new(EmaStage { model: b.model.clone(), update: b.update.clone() })),
};

struct EmaStage {
    model: Model,
    update: Update,
}

impl Stage for EmaStage {
    fn prepare(&self, _step: &StepInfo) {
        if let Some(ema) = &self.update.ema {
            self.update.ema_scalars.borrow_mut().write(ema.borrow().next_decay());
        }
    }

    fn run(&self, io: &mut Io<'_>) -> anyhow::Result<()> {
        io.output(0, Value::Event);
        if let (Some(ema), true) = (&self.update.ema, io.step.last_micro) {
            ema.borrow_mut().update_device(&self.model.params.borrow(), &self.update.ema_scalars.borrow());
        }
        Ok(())
    }

    fn finish(&self, step: &StepInfo) {
        if let (Some(ema), true) = (&self.update.ema, step.last_micro) {
            ema.borrow_mut().finish_update(&self.model.params.borrow());
        }
    }

    fn state(&self, visit: &mut dyn FnMut(StateMut<'_>)) {
        if let Some(ema) = &self.update.ema {
            ema.borrow_mut().tensors_mut().into_iter().for_each(|t| visit(StateMut::Any(t)));
        }
    }

    fn state_names(&self) -> Vec<String> {
        let Some(ema) = &self.update.ema else { return vec![] };
        ema.borrow().store.names_of(|_| true)
    }
}
