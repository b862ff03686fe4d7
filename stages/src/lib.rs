//! Stage implementations: data, losses, optimizers, EMA, schedules, validation.

pub mod catalog;
pub mod data;
pub mod loss;
