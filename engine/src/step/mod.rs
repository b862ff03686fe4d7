//! The runtime of one training step: the stage DAG compiled into a [`program::Program`]
//! (segments eager or captured, the autodiff seams between them), run by the
//! [`exec::Executor`], whose captured region is recorded and checked by [`record`]; both run
//! the program's items through [`core::Core`].

pub mod core;
pub mod exec;
pub mod program;
pub mod record;

pub use core::Core;
pub use exec::{Executor, NoProbe, Probe, StepOut};
pub use program::{Options, Program};
