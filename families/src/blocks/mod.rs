//! The YOLOv9 block library and the blocks every family shares (Conv, Upsample, Concat); each
//! block is one file and reads like the paper's diagram. A block a topology can name, of any
//! family (`crate::yolox`), is registered in [`crate::registry::BLOCKS`] (one line).

pub mod batch_norm;
pub mod concat;
pub mod conv;
pub mod detect;
pub mod downsample;
pub mod elan;
pub mod pixels;
pub mod rep_conv;
pub mod rep_ncsp;
pub mod rep_ncspelan;
pub mod sppelan;
pub mod upsample;

pub use batch_norm::BatchNorm;
pub use conv::{Conv, Conv2d, ConvShape};
pub use detect::DDetect;
pub use downsample::{AConv, ADown};
pub use elan::Elan;
pub use rep_conv::RepConvN;
pub use rep_ncsp::{RepNBottleneck, RepNCSP};
pub use rep_ncspelan::RepNCSPELAN;
pub use sppelan::SPPELAN;
