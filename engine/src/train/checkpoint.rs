//! Checkpoints: one safetensors file holding the EMA weights under `model.` (what validation,
//! `best` and `predict` use, like LibreYOLO's `model` key), the raw weights under
//! `train_model.`, the optimizer state under `optimizer.`, and the training state (epoch,
//! schedule iteration, best fitness, EMA updates, loss scale) as JSON metadata. Written
//! atomically (write, fsync, rename): a crash never leaves a half-written file.

use std::collections::HashMap;
use std::path::Path;

use anyhow::Context;
use burn::tensor::{Device, Tensor};
use libreyolo_families::ParamStore;
use libreyolo_families::weights::{self, Owned};
use serde::{Deserialize, Serialize};

/// Where training stands, saved with every checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct TrainState {
    /// The next epoch to run (0-based).
    pub next_epoch: usize,
    /// Optimizer steps taken (the schedule's position).
    pub iteration: usize,
    pub best_fitness: Option<f64>,
    pub best_epoch: Option<usize>,
    pub ema_updates: u64,
    pub loss_scale: Option<f64>,
    pub nc: usize,
    pub names: Vec<String>,
    pub imgsz: [u32; 2],
    pub family: String,
    pub size: String,
}

const STATE_KEY: &str = "libreyolo_run.train_state";

pub fn save(path: &Path, model: &ParamStore, ema: Option<&ParamStore>, optimizer: Vec<(String, Tensor<1>)>, state: &TrainState) -> anyhow::Result<()> {
    let mut tensors: Vec<Owned> = weights::owned(ema.unwrap_or(model), "model.");
    tensors.extend(weights::owned(model, "train_model."));
    tensors.extend(optimizer.iter().map(|(n, t)| weights::owned_vector(format!("optimizer.{n}"), t)));
    let meta = HashMap::from([(STATE_KEY.to_string(), serde_json::to_string(state)?)]);
    weights::write(path, tensors, Some(meta)).with_context(|| format!("writing checkpoint {}", path.display()))
}

/// The training state of a checkpoint.
pub fn read_state(path: &Path) -> anyhow::Result<TrainState> {
    let meta = weights::read_metadata(path)?;
    let json = meta.get(STATE_KEY).with_context(|| format!("{} is not a libreyolo-run checkpoint (no training state)", path.display()))?;
    Ok(serde_json::from_str(json)?)
}

/// Loads `model.` (EMA, or the only weights) or `train_model.` weights into `store`.
pub fn load_weights(store: &mut ParamStore, path: &Path, prefix: &str) -> anyhow::Result<()> {
    weights::load_prefixed(store, path, prefix, false)?;
    Ok(())
}

/// The optimizer state of a checkpoint.
pub fn load_optimizer(path: &Path, device: &Device) -> anyhow::Result<Vec<(String, Tensor<1>)>> {
    Ok(weights::read_vectors(path, "optimizer.", device)?)
}

/// Weights for `model.weights=` / `predict weights=`: a checkpoint (its `model.` keys), a
/// plain state dict with LibreYOLO's key names, or a LibreYOLO `.pt` checkpoint (its `model`).
/// `fit`: what may differ (training from weights made for another class count).
pub fn load_any(store: &mut ParamStore, path: &Path, fit: weights::Fit) -> anyhow::Result<weights::LoadReport> {
    if matches!(path.extension().and_then(|e| e.to_str()), Some("pt" | "pth")) {
        return Ok(weights::load_pytorch(store, path, fit)?);
    }
    let is_checkpoint = weights::read_metadata(path).map(|m| m.contains_key(STATE_KEY)).unwrap_or(false);
    Ok(weights::load_prefixed(store, path, if is_checkpoint { "model." } else { "" }, fit)?)
}
