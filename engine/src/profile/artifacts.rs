//! The profile's files in the run directory, each written atomically: `profile.json` (the
//! whole analysis with the measurements), `profile_summary.json` (the headline figures),
//! `profile_trace.json` (trace-event format) and `timeline.html`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::json;

use super::analysis::Profile;

/// `bytes` into `path` through `path.tmp` renamed into place.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).and_then(|_| std::fs::rename(&tmp, path)).with_context(|| format!("writing {}", path.display()))
}

/// The headline: what LibreYOLO's `profile_summary.json` holds.
pub fn summary(p: &Profile, trace: Option<&Path>) -> serde_json::Value {
    json!({
        "meta": p.meta,
        "window": p.window,
        "real": p.real,
        "composition_ms": p.composition_ms.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "composition_total_ms": p.composition_total_ms,
        "bound": p.bound,
        "bound_why": p.bound_why,
        "trace": trace.map(|t| t.display().to_string()),
        "analysis": {
            "gpu_util": p.gpu_util, "gpu_util_raw": p.gpu_util_raw, "gpu_busy_ms_per_step": p.gpu_busy_ms_per_step,
            "mean_kernel_us": p.mean_kernel_us, "kernels_per_step": p.kernels_per_step,
            "pool_pages_per_step": p.pool_pages_per_step, "memory_pressure": p.memory_pressure,
            "window_real_steps": p.window.real_steps, "peak_memory_mb": p.peak_memory_mb,
            "top_kernels": p.top_kernels, "categories": p.categories,
            "bound": p.bound, "bound_why": p.bound_why, "step_ms": p.real.step_ms, "img_per_s": p.real.img_per_s,
            "dataload_ms": p.real.dataload_ms,
        },
    })
}

/// Writes the four files into `dir`; returns the path of `profile.json`.
pub fn write(dir: &Path, p: &Profile, with_trace: bool) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let trace_path = dir.join("profile_trace.json");
    if with_trace {
        write_atomic(&trace_path, serde_json::to_string(&super::trace::build(p))?.as_bytes())?;
    }
    let json_path = dir.join("profile.json");
    write_atomic(&json_path, serde_json::to_string_pretty(p)?.as_bytes())?;
    let summary = summary(p, with_trace.then_some(trace_path.as_path()));
    write_atomic(&dir.join("profile_summary.json"), serde_json::to_string_pretty(&summary)?.as_bytes())?;
    write_atomic(&dir.join("timeline.html"), super::timeline::html(p).as_bytes())?;
    Ok(json_path)
}

/// Reads a `profile.json`, checking its schema.
pub fn read(path: &Path) -> anyhow::Result<Profile> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    match value.get("schema").and_then(|s| s.as_str()) {
        Some(s) if s == super::analysis::SCHEMA => {}
        Some(other) => anyhow::bail!("{} has schema `{other}`; expected `{}`", path.display(), super::analysis::SCHEMA),
        None => anyhow::bail!("{} is not a libreyolo-run profile.json (no `schema`); give the profile.json of a run", path.display()),
    }
    serde_json::from_value(value).with_context(|| format!("reading {}", path.display()))
}
