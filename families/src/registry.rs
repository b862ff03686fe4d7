//! The blocks a topology can name, of every family: one line each. Apart from the blocks
//! themselves, so that a family's blocks import the shared ones (`crate::blocks`) and the
//! registry imports them all, with no loop between.

/// The blocks a topology can name.
pub const BLOCKS: &[&crate::block::BlockKind] = &[
    &crate::blocks::pixels::BLOCK,
    &crate::blocks::conv::BLOCK,
    &crate::blocks::elan::BLOCK,
    &crate::blocks::rep_ncspelan::BLOCK,
    &crate::blocks::downsample::ACONV,
    &crate::blocks::downsample::ADOWN,
    &crate::blocks::sppelan::BLOCK,
    &crate::blocks::upsample::BLOCK,
    &crate::blocks::concat::BLOCK,
    &crate::blocks::detect::BLOCK,
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
