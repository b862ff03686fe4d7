//! Where compiled GPU kernels and autotune results are kept between runs.
//!
//! The first run of a kernel compiles it with NVRTC and autotunes it (minutes for a whole
//! network); cubecl can persist both. By default cubecl stores them under the outermost Cargo
//! workspace's `target/` or the user cache; we pin one directory so that a run outside the
//! source tree (the GPU machine) and a run inside it share the cache, and so it can be copied
//! between machines. The compiled kernels are kept there too (cubecl's compilation cache, off by
//! default): CUBIN for the device's architecture, which our cubecl-cuda patch has NVRTC emit
//! instead of PTX, so a copied cache loads without the driver's JIT (vendor/README.md). Each
//! warm-up also appends its autotune decisions and kernel compilations
//! there (`autotune-decisions.jsonl`, `compilations.log`), so warm-up cost can be attributed.

use std::path::PathBuf;

use cubecl_environment::config::RuntimeConfig;
use cubecl_runtime::config::CubeClRuntimeConfig;
use serde::{Deserialize, Serialize};

/// Environment variable naming the cache directory.
pub const CACHE_ENV: &str = "LIBREYOLO_KERNEL_CACHE";

/// Convolution kernel selection read by our patched burn-cubecl (vendor/README.md): `all`
/// (upstream: benchmark every candidate), `gemm`, `fixed[:NAMES]`.
pub const CONV_KERNELS_ENV: &str = "BURN_CONV_KERNELS";

/// Our default selection: nothing benchmarked, each direction's measured preference first.
/// Upstream's `all` spent most of a cold warm-up autotuning the matmuls nested in its im2col
/// candidates; `gemm` tunes among the implicit-GEMM kernels (docs/history/).
pub const DEFAULT_CONV_KERNELS: &str = "fixed";

/// Convolution kernels that multiply and add in f32 (no TF32 tensor cores), for checks against
/// the CPU: `bench network --check` runs them unless `BURN_CONV_KERNELS` is set.
pub const EXACT_F32_CONV_KERNELS: &str = "fixed:conv_direct,dgrad_fallback,wgrad_fallback";

/// Matmul kernel selection read by our patched burn-cubecl (vendor/README.md): `all` (upstream:
/// autotune every new shape), `fixed` (cubek's own choice, nothing benchmarked).
pub const MATMUL_KERNELS_ENV: &str = burn_cubecl::kernel::matmul::MATMUL_KERNELS_ENV;

/// Our default: upstream's autotune compiled ~20 candidates a new matmul shape, 40-60 s each
/// shape on the H200, which left RT-DETR's first training step minutes long (docs/history/).
pub const DEFAULT_MATMUL_KERNELS: &str = "fixed";

/// The convolution kernel selection this process uses (the environment's, else ours).
pub fn conv_kernels() -> String {
    std::env::var(CONV_KERNELS_ENV).unwrap_or_else(|_| DEFAULT_CONV_KERNELS.to_string())
}

/// Checks `BURN_CONV_KERNELS` and `BURN_MATMUL_KERNELS` before anything runs: burn-cubecl would
/// only warn, at the first convolution or matmul, and fall back to benchmarking every kernel
/// (minutes of warm-up).
pub fn check_conv_kernels() -> Result<(), String> {
    burn_cubecl::kernel::conv::selection::Policy::parse(&conv_kernels()).map(drop)?;
    burn_cubecl::kernel::matmul::matmul_policy(&std::env::var(MATMUL_KERNELS_ENV).unwrap_or_default()).map(drop)
}

/// The cache directory: `$LIBREYOLO_KERNEL_CACHE`, else `~/.cache/libreyolo-run/kernels`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(CACHE_ENV) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    home.join("libreyolo-run").join("kernels")
}

/// Whether one of `names` is in the working directory or above it: where cubecl and burn look
/// for their configuration files, which then win over ours.
pub fn config_file_above(names: &[&str]) -> bool {
    std::env::current_dir().ok().is_some_and(|dir| dir.ancestors().any(|d| names.iter().any(|n| d.join(n).exists())))
}

