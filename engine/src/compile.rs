//! LibreYOLO's `compile` option (`compile=`, `capture.compile`) in this engine.
//!
//! LibreYOLO hands its training network to `torch.compile` (Inductor) in one of its modes. This
//! engine has no separate compiler: its kernels are always generated (cubecl) and its elementwise
//! chains always fused (burn-fusion). What torch.compile's modes trade — compile time against
//! kernel quality, CUDA graphs or not — maps onto the three knobs this engine does have:
//!
//! | `compile=` | convolution and matmul kernels (`BURN_CONV_KERNELS`, `BURN_MATMUL_KERNELS`) | fusion search (blocks) | CUDA graphs |
//! |---|---|---|---|
//! | `false` (default) | `fixed`: each direction's measured preference, nothing benchmarked | 2 | as `cuda_graph` |
//! | `true` = `default` | `fixed` | 5 (burn's own width: more fusions tried, longer warm-up) | as `cuda_graph` |
//! | `reduce-overhead` | `fixed` | 5 | on |
//! | `max-autotune` | `all`: every candidate benchmarked per shape (minutes of warm-up; cached) | 5 | on |
//! | `max-autotune-no-cudagraphs` | `all` | 5 | as `cuda_graph` |
//!
//! As in LibreYOLO, a mode only applies to a single-GPU CUDA run: on the CPU and across several
//! GPUs it is ignored with one warning and training goes on. A knob's environment variable set
//! by the user wins over the mode (the log line says so), and a `burn.toml` above the working
//! directory configures burn's fusion search instead (`crate::fusion_search`).

use crate::device::Backend;
use crate::manifest::{CaptureSettings, CompileMode};

/// What a mode sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSettings {
    /// `BURN_CONV_KERNELS` (vendor/README.md).
    pub conv_kernels: &'static str,
    /// `BURN_MATMUL_KERNELS` (vendor/README.md): `fixed` or `all`.
    pub matmul_kernels: &'static str,
    /// burn-fusion's search width ([`crate::fusion_search`]).
    pub fusion_blocks: usize,
    /// The mode captures the step whatever `cuda_graph` says (torch.compile's `triton.cudagraphs`).
    pub graphs: bool,
}

/// The settings of `mode`; `None` for `false` (the engine's own defaults).
pub fn settings(mode: CompileMode) -> Option<KernelSettings> {
    let (conv_kernels, graphs) = match mode {
        CompileMode::Off => return None,
        CompileMode::Default => ("fixed", false),
        CompileMode::ReduceOverhead => ("fixed", true),
        CompileMode::MaxAutotune => ("all", true),
        CompileMode::MaxAutotuneNoCudagraphs => ("all", false),
    };
    // the matmuls benchmark their candidates exactly when the convolutions do
    let matmul_kernels = if conv_kernels == "all" { "all" } else { "fixed" };
    Some(KernelSettings { conv_kernels, matmul_kernels, fusion_blocks: UPSTREAM_FUSION_BLOCKS, graphs })
}

/// burn-fusion's own search width, which this engine narrows to 2 by default.
const UPSTREAM_FUSION_BLOCKS: usize = 5;

/// Why a mode does not apply to a run on `backend` over `world` GPUs (LibreYOLO's rules).
pub fn refused(backend: Backend, world: usize) -> Option<String> {
    if backend != Backend::Cuda {
        Some("the device is not CUDA".into())
    } else if world > 1 {
        Some(format!("multi-GPU training ({world} GPUs) is not supported yet"))
    } else {
        None
    }
}

/// Whether `mode` turns capture on for this run (a graph-replaying mode that applies).
pub fn implies_graphs(mode: CompileMode, backend: Backend, world: usize) -> bool {
    settings(mode).is_some_and(|s| s.graphs) && refused(backend, world).is_none()
}

/// Whether a run asks for capture: `cuda_graph` (`capture.enabled`), or a graph-replaying
/// `compile` mode, which captures whatever `cuda_graph` says, as in LibreYOLO.
pub fn capture_wanted(capture: &CaptureSettings, backend: Backend, world: usize) -> bool {
    capture.enabled.wanted() || implies_graphs(capture.compile, backend, world)
}

