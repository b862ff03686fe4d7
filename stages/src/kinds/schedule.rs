//! `schedule`: advances the learning-rate and momentum schedule after each optimizer step (the
//! optimizer writes the rate of its step into device scalars before the step runs).

use std::rc::Rc;

use crate::stage::{Autodiff, Io, Kind, Stage, StepInfo, Ty, Update, Value, no_collective, port};

pub static KIND: Kind = Kind {
    name: "schedule",
    summary: "advances the learning-rate and momentum schedule",
    inputs: &[port("params", Ty::Event)],
    outputs: &[port("lr", Ty::Event)],
    not_capturable: Some("it computes the next learning rate on the host"),
    autodiff: Autodiff::None,
    collective: no_collective,
    recapture_on: &[],
    settings: None,
    build: |b| Ok(Rc::new(ScheduleStage { update: b.update.clone() })),
};

struct ScheduleStage {
    update: Update,
}

impl Stage for ScheduleStage {
    fn run(&self, io: &mut Io<'_>) -> anyhow::Result<()> {
        io.output(0, Value::Event);
        Ok(())
    }

    fn finish(&self, step: &StepInfo) {
        if step.last_micro {
            self.update.iteration.set(self.update.iteration.get() + 1);
        }
    }
}
