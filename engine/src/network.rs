//! Building the manifest's network, with topology errors reported at their layer's line.

use burn::tensor::Device;
use libreyolo_families::{Network, ParamStore, TopologyError};

use crate::manifest::{Diagnostic, KeyPath, LoadedManifest, Part};

/// Classes used when neither the manifest nor a dataset says (LibreYOLO's default).
pub const DEFAULT_NC: usize = 80;

/// Builds the network of `loaded` with `nc` classes and fresh parameters on `device`.
pub fn build(loaded: &LoadedManifest, nc: usize, with_aux: bool, device: &Device) -> Result<(Network, ParamStore), Diagnostic> {
    let m = &loaded.manifest;
    Network::build(&m.model.layers, nc, with_aux, device, m.run.seed).map_err(|e| topology_error(loaded, e))
}

fn topology_error(loaded: &LoadedManifest, e: TopologyError) -> Diagnostic {
    let mut path = KeyPath::dotted("model.layers").index(e.layer);
    if let Some(key) = &e.key {
        for k in key.split('.') {
            path = path.key(k);
        }
    }
    let name = loaded.manifest.model.layers.get(e.layer).map(|l| l.name.as_str()).unwrap_or("?");
    loaded.source.error_at(&path, Part::Value, format!("in layer `{name}` of the topology: {}", e.message)).with_help(e.help)
}
