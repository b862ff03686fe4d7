//! Detection losses. Every loss here is sync-free: it only launches tensor operations on
//! fixed-size inputs and never reads a value back to the host, so it can run inside a CUDA
//! graph and leaves reading its terms for logging to the caller.

pub mod anchors;
pub mod assigner;
pub mod ciou;
pub mod simota;
pub mod yolo9;
pub mod yolox;

pub use yolo9::{Yolo9Loss, Yolo9Settings, Yolo9Terms};
pub use yolox::{YoloxLoss, YoloxSettings, YoloxTerms};
