//! Network families: the block library and the registry that builds a network from a
//! manifest topology.

/// Families a manifest can name in `model.family`.
pub const FAMILIES: &[&str] = &["yolo9"];
