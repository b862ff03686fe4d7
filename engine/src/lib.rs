//! libreyolo-run: trains YOLO-family detectors from declarative TOML manifests.
//!
//! A manifest (see [`manifest`]) describes one training step as a DAG of stages ([`dag`]);
//! the engine plans it into captured and eager segments and runs it on the device picked by
//! [`device`].

pub mod bench;
pub mod capture;
pub mod cli;
pub mod compile;
pub mod dag;
pub mod data;
pub mod device;
pub mod distributed;
pub mod export;
pub mod fusion_search;
pub mod kernel_cache;
pub mod manifest;
pub mod network;
pub mod parity;
pub mod precompile;
pub mod predict;
pub mod profile;
pub mod step;
pub mod train;
