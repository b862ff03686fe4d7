//! How kernels are compiled with NVRTC, and what compiling them costs (libreyolo-run patch; see
//! vendor/README.md).
//!
//! Upstream asks NVRTC for PTX and hands it to `cuModuleLoadData`, so every kernel is compiled
//! twice on a cold start: CUDA C++ to PTX by NVRTC, then PTX to machine code by the driver's JIT.
//! The PTX persisted in cubecl's cache is JIT-compiled again by every new process on a machine
//! whose driver cache (`CUDA_CACHE_PATH`) is empty. We ask NVRTC for the CUBIN of the device's
//! own architecture instead (one compilation; the cache then holds machine code the driver loads
//! as it is). Two environment variables select otherwise, for A/B measurements:
//!
//! - `CUBECL_CUDA_NVRTC_TARGET=ptx` — upstream's PTX (`cubin` is the default);
//! - `CUBECL_CUDA_NVRTC_OPTIONS="-lineinfo -pch"` — extra NVRTC options, whitespace-separated
//!   (upstream always passed `-lineinfo`; `-pch` is NVRTC's automatic precompiled header).
//!
//! - `CUBECL_CUDA_NVRTC_THREADS=N` — how many threads compile a dry run's kernels (one per
//!   core by default; see [`compile_in_background`]).
//!
//! [`compile_stats`] reports the time spent, and [`compile_stats_by_kernel`] which kernels
//! spent it, so warm-up can be attributed.

use cubecl_environment::backtrace::BackTrace;
use cubecl_server::compiler::CompilationError;
use std::ffi::{CStr, CString, c_char};
use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock, mpsc};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::install::{cccl_include_path, include_path};

/// What NVRTC hands back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Machine code for the device's architecture: loads without the driver's JIT.
    Cubin,
    /// PTX: the driver JIT-compiles it at every load it has not cached itself.
    Ptx,
}

/// The NVRTC settings of this process, read once from the environment.
#[derive(Debug, Clone)]
pub struct Settings {
    pub target: Target,
    pub extra_options: Vec<String>,
}

/// This process's settings (`CUBECL_CUDA_NVRTC_TARGET`, `CUBECL_CUDA_NVRTC_OPTIONS`).
///
/// # Panics
/// On a target other than `cubin` or `ptx`: a typo would silently measure the default.
pub fn settings() -> &'static Settings {
    static SETTINGS: OnceLock<Settings> = OnceLock::new();
    SETTINGS.get_or_init(|| {
        let target = match std::env::var("CUBECL_CUDA_NVRTC_TARGET").as_deref() {
            Err(_) | Ok("") | Ok("cubin") => Target::Cubin,
            Ok("ptx") => Target::Ptx,
            Ok(other) => panic!("CUBECL_CUDA_NVRTC_TARGET={other}: expected `cubin` or `ptx`"),
        };
        let extra_options = std::env::var("CUBECL_CUDA_NVRTC_OPTIONS")
            .map(|s| s.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default();
        Settings { target, extra_options }
    })
}

/// The cache namespace part that tells CUBIN and PTX artifacts apart: a PTX entry would load
/// either way, but through the driver's JIT, which is what the CUBIN target exists to avoid.
pub(crate) fn artifact_kind() -> &'static str {
    match settings().target {
        Target::Cubin => "cubin",
        Target::Ptx => "ptx",
    }
}

/// Compile time spent by this process since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CompileStats {
    /// Kernels compiled by NVRTC, on the launching thread or in the background.
    pub compiled: u64,
    /// Seconds inside NVRTC, summed over the threads that ran it.
    pub nvrtc_s: f64,
    /// Of `compiled`, the kernels a dry run handed to the compiler threads.
    pub background: u64,
    /// Seconds the launching threads waited for those to finish.
    pub waited_s: f64,
    /// Of `nvrtc_s`, the seconds on the launching threads (every compilation outside a dry run).
    pub foreground_nvrtc_s: f64,
    /// Seconds the launching threads spent defining kernels and transpiling them to CUDA C++.
    pub transpile_s: f64,
    /// Modules loaded (compiled now or read from the persistent cache).
    pub loaded: u64,
    /// Seconds inside `cuModuleLoadData`: the driver's JIT for PTX, a copy for CUBIN.
    pub module_load_s: f64,
}

static LOADED: AtomicU64 = AtomicU64::new(0);
static LOAD_NS: AtomicU64 = AtomicU64::new(0);
static BACKGROUND: AtomicU64 = AtomicU64::new(0);
static WAITED_NS: AtomicU64 = AtomicU64::new(0);
static FOREGROUND_NS: AtomicU64 = AtomicU64::new(0);
static TRANSPILE_NS: AtomicU64 = AtomicU64::new(0);

