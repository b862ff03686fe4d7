//! The per-epoch progress bar (indicatif), hidden when stderr is not a terminal.

use std::io::IsTerminal;

use burn::tensor::Device;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub fn epoch_bar(epoch: usize, epochs: usize, steps: usize) -> ProgressBar {
    bar(steps as u64, &format!("epoch {}/{epochs}", epoch + 1))
}

/// A bar of `len` steps labelled `prefix`; hidden when stderr is not a terminal.
pub fn bar(len: u64, prefix: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    if !std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(
        ProgressStyle::with_template("{prefix} [{bar:28}] {pos}/{len} {elapsed_precise}<{eta_precise} {msg}").expect("valid template").progress_chars("=> "),
    );
    bar.set_prefix(prefix.to_string());
    bar
}

/// `, GPU memory X GB` when the device's memory pool reports it.
pub fn memory(device: &Device) -> String {
    device.memory_pool_usage().map(|u| format!(", mem {:.2} GB", u.bytes_in_use as f64 / 1e9)).unwrap_or_default()
}