/// Points cubecl at `cache_dir()` unless a `cubecl.toml` in the working directory (or above)
/// already configures it, and sets burn-fusion's search width (`fusion_search`). Must run before
/// the first GPU tensor; later calls do nothing.
pub fn configure() -> Option<PathBuf> {
    // A `burn.toml` in the working directory or above sets burn's own configuration.
    if !config_file_above(&["burn.toml", "Burn.toml"]) {
        crate::fusion_search::configure();
    }
    for (var, default) in [(CONV_KERNELS_ENV, DEFAULT_CONV_KERNELS), (MATMUL_KERNELS_ENV, DEFAULT_MATMUL_KERNELS)] {
        if std::env::var_os(var).is_none() {
            // SAFETY: called at the start of a command, before any thread that reads the
            // environment exists; burn-cubecl reads it at the first convolution or matmul.
            unsafe { std::env::set_var(var, default) };
        }
    }
    if config_file_above(&["cubecl.toml", "CubeCL.toml"]) {
        return None;
    }
    let dir = cache_dir();
    let _ = std::fs::create_dir_all(&dir);
    // Environment overrides (CUBECL_AUTOTUNE_LEVEL, CUBECL_DEBUG_LOG, ...) still apply.
    let mut config = CubeClRuntimeConfig::default().override_from_env();
    config.environment.path = cubecl_environment::persistence::CacheConfig::Directory(dir.clone());
    // Compiled kernels (CUBIN) persist too: off by default in cubecl, and without it every run
    // recompiles every kernel with NVRTC even when the autotune results are cached.
    config.compilation.cache = true;
    // One JSON line per autotune decision (key, every candidate's time, the winner) and one log
    // line per kernel compilation, beside the cache: what a warm-up spent its time on.
    if !config.autotune.decisions_enabled() {
        config.autotune.decisions.file = Some(dir.join("autotune-decisions.jsonl"));
    }
    if config.compilation.logger.file.is_none() && !config.compilation.logger.stdout && !config.compilation.logger.stderr {
        config.compilation.logger.file = Some(dir.join("compilations.log"));
        config.compilation.logger.level = cubecl_runtime::config::compilation::CompilationLogLevel::Basic;
    }
    CubeClRuntimeConfig::try_set(config).then_some(dir)
}

/// Kernel compilation spent by this process so far: what a warm-up paid NVRTC and the driver
/// (our cubecl-cuda patch counts it; vendor/README.md).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompileCost {
    /// Kernels compiled by NVRTC, and the seconds it took (summed over the compiler threads).
    pub compiled: u64,
    pub nvrtc_s: f64,
    /// Of those, the kernels a dry run compiled in the background ([`crate::precompile`]), and
    /// the seconds launches waited for them.
    #[serde(default)]
    pub background: u64,
    #[serde(default)]
    pub waited_s: f64,
    /// Seconds the launching thread spent in NVRTC (everything outside a dry run) and defining
    /// and transpiling kernels: with a dry run, what its compiler threads did not take over.
    #[serde(default)]
    pub foreground_nvrtc_s: f64,
    #[serde(default)]
    pub transpile_s: f64,
    /// Modules loaded (compiled or read from the cache), and the seconds `cuModuleLoadData`
    /// took: the driver's JIT when the artifacts are PTX.
    pub loaded: u64,
    pub module_load_s: f64,
    /// The kinds of kernel that took the most NVRTC time, the most expensive first.
    #[serde(default)]
    pub by_kernel: Vec<KernelCompileCost>,
}

/// NVRTC time of one kind of kernel (`ElemwiseFuse`, `MatmulEntry`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelCompileCost {
    pub kernel: String,
    pub compiled: u64,
    pub nvrtc_s: f64,
}

/// Kinds of kernel a [`CompileCost`] keeps.
const KERNEL_KINDS_KEPT: usize = 8;

