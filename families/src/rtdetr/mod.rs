//! The RT-DETR family's blocks (LibreYOLO's `models/rtdetr/`, the official RT-DETR layout, so
//! its weights load under their own key names): a PResNet-vd backbone, the hybrid encoder
//! (input projections, AIFI attention on the top level, CCFM fusion of CSPRep layers) and the
//! decoder head (query selection, deformable-attention decoder layers, box refinement).
//!
//! ```text
//! PResNetStem -> PResNetStage x4 (res_layers.0..3; the last three read by the encoder)
//! encoder: Projection x3 -> AIFI (top) -> top-down ConvNorm + Upsample + Concat + CSPRepLayer
//!          -> bottom-up ConvNorm (s2) + Concat + CSPRepLayer
//! decoder: RTDETRDecoder (the three fused maps)
//! ```

pub mod aifi;
pub mod conv_norm;
pub mod csp_rep;
pub mod decoder;
pub mod decoder_layer;
pub mod denoising;
pub mod presnet;
pub mod targets;

pub use decoder::RtDetrDecoder;
pub use denoising::{Denoising, DenoisingTensors, Noise, positive_matches};
pub use targets::DetrTargets;
