//! Picking the compute device: `auto` takes CUDA when a GPU is present and the CPU (flex)
//! otherwise. CUDA is only touched after enumeration finds a device, so a GPU-less machine
//! never loads the driver.

use burn::tensor::{Device, DeviceType};

use crate::manifest::DeviceRequest;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// burn-flex: pure-Rust CPU backend.
    Cpu,
    Cuda,
}

/// The devices a run will use.
#[derive(Debug, Clone)]
pub struct ResolvedDevice {
    pub backend: Backend,
    /// CUDA ordinals (empty for the CPU).
    pub ids: Vec<usize>,
    /// Why this device: shown by `--dry-run`.
    pub reason: String,
}

impl ResolvedDevice {
    /// One burn device per GPU (or the CPU), without autodiff.
    pub fn devices(&self) -> Vec<Device> {
        match self.backend {
            Backend::Cpu => vec![Device::flex()],
            Backend::Cuda => self.ids.iter().map(|&i| Device::cuda(i)).collect(),
        }
    }

    pub fn describe(&self) -> String {
        match self.backend {
            Backend::Cpu => format!("cpu (flex) - {}", self.reason),
            Backend::Cuda => {
                let ids: Vec<String> = self.ids.iter().map(|i| format!("cuda:{i}")).collect();
                format!("{} - {}", ids.join(", "), self.reason)
            }
        }
    }
}

/// Number of CUDA devices; 0 (never a panic) when there is no driver or no GPU.
pub fn cuda_device_count() -> usize {
    // cudarc loads libcuda lazily and enumeration reports failure as an empty list.
    std::panic::catch_unwind(|| Device::enumerate(DeviceType::Cuda).len()).unwrap_or(0)
}

/// Resolves a manifest's `run.device` against this machine.
pub fn resolve(request: &DeviceRequest) -> Result<ResolvedDevice, String> {
    resolve_with(request, cuda_device_count)
}

/// `resolve` with the GPU count supplied (tests run it without a GPU).
pub fn resolve_with(request: &DeviceRequest, cuda_count: impl FnOnce() -> usize) -> Result<ResolvedDevice, String> {
    match request {
        DeviceRequest::Cpu => Ok(ResolvedDevice { backend: Backend::Cpu, ids: vec![], reason: "device=cpu".into() }),
        DeviceRequest::Auto => {
            let n = cuda_count();
            Ok(if n > 0 {
                ResolvedDevice { backend: Backend::Cuda, ids: vec![0], reason: format!("device=auto, {n} CUDA device(s) found") }
            } else {
                ResolvedDevice { backend: Backend::Cpu, ids: vec![], reason: "device=auto, no CUDA device found".into() }
            })
        }
        DeviceRequest::Cuda(ids) => {
            let n = cuda_count();
            if n == 0 {
                return Err(format!("device={request} asks for CUDA, but no CUDA device is available on this machine; use device=cpu or device=auto"));
            }
            if let Some(bad) = ids.iter().find(|&&i| i >= n) {
                return Err(format!("device={request} asks for GPU {bad}, but this machine has {n} CUDA device(s) (0..{})", n - 1));
            }
            Ok(ResolvedDevice { backend: Backend::Cuda, ids: ids.clone(), reason: format!("device={request}") })
        }
    }
}

/// The `[run]` settings the CUDA backend reads from its environment: `deterministic` (every full
/// sum takes our burn-cubecl patch's chained reduction) and `weight_gradient`. The backend reads
/// each once, so this must run before its first kernel and before any other thread starts: the
/// commands call it right after loading the manifest. A variable set by hand wins.
pub fn apply_kernel_settings(run: &crate::manifest::RunSettings) {
    use burn_cubecl::kernel::{conv::WGRAD_MMA_ENV, reduce::DETERMINISTIC_SUM_ENV};
    let wanted = [(DETERMINISTIC_SUM_ENV, run.deterministic.then_some("1")), (WGRAD_MMA_ENV, run.weight_gradient.env_value())];
    for (var, value) in wanted {
        if let Some(value) = value
            && std::env::var_os(var).is_none()
        {
            // SAFETY: called on the main thread before the loader, replica or backend threads
            // exist, so no other thread reads the environment concurrently.
            unsafe { std::env::set_var(var, value) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_falls_back_to_cpu_without_gpus() {
        let d = resolve_with(&DeviceRequest::Auto, || 0).unwrap();
        assert_eq!(d.backend, Backend::Cpu);
        let d = resolve_with(&DeviceRequest::Auto, || 2).unwrap();
        assert_eq!((d.backend, d.ids), (Backend::Cuda, vec![0]));
    }

    #[test]
    fn explicit_gpus_must_exist() {
        let err = resolve_with(&DeviceRequest::Cuda(vec![0]), || 0).unwrap_err();
        assert!(err.contains("no CUDA device is available"), "{err}");
        let err = resolve_with(&DeviceRequest::Cuda(vec![0, 2]), || 2).unwrap_err();
        assert!(err.contains("asks for GPU 2"), "{err}");
        assert!(resolve_with(&DeviceRequest::Cuda(vec![0, 1]), || 2).is_ok());
    }

    #[test]
    fn enumeration_does_not_panic_here() {
        // On a machine without a GPU this must be 0, not a crash.
        let _ = cuda_device_count();
    }
}