/// `mode` for this run in a line: what it sets (the environment's value where it wins), or why
/// it is ignored; `None` for `false`.
pub fn describe(mode: CompileMode, backend: Backend, world: usize) -> Option<String> {
    let s = settings(mode)?;
    Some(match refused(backend, world) {
        Some(why) => format!("compile={mode} ignored ({why})"),
        None => format!(
            "compile={mode}: convolution kernels {}, matmul kernels {}, fusion search {} blocks{}",
            kept(crate::kernel_cache::CONV_KERNELS_ENV, s.conv_kernels),
            kept(crate::kernel_cache::MATMUL_KERNELS_ENV, s.matmul_kernels),
            kept(crate::fusion_search::ENV, &s.fusion_blocks.to_string()),
            if s.graphs { ", CUDA graphs on" } else { "" }
        ),
    })
}

/// What holds for `var` once a mode asks for `value`: the environment's value, if it has one.
fn kept(var: &str, value: &str) -> String {
    match std::env::var(var) {
        Ok(given) => format!("{given} ({var} given, kept over the mode's {value})"),
        Err(_) => value.to_string(),
    }
}

/// Applies `mode` to this process: sets the kernel knobs the user left unset, logging
/// [`describe`]'s line. Must run before the first GPU tensor and before
/// [`crate::kernel_cache::configure`].
pub fn apply(mode: CompileMode, backend: Backend, world: usize) {
    let (Some(s), Some(line)) = (settings(mode), describe(mode, backend, world)) else { return };
    if refused(backend, world).is_some() {
        tracing::warn!("{line}; training runs with the default kernels.");
        return;
    }
    let knobs = [
        (crate::kernel_cache::CONV_KERNELS_ENV, s.conv_kernels.to_string()),
        (crate::kernel_cache::MATMUL_KERNELS_ENV, s.matmul_kernels.to_string()),
        (crate::fusion_search::ENV, s.fusion_blocks.to_string()),
    ];
    for (var, value) in knobs {
        if std::env::var_os(var).is_none() {
            // SAFETY: called at the start of training, before any thread that reads the
            // environment exists (burn and cubecl read these at their first use).
            unsafe { std::env::set_var(var, value) };
        }
    }
    tracing::info!("{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_maps_to_its_knobs() {
        assert_eq!(settings(CompileMode::Off), None);
        let d = settings(CompileMode::Default).unwrap();
        assert_eq!((d.conv_kernels, d.fusion_blocks, d.graphs), ("fixed", 5, false));
        assert!(settings(CompileMode::ReduceOverhead).unwrap().graphs);
        let m = settings(CompileMode::MaxAutotune).unwrap();
        assert_eq!((m.conv_kernels, m.matmul_kernels, m.graphs), ("all", "all", true));
        let n = settings(CompileMode::MaxAutotuneNoCudagraphs).unwrap();
        assert_eq!((n.conv_kernels, n.matmul_kernels, n.graphs), ("all", "all", false));
        assert_eq!(d.matmul_kernels, "fixed");
        // Every mode's convolution policy is one burn-cubecl accepts.
        for (_, mode) in CompileMode::MODES {
            burn_cubecl::kernel::conv::selection::Policy::parse(settings(mode).unwrap().conv_kernels).unwrap();
            burn_cubecl::kernel::matmul::matmul_policy(settings(mode).unwrap().matmul_kernels).unwrap();
        }
    }

    #[test]
    fn modes_apply_to_one_cuda_device_only() {
        assert!(implies_graphs(CompileMode::ReduceOverhead, Backend::Cuda, 1));
        assert!(!implies_graphs(CompileMode::ReduceOverhead, Backend::Cpu, 1));
        assert!(!implies_graphs(CompileMode::MaxAutotune, Backend::Cuda, 2));
        assert!(!implies_graphs(CompileMode::MaxAutotuneNoCudagraphs, Backend::Cuda, 1));
        assert!(refused(Backend::Cpu, 1).unwrap().contains("not CUDA"));
        assert!(refused(Backend::Cuda, 2).unwrap().contains("2 GPUs"));
    }
}
