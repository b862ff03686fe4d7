//! Stage implementations: data, losses, optimizers, EMA, schedules, validation.

pub mod catalog;
pub mod data;
pub mod ema;
pub mod loss;
pub mod optim;
pub mod schedule;
pub mod val;
