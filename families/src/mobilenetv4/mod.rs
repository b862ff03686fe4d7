//! The MobileNetV4 family's conv-only blocks (LibreYOLO's `models/mobilenetv4/nn.py`, vendored
//! from timm, so its weights load under their own key names): a 3x3 stride-2 stem, stages of
//! `ConvBnAct` ('cn'), `EdgeResidual` ('er') and `UIR` (universal inverted residual, 'uir') blocks, then the pooled
//! head (`Classify` with `hidden`: a 1x1 `conv_head`, `norm_head`, ReLU, `classifier`). Every
//! BatchNorm keeps PyTorch's defaults (eps 1e-5, momentum 0.1) and every activation is ReLU.
//!
//! ```text
//! pixels (ImageNet mean/std) -> MNv4Stem -> ConvBnAct / EdgeResidual / UIR, one layer each (blocks.S.I) -> Classify
//! ```

pub mod conv_bn_act;
pub mod edge_residual;
pub mod stem;
pub mod uir;

pub use conv_bn_act::ConvBnAct;
pub use edge_residual::EdgeResidual;
pub use stem::MNv4Stem;
pub use uir::Uir;

/// timm's `make_divisible(v, 8)`: `v` rounded to a multiple of 8, at least 8, and not below 90%
/// of `v`.
pub fn make_divisible(v: f64) -> usize {
    let new = ((v + 4.0) as usize / 8 * 8).max(8);
    if (new as f64) < 0.9 * v { new + 8 } else { new }
}