/// Compile time spent by this process so far, over all devices.
pub fn compile_stats() -> CompileStats {
    let seconds = |ns: &AtomicU64| ns.load(Ordering::Relaxed) as f64 * 1e-9;
    let by_kernel = compile_stats_by_kernel();
    CompileStats {
        compiled: by_kernel.iter().map(|k| k.compiled).sum(),
        nvrtc_s: by_kernel.iter().map(|k| k.nvrtc_s).sum(),
        background: BACKGROUND.load(Ordering::Relaxed),
        waited_s: seconds(&WAITED_NS),
        foreground_nvrtc_s: seconds(&FOREGROUND_NS),
        transpile_s: seconds(&TRANSPILE_NS),
        loaded: LOADED.load(Ordering::Relaxed),
        module_load_s: seconds(&LOAD_NS),
    }
}

/// NVRTC time of one kind of kernel (its type name's last segment, e.g. `ElemwiseFuse`).
#[derive(Debug, Clone, PartialEq)]
pub struct KernelCompileStats {
    pub kernel: &'static str,
    pub compiled: u64,
    pub nvrtc_s: f64,
}

static BY_KERNEL: Mutex<BTreeMap<&'static str, (u64, Duration)>> = Mutex::new(BTreeMap::new());

/// NVRTC time per kind of kernel so far, the most expensive first.
pub fn compile_stats_by_kernel() -> Vec<KernelCompileStats> {
    let by_kernel = BY_KERNEL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut rows: Vec<KernelCompileStats> = by_kernel
        .iter()
        .map(|(&kernel, &(compiled, total))| KernelCompileStats { kernel, compiled, nvrtc_s: total.as_secs_f64() })
        .collect();
    rows.sort_by(|a, b| b.nvrtc_s.total_cmp(&a.nvrtc_s));
    rows
}

fn add(counter: &AtomicU64, total: &AtomicU64, elapsed: Duration) {
    counter.fetch_add(1, Ordering::Relaxed);
    total.fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
}

/// Counts `elapsed` of defining and transpiling a kernel on a launching thread.
pub(crate) fn record_transpile(elapsed: Duration) {
    TRANSPILE_NS.fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
}

/// Counts one `cuModuleLoadData` that took `elapsed`.
pub(crate) fn record_module_load(elapsed: Duration) {
    add(&LOADED, &LOAD_NS, elapsed);
}

/// Compiles `source` for the architecture `sm_{arch}` to this process's [`Target`]; `kernel`
/// names its kind in [`compile_stats_by_kernel`].
///
/// # Errors
/// [`CompilationError::Generic`] carrying the compiler's own log and the source that produced
/// it, so a kernel the compiler refuses says why.
pub(crate) fn compile(source: &str, arch: u32, kernel: &'static str) -> Result<Vec<c_char>, CompilationError> {
    let (result, elapsed) = compile_counted(source, arch, kernel);
    FOREGROUND_NS.fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
    result
}

/// [`compile`] on any thread, counted per kind of kernel; also returns how long it took.
fn compile_counted(source: &str, arch: u32, kernel: &'static str) -> (Result<Vec<c_char>, CompilationError>, Duration) {
    let started = Instant::now();
    let result = compile_untimed(source, arch);
    let elapsed = started.elapsed();
    let mut by_kernel = BY_KERNEL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let entry = by_kernel.entry(kernel).or_default();
    entry.0 += 1;
    entry.1 += elapsed;
    (result, elapsed)
}

/// A compilation running on one of the compiler threads (see [`compile_in_background`]).
#[derive(Debug)]
pub(crate) struct Background {
    result: mpsc::Receiver<Result<Vec<c_char>, CompilationError>>,
}

impl Background {
    /// The compiled artifact, once the compiler thread has it.
    pub(crate) fn wait(self) -> Result<Vec<c_char>, CompilationError> {
        let started = Instant::now();
        let result = self.result.recv().unwrap_or_else(|_| Err(generic("the NVRTC compiler thread died")));
        WAITED_NS.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        result
    }
}

/// Starts [`compile`] on the compiler threads and returns at once.
///
/// A dry run (cubecl's `DryRun`) launches every kernel of a workload without running any, so
/// its compilations need not wait for each other: NVRTC compiles each program on its own, and
/// is thread-safe. One after another on the launching thread, a cold YOLOv9-t training step
/// spent ~73 s in NVRTC (616 kernels at ~118 ms).
pub(crate) fn compile_in_background(source: String, arch: u32, kernel: &'static str) -> Background {
    let (sender, result) = mpsc::channel();
    BACKGROUND.fetch_add(1, Ordering::Relaxed);
    compiler_threads().spawn(move || {
        let _ = sender.send(compile_counted(&source, arch, kernel).0);
    });
    Background { result }
}

