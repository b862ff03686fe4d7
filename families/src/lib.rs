//! Network families: the block library, the parameter store, and the registry that builds a
//! network from a manifest topology.

pub mod block;
pub mod blocks;
pub mod ctx;
pub mod mobilenetv4;
pub mod network;
pub mod params;
pub mod registry;
pub mod resnet;
pub mod rtdetr;
pub mod tensor;
pub mod topology;
pub mod transformer;
pub mod weights;
pub mod yolox;

pub use ctx::{BatchStats, Ctx, TracedOp};
pub use network::{HeadMaps, Network};
pub use params::{ParamId, ParamStore, Role, Value};
pub use topology::{LayerSpec, TopologyError};

/// Families a manifest can name in `model.family`.
pub const FAMILIES: &[&str] = &["yolo9", "yolox", "resnet", "mobilenetv4", "rtdetr"];
