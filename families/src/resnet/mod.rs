//! The ResNet family's blocks (LibreYOLO's `models/resnet/nn.py`, timm/torchvision's layout, so
//! its weights load under their own key names): a 7x7 stem with max pooling, four stages of
//! BasicBlocks (ResNet-18/34), global average pooling and a linear classifier. Every BatchNorm
//! keeps PyTorch's defaults (eps 1e-5, momentum 0.1) and every activation is ReLU.
//!
//! ```text
//! pixels (ImageNet mean/std) -> ResNetStem -> ResLayer x4 (layer1..layer4) -> Classify (fc)
//! ```

pub mod classify;
pub mod conv_bn;
pub mod res_layer;
pub mod stem;

pub use classify::Classify;
pub use conv_bn::ConvBn;
pub use res_layer::{BasicBlock, ResLayer};
pub use stem::ResNetStem;
