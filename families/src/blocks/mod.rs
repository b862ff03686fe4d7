//! The YOLOv9 block library and the blocks every family shares (Conv, Upsample, Concat); each
//! block is one file and reads like the paper's diagram. A block a topology can name, of any
//! family (`crate::yolox`), is registered in [`BLOCKS`] (one line).

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

/// The blocks a topology can name.
pub const BLOCKS: &[&crate::block::BlockKind] = &[
    &pixels::BLOCK,
    &conv::BLOCK,
    &elan::BLOCK,
    &rep_ncspelan::BLOCK,
    &downsample::ACONV,
    &downsample::ADOWN,
    &sppelan::BLOCK,
    &upsample::BLOCK,
    &concat::BLOCK,
    &detect::BLOCK,
    &crate::yolox::focus::BLOCK,
    &crate::yolox::csp_layer::BLOCK,
    &crate::yolox::spp_bottleneck::BLOCK,
    &crate::yolox::head::BLOCK,
    &crate::resnet::stem::BLOCK,
    &crate::resnet::res_layer::BLOCK,
    &crate::resnet::classify::BLOCK,
    &crate::mobilenetv4::stem::BLOCK,
    &crate::mobilenetv4::conv_bn_act::BLOCK,
    &crate::mobilenetv4::edge_residual::BLOCK,
    &crate::mobilenetv4::uir::BLOCK,
    &crate::rtdetr::presnet::STEM,
    &crate::rtdetr::presnet::STAGE,
    &crate::rtdetr::conv_norm::BLOCK,
    &crate::rtdetr::conv_norm::PROJECTION,
    &crate::rtdetr::aifi::BLOCK,
    &crate::rtdetr::csp_rep::BLOCK,
    &crate::rtdetr::decoder::BLOCK,
];