/// The compiler threads: `CUBECL_CUDA_NVRTC_THREADS`, else one per core.
///
/// # Panics
/// On a value of `CUBECL_CUDA_NVRTC_THREADS` that is not a positive number.
fn compiler_threads() -> &'static rayon::ThreadPool {
    static THREADS: OnceLock<rayon::ThreadPool> = OnceLock::new();
    THREADS.get_or_init(|| {
        let threads = match std::env::var("CUBECL_CUDA_NVRTC_THREADS").as_deref() {
            Err(_) | Ok("") => std::thread::available_parallelism().map_or(4, |n| n.get()),
            Ok(n) => n
                .parse()
                .ok()
                .filter(|&n| n > 0)
                .unwrap_or_else(|| panic!("CUBECL_CUDA_NVRTC_THREADS={n}: expected a positive number")),
        };
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("nvrtc-{i}"))
            .build()
            .expect("the NVRTC compiler threads could not start")
    })
}

fn generic(reason: impl std::fmt::Display) -> CompilationError {
    CompilationError::Generic { reason: reason.to_string(), backtrace: BackTrace::capture() }
}

fn compile_untimed(source: &str, arch: u32) -> Result<Vec<c_char>, CompilationError> {
    let settings = settings();
    // `sm_90a` and later name a real architecture, so NVRTC can emit its CUBIN.
    let arch = if arch >= 90 {
        format!("--gpu-architecture=sm_{arch}a")
    } else {
        format!("--gpu-architecture=sm_{arch}")
    };
    let include_option = format!("--include-path={}", include_path().to_str().unwrap());
    let cccl_include_path = cccl_include_path();
    let cccl_include_option = format!("--include-path={}", cccl_include_path.to_str().unwrap());
    let mut options = vec![arch.as_str(), include_option.as_str()];
    if cccl_include_path.exists() {
        options.push(&cccl_include_option);
    }
    options.extend(settings.extra_options.iter().map(String::as_str));

    let c_source = CString::new(source).map_err(generic)?;
    let program = cudarc::nvrtc::result::create_program(c_source.as_c_str(), None).map_err(generic)?;
    // SAFETY: `program` is a live NVRTC program created above; it is destroyed exactly once,
    // below, after its outputs were copied out.
    let output = unsafe {
        let output = match cudarc::nvrtc::result::compile_program(program, &options) {
            Err(_) => Err(compile_error(program, source)),
            Ok(()) => match settings.target {
                Target::Ptx => cudarc::nvrtc::result::get_ptx(program).map_err(generic),
                Target::Cubin => get_cubin(program),
            },
        };
        let _ = cudarc::nvrtc::result::destroy_program(program);
        output
    };
    output
}

/// The compiler's log of a failed compilation, with the source.
///
/// # Safety
/// `program` must be a live NVRTC program.
unsafe fn compile_error(program: cudarc::nvrtc::sys::nvrtcProgram, source: &str) -> CompilationError {
    // SAFETY: per the function's contract; the log is null-terminated by NVRTC.
    let log = match unsafe { cudarc::nvrtc::result::get_program_log(program) } {
        Ok(raw) => unsafe { CStr::from_ptr(raw.as_ptr()) }.to_string_lossy().into_owned(),
        Err(err) => return generic(err),
    };
    let mut message = "[Compilation Error] ".to_string();
    for line in log.lines().filter(|line| !line.is_empty()) {
        message += &format!("\n    {line}");
    }
    generic(format!("{message}\n[Source]  \n{source}"))
}

/// The CUBIN of a compiled program (cudarc wraps only the PTX getter).
///
/// # Safety
/// `program` must be a live NVRTC program compiled for a real architecture.
unsafe fn get_cubin(program: cudarc::nvrtc::sys::nvrtcProgram) -> Result<Vec<c_char>, CompilationError> {
    use cudarc::nvrtc::sys;
    let mut size = 0usize;
    // SAFETY: per the function's contract; `cubin` has the size NVRTC asked for.
    unsafe {
        sys::nvrtcGetCUBINSize(program, &mut size).result().map_err(generic)?;
        if size == 0 {
            return Err(generic("NVRTC produced no CUBIN (is the architecture a real one?)"));
        }
        let mut cubin = vec![0 as c_char; size];
        sys::nvrtcGetCUBIN(program, cubin.as_mut_ptr()).result().map_err(generic)?;
        Ok(cubin)
    }
}
