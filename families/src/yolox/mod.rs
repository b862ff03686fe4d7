//! The YOLOX family's blocks (LibreYOLO's `models/yolox/nn.py`, the official YOLOX layout, so
//! its weights load under their own key names). The backbone's and neck's plain convolutions
//! are the shared `Conv` (Conv2d, BatchNorm eps 1e-3 momentum 0.03, SiLU, as YOLOX sets them),
//! the neck's upsampling and concatenations the shared `Upsample` and `Concat`.
//!
//! ```text
//! Focus -> dark2..dark5 (Conv s2 + CSPLayer; dark5 with SPPBottleneck) -> PAFPN -> YOLOXHead
//! ```

pub mod csp_layer;
pub mod focus;
pub mod head;
pub mod spp_bottleneck;

pub use csp_layer::CSPLayer;
pub use focus::Focus;
pub use head::YOLOXHead;
pub use spp_bottleneck::SPPBottleneck;