/// What this process has compiled so far; `None` when nothing was (the CPU).
pub fn compile_cost() -> Option<CompileCost> {
    let s = cubecl_cuda::compile_stats();
    let by_kernel = cubecl_cuda::compile_stats_by_kernel()
        .into_iter()
        .take(KERNEL_KINDS_KEPT)
        .map(|k| KernelCompileCost { kernel: k.kernel.to_string(), compiled: k.compiled, nvrtc_s: k.nvrtc_s })
        .collect();
    (s.loaded > 0 || s.compiled > 0).then_some(CompileCost {
        compiled: s.compiled,
        nvrtc_s: s.nvrtc_s,
        background: s.background,
        waited_s: s.waited_s,
        foreground_nvrtc_s: s.foreground_nvrtc_s,
        transpile_s: s.transpile_s,
        loaded: s.loaded,
        module_load_s: s.module_load_s,
        by_kernel,
    })
}

impl std::fmt::Display for CompileCost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let target = cubecl_cuda::nvrtc_settings().target;
        write!(f, "{} kernels compiled (NVRTC {:.1} s, {target:?}", self.compiled, self.nvrtc_s)?;
        if self.background > 0 {
            write!(
                f,
                "; {} on the compiler threads, waited for {:.1} s; launching thread: NVRTC {:.1} s, transpiling {:.1} s",
                self.background, self.waited_s, self.foreground_nvrtc_s, self.transpile_s
            )?;
        }
        write!(f, "), {} modules loaded ({:.1} s)", self.loaded, self.module_load_s)?;
        if !self.by_kernel.is_empty() {
            let kinds: Vec<String> = self.by_kernel.iter().map(|k| format!("{} {} ({:.1} s)", k.kernel, k.compiled, k.nvrtc_s)).collect();
            write!(f, "; most NVRTC time: {}", kinds.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exact-f32 convolution selection `bench network --check` sets is a `fixed:` list that
    /// puts the three f32 kernels first (the names burn-cubecl's tuners give them).
    #[test]
    fn the_exact_f32_convolution_kernels_parse() {
        use burn_cubecl::kernel::conv::selection::Policy;
        let names = ["conv_direct", "dgrad_fallback", "wgrad_fallback"].map(String::from).to_vec();
        assert_eq!(Policy::parse(EXACT_F32_CONV_KERNELS), Ok(Policy::Fixed(names)));
    }

    /// Nothing runs on a GPU in this process: no compile cost to report, so a CPU profile prints
    /// no compilation line.
    #[test]
    fn the_cpu_compiles_nothing() {
        assert_eq!(compile_cost(), None);
    }

    /// The warm-up line names the totals and the most expensive kinds of kernel, in order.
    #[test]
    fn the_compile_cost_names_its_most_expensive_kernels() {
        let kind = |kernel: &str, compiled, nvrtc_s| KernelCompileCost { kernel: kernel.into(), compiled, nvrtc_s };
        let cost = CompileCost {
            compiled: 616,
            nvrtc_s: 72.84,
            background: 0,
            waited_s: 0.0,
            foreground_nvrtc_s: 72.84,
            transpile_s: 3.0,
            loaded: 616,
            module_load_s: 0.07,
            by_kernel: vec![kind("ElemwiseFuse", 480, 40.12), kind("MatmulEntry", 60, 20.3)],
        };
        let line = cost.to_string();
        assert!(line.starts_with("616 kernels compiled (NVRTC 72.8 s, Cubin), 616 modules loaded (0.1 s)"), "{line}");
        assert!(line.ends_with("; most NVRTC time: ElemwiseFuse 480 (40.1 s), MatmulEntry 60 (20.3 s)"), "{line}");
        assert!(!CompileCost { by_kernel: vec![], ..cost.clone() }.to_string().contains("most NVRTC time"));
        let threaded = CompileCost { background: 600, waited_s: 6.27, foreground_nvrtc_s: 9.04, ..cost }.to_string();
        assert!(
            threaded.starts_with("616 kernels compiled (NVRTC 72.8 s, Cubin; 600 on the compiler threads, waited for 6.3 s; launching thread: NVRTC 9.0 s, transpiling 3.0 s), 616 modules"),
            "{threaded}"
        );
    }
}
