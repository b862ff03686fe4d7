//! A captured step's kernels compiled on every core before its first real run.
//!
//! On a cold kernel cache the first training step compiles ~600 kernels with NVRTC, one after
//! another on the thread that launches them: 73 s of a 105 s warm-up on the H200 (YOLOv9-t,
//! batch 8; docs/performance.md). Run first as cubecl's dry run, where every launch is compiled
//! and dropped, the step hands each compilation to our cubecl-cuda's compiler threads
//! (vendor/README.md) and returns; its first real run then waits only for what is still
//! compiling, and loads it.
//!
//! A dry run computes nothing, and it is process-wide: it suits a step with no host reads (a
//! captured segment), must not overlap real work on another thread, and whatever state the step
//! writes must be restored after it (the caller's part). Data-parallel runs do without: their
//! replicas share a process (threads) or meet in collectives inside the step (processes).

use std::time::Instant;

use burn::tensor::Device;
use cubecl_runtime::dry_run::DryRun;

use crate::device::Backend;

/// Environment variable: `0` compiles each kernel at its first real launch instead (upstream's
/// way; for A/B measurements of the warm-up).
pub const ENV: &str = "LIBREYOLO_PRECOMPILE";

/// Whether a captured step's first batch runs as a dry run first: on CUDA, on one GPU, unless
/// `LIBREYOLO_PRECOMPILE=0`.
pub fn wanted(backend: Backend, world: usize) -> bool {
    backend == Backend::Cuda && world == 1 && std::env::var(ENV).map_or(true, |v| v != "0")
}

/// Runs `step` on `device` as a dry run: its kernels are compiled (in the background) and none
/// runs. `what` names the step in the log.
pub fn dry_run<T>(device: &Device, what: &str, step: impl FnOnce() -> T) {
    let started = Instant::now();
    let before = crate::kernel_cache::compile_cost().map_or(0, |c| c.background);
    {
        let _dry = DryRun::new();
        drop(step());
        // Fused operations launch when their stream is flushed: inside the dry run.
        let _ = device.sync();
    }
    let handed = crate::kernel_cache::compile_cost().map_or(0, |c| c.background) - before;
    tracing::info!("{what}: {handed} kernels handed to the compiler threads by a dry run in {:.1} s", started.elapsed().as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU backend has no dry run (it would run the step for real), and replicas would
    /// share the process-wide dry run or meet inside it.
    #[test]
    fn only_a_single_cuda_device_dry_runs() {
        assert!(!wanted(Backend::Cpu, 1));
        assert!(!wanted(Backend::Cuda, 2));
        if std::env::var_os(ENV).is_none() {
            assert!(wanted(Backend::Cuda, 1));
        }
    }
}
