//! The data stages: YOLO-format datasets read and augmented as LibreYOLO's detection pipelines
//! do, ImageFolder datasets as its classification pipeline does (`classify`), batched on a pool
//! of worker threads ahead of the training step.
//!
//! ```text
//! dataset.yaml -> config -> images + labels (source, labels) -> decode [+ pre-resize] (image)
//!   -> [mosaic -> random affine] -> HSV -> flips -> letterbox or stretch  (augment, sample)
//!   -> batch: u8 images (B, 3, H, W) + f32 targets (B, rows, 5)  (loader; rows: `LabelRows`)
//! ```

pub mod augment;
pub mod cache;
pub mod classify;
pub mod config;
pub mod dataset;
pub mod image;
pub mod labels;
pub mod loader;
pub mod preview;
pub mod sample;

pub use classify::ClassifyAugment;
pub use config::DatasetConfig;
pub use config::Layout;
pub use dataset::Dataset;
pub use loader::{Batch, HostLabels, LabelRows, Loader, LoaderConfig, Transform};
pub use sample::Augment;

/// Grey used by LibreYOLO for padding and empty canvas (114, 114, 114).
pub const FILL: u8 = 114;
