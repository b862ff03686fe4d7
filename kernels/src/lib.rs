//! Fused kernels for the training step, each a burn backend extension: one trait whose default
//! bodies compose burn's own primitive operations (what the CPU backend and the capture device
//! run, and the reference the GPU kernels are checked against), a CubeCL implementation for the
//! GPU (`Cube`, lazily through burn-fusion), and an autodiff node with the fused backward.
//!
//! Why: a BatchNorm written with tensor operations records a dozen autodiff nodes whose backward
//! walks the activation many times; on the H200 it was YOLOv9-t's largest cost after the weight
//! gradients (docs/history/). Here the training BatchNorm (and the SiLU after it) reads the
//! activation twice forward and twice backward.

pub mod batch_norm;
pub mod in_place;
pub mod tensor_list;
