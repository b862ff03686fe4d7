mod base;
mod node;
mod requirement;

pub mod traversal;

pub use base::*;
pub use node::*;
pub use requirement::*;
