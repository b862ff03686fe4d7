//! Stage implementations: the `Stage` trait and the stage kinds ([`stage`], [`kinds`]), and
//! what they use: data, losses, optimizers, EMA, schedules, validation.

pub mod data;
pub mod ema;
pub mod kinds;
pub mod loss;
pub mod loss_scale;
pub mod optim;
pub mod schedule;
pub mod stage;
pub mod val;
