mod client;
mod memory_management;
mod server;

pub mod graph;
pub use client::*;
