//! A network topology as written in a manifest: an ordered list of layers, each naming its
//! block, where its input comes from, and the block's arguments, in the spirit of
//! Ultralytics' model YAMLs. Layer names are LibreYOLO's state-dict prefixes.
//!
//! ```toml
//! layers = [
//!   { name = "backbone.conv0", from = "images", block = "Conv", args = { out = 16, k = 3, s = 2 } },
//!   { name = "backbone.conv1", block = "Conv", args = { out = 32, k = 3, s = 2 } },  # from: previous
//! ]
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The network's input, usable in `from`.
pub const INPUT: &str = "images";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerSpec {
    pub name: String,
    /// The state-dict prefix of the layer's parameters when it is not `name`; `""` puts them at
    /// the top level, as ResNet's `conv1`, `bn1` and `fc` are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<String>,
    /// Input layer(s); the previous layer when absent.
    #[serde(default, skip_serializing_if = "Sources::is_previous")]
    pub from: Sources,
    pub block: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub args: BTreeMap<String, Arg>,
    /// Part of the PGI auxiliary branch: built and run only in training with `aux_weight > 0`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub aux: bool,
}

/// `from = "name"` or `from = ["a", "b"]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(untagged, expecting = "a layer name or a list of layer names")]
pub enum Sources {
    #[default]
    #[serde(skip)]
    Previous,
    One(String),
    Many(Vec<String>),
}

impl Sources {
    pub fn is_previous(&self) -> bool {
        matches!(self, Sources::Previous)
    }
}

/// A block argument.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, expecting = "an integer, a number, a boolean or a list of integers")]
pub enum Arg {
    Bool(bool),
    Int(i64),
    Float(f64),
    List(Vec<i64>),
}

/// A problem in a topology, located by layer index and key (`from`, `block`, `args.out`).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct TopologyError {
    pub layer: usize,
    pub key: Option<String>,
    pub message: String,
    pub help: Option<String>,
}

impl TopologyError {
    pub fn new(layer: usize, key: Option<&str>, message: impl Into<String>) -> Self {
        Self { layer, key: key.map(str::to_string), message: message.into(), help: None }
    }

    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}
