//! Where compiled GPU kernels and autotune results are kept between runs.
//!
//! The first run of a kernel compiles it with NVRTC and autotunes it (minutes for a whole
//! network); cubecl can persist both. By default cubecl stores them under the outermost Cargo
//! workspace's `target/` or the user cache; we pin one directory so that a run outside the
//! source tree (the GPU machine) and a run inside it share the cache, and so it can be carried
//! between machines. The PTX of compiled kernels is kept there too (cubecl's compilation cache,
//! off by default), and `scripts/gpu.sh` points the driver's own JIT cache (`CUDA_CACHE_PATH`)
//! inside it. Each warm-up also appends its autotune decisions and kernel compilations
//! there (`autotune-decisions.jsonl`, `compilations.log`), so warm-up cost can be attributed.

use std::path::PathBuf;

use cubecl_environment::config::RuntimeConfig;
use cubecl_runtime::config::CubeClRuntimeConfig;

/// Environment variable naming the cache directory.
pub const CACHE_ENV: &str = "LIBREYOLO_KERNEL_CACHE";

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

/// Points cubecl at `cache_dir()` unless a `cubecl.toml` in the working directory (or above)
/// already configures it. Must run before the first GPU tensor; later calls do nothing.
pub fn configure() -> Option<PathBuf> {
    let has_config_file = std::env::current_dir().ok().is_some_and(|dir| {
        dir.ancestors().any(|d| d.join("cubecl.toml").exists() || d.join("CubeCL.toml").exists())
    });
    if has_config_file {
        return None;
    }
    let dir = cache_dir();
    let _ = std::fs::create_dir_all(&dir);
    // Environment overrides (CUBECL_AUTOTUNE_LEVEL, CUBECL_DEBUG_LOG, ...) still apply.
    let mut config = CubeClRuntimeConfig::default().override_from_env();
    config.environment.path = cubecl_environment::persistence::CacheConfig::Directory(dir.clone());
    // Compiled kernels (PTX) persist too: off by default in cubecl, and without it every run
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
