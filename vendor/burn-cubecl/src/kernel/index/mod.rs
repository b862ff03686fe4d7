mod flip;
mod gather;
mod gather_nd;
mod pad;
mod repeat_dim;
mod scatter;
mod scatter_nd;
mod select;
mod select_assign;
mod slice;
mod slice_assign;

pub(crate) use flip::*;
pub(crate) use gather_nd::*;
pub use pad::*;
pub(crate) use repeat_dim::*;
pub(crate) use scatter_nd::*;
pub(crate) use select::*;
pub(crate) use select_assign::*;
pub use slice::*;
pub(crate) use slice_assign::*;

pub(crate) use gather::*;
pub(crate) use scatter::*;
