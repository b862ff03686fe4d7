//! Kernel times inside CUDA graph replays, from NVIDIA CUPTI's activity records.
//!
//! A replayed graph issues no launches, so the cubecl observer ([`super::kernels`]) sees none of
//! its kernels. CUPTI's concurrent-kernel activity does: the driver writes a record per kernel it
//! ran (start and end on the device, the function name, and the graph it came from) into buffers
//! CUPTI hands back. The profiler turns it on for the synced half of its window and keeps the
//! records that came from a graph (`graphId != 0`); the observer keeps timing the eager kernels.
//!
//! The library is opened at run time, so a build without CUDA still runs: it is looked for under
//! the usual names, the CUDA toolkit's places and beside the CUDA libraries the process loaded
//! (PyTorch's wheels keep `libcupti` beside `libnvrtc`); `LIBREYOLO_CUPTI` names it, or `0`
//! keeps it off. Without it a replay stays one `cuda graph replay` kernel.

use std::ffi::{CStr, c_char, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use libloading::Library;

use super::analysis::KernelEvent;

/// The environment variable that chooses the CUPTI library: its path, `0` (off), or unset / `1`
/// (looked for). The profiler asks for it only on a CUDA device: on a machine without a driver
/// CUPTI's own calls crash.
pub const LIB_ENV: &str = "LIBREYOLO_CUPTI";

/// Where the library is looked for, after the directories of the loaded CUDA libraries.
const CANDIDATES: &[&str] = &[
    "libcupti.so.13",
    "libcupti.so.12",
    "libcupti.so",
    "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13",
    "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so",
    "/usr/local/cuda/targets/x86_64-linux/lib/libcupti.so.13",
];

/// `CUPTI_ACTIVITY_KIND_KERNEL` and `CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL` (cupti_activity.h).
const KIND_KERNEL: u32 = 3;
const KIND_CONCURRENT_KERNEL: u32 = 10;
/// `cuptiActivityFlushAll` flags: 0 hands back the buffers of completed records;
/// `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED` (1) every buffer, incomplete records included (their
/// timestamps 0). The profiler flushes after each synced step (the device drained), so the
/// driver's device buffer (~100k kernels) never fills over a window.
const FLUSH_COMPLETED: u32 = 0;
const FLUSH_FORCED: u32 = 1;
/// The size of each buffer handed to CUPTI (its samples use 8 MiB, 8-byte aligned).
const BUFFER_BYTES: usize = 8 << 20;

/// Byte offsets in a kernel record (`CUpti_ActivityKernel9` of CUDA 12, `10`/`11` of CUDA 13,
/// `packed(8)`): the prefix up to `graphId` is the same in all three. Checked against a mirror of
/// the C layout in the tests below.
mod offset {
    pub const KIND: usize = 0;
    pub const START: usize = 16;
    pub const END: usize = 24;
    pub const NAME: usize = 104;
    pub const GRAPH_ID: usize = 156;
    /// The bytes a record has at least, `graphId` included.
    pub const LEN: usize = 160;
}

type BufferRequested = extern "C" fn(*mut *mut u8, *mut usize, *mut usize);
type BufferCompleted = extern "C" fn(*mut c_void, u32, *mut u8, usize, usize);

/// The CUPTI entry points used here (each returns a `CUptiResult`, 0 on success).
struct Api {
    register_callbacks: unsafe extern "C" fn(BufferRequested, BufferCompleted) -> u32,
    enable: unsafe extern "C" fn(u32) -> u32,
    flush_all: unsafe extern "C" fn(u32) -> u32,
    next_record: unsafe extern "C" fn(*mut u8, usize, *mut *mut u8) -> u32,
    timestamp: unsafe extern "C" fn(*mut u64) -> u32,
    result_string: unsafe extern "C" fn(u32, *mut *const c_char) -> u32,
    /// Kept open for the process: the function pointers above point into it.
    _lib: Library,
}

impl Api {
    /// Opens `path` and resolves the entry points.
    fn open(path: &str) -> Result<Self, String> {
        // Safety: loading CUPTI runs its initialisers, which only register with the driver.
        let lib = unsafe { Library::new(path) }.map_err(|e| format!("{path}: {e}"))?;
        // Safety: each symbol is declared with the signature of cupti_activity.h / cupti_result.h.
        unsafe {
            macro_rules! sym {
                ($name:literal) => {
                    *lib.get($name).map_err(|e| format!("{path}: {e}"))?
                };
            }
            Ok(Self {
                register_callbacks: sym!(b"cuptiActivityRegisterCallbacks\0"),
                enable: sym!(b"cuptiActivityEnable\0"),
                flush_all: sym!(b"cuptiActivityFlushAll\0"),
                next_record: sym!(b"cuptiActivityGetNextRecord\0"),
                timestamp: sym!(b"cuptiGetTimestamp\0"),
                result_string: sym!(b"cuptiGetResultString\0"),
                _lib: lib,
            })
        }
    }

    /// `Ok` for CUPTI_SUCCESS, else the call and CUPTI's words for the code.
    fn check(&self, call: &str, code: u32) -> Result<(), String> {
        if code == 0 {
            return Ok(());
        }
        let mut text: *const c_char = std::ptr::null();
        // Safety: CUPTI writes a pointer to a static string.
        let said = unsafe { (self.result_string)(code, &mut text) } == 0 && !text.is_null();
        let words = if said { unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned() } else { format!("CUPTI error {code}") };
        Err(format!("{call}: {words}"))
    }
}

/// What `LIBREYOLO_CUPTI` asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Wanted {
    /// `0`: no graph kernel view.
    Off,
    /// A path: that library.
    Path(String),
    /// Unset, empty or `1`: looked for.
    Search,
}

/// What `LIBREYOLO_CUPTI` asks for (unset: looked for).
pub fn requested() -> Wanted {
    wanted(std::env::var(LIB_ENV).ok().as_deref())
}

fn wanted(value: Option<&str>) -> Wanted {
    match value.map(str::trim) {
        Some("0") => Wanted::Off,
        None | Some("" | "1") => Wanted::Search,
        Some(path) => Wanted::Path(path.to_string()),
    }
}

/// The places to try, in order: `libcupti` beside each CUDA library this process mapped (from
/// `maps`, `/proc/self/maps`' text), then [`CANDIDATES`].
fn search_list(maps: &str) -> Vec<String> {
    let mut dirs: Vec<&str> = vec![];
    for path in maps.lines().filter_map(|l| l.split_whitespace().nth(5)) {
        let Some((dir, file)) = path.rsplit_once('/') else { continue };
        let cuda = ["libnvrtc", "libcudart", "libcublas", "libnccl"].iter().any(|p| file.starts_with(p));
        if cuda && !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    let beside = dirs.iter().flat_map(|d| ["libcupti.so.13", "libcupti.so.12", "libcupti.so"].map(|f| format!("{d}/{f}")));
    beside.chain(CANDIDATES.iter().map(|c| c.to_string())).collect()
}

/// The library, opened once; `Err` says why there is none.
fn api() -> &'static Result<Api, String> {
    static API: OnceLock<Result<Api, String>> = OnceLock::new();
    API.get_or_init(|| match requested() {
        Wanted::Off => Err(format!("off ({LIB_ENV}=0)")),
        Wanted::Path(path) => Api::open(&path),
        Wanted::Search => {
            let tried = search_list(&std::fs::read_to_string("/proc/self/maps").unwrap_or_default());
            tried
                .iter()
                .find_map(|c| Api::open(c).ok())
                .ok_or_else(|| format!("no CUPTI library found ({LIB_ENV}=/path/to/libcupti.so.13 names one); tried {}", tried.join(", ")))
        }
    })
}

/// A kernel a graph replay ran, on CUPTI's clock (ns).
#[derive(Debug, Clone, PartialEq)]
pub struct GraphKernel {
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub graph_id: u32,
}

/// The records of completed buffers, until the trace that asked for them takes them.
static RECORDS: Mutex<Vec<GraphKernel>> = Mutex::new(vec![]);
/// A trace is live: outside one, completed buffers are dropped.
static COLLECTING: AtomicBool = AtomicBool::new(false);

fn buffer_layout() -> std::alloc::Layout {
    std::alloc::Layout::from_size_align(BUFFER_BYTES, 8).expect("a valid layout")
}

extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    // Safety: CUPTI passes valid out-pointers; the buffer is freed in `buffer_completed`.
    unsafe {
        let ptr = std::alloc::alloc(buffer_layout());
        *buffer = ptr;
        *size = if ptr.is_null() { 0 } else { BUFFER_BYTES };
        *max_records = 0; // as many as fit
    }
}

extern "C" fn buffer_completed(_context: *mut c_void, _stream: u32, buffer: *mut u8, _size: usize, valid: usize) {
    if buffer.is_null() {
        return;
    }
    if COLLECTING.load(Ordering::Acquire)
        && let Ok(api) = api()
    {
        let mut kept = vec![];
        let mut record: *mut u8 = std::ptr::null_mut();
        // Safety: CUPTI walks its own buffer.
        while unsafe { (api.next_record)(buffer, valid, &mut record) } == 0 {
            // Safety: every record starts with its kind; only a kernel record (at least
            // `offset::LEN` bytes) is read further.
            let kind = unsafe { std::ptr::read_unaligned(record as *const u32) };
            if kind == KIND_CONCURRENT_KERNEL || kind == KIND_KERNEL {
                let bytes = unsafe { std::slice::from_raw_parts(record, offset::LEN) };
                kept.extend(parse_kernel(bytes));
            }
        }
        RECORDS.lock().expect("CUPTI records").extend(kept);
    }
    // Safety: allocated by `buffer_requested` with the same layout.
    unsafe { std::alloc::dealloc(buffer, buffer_layout()) };
}

fn read_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn read_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// A kernel record launched by a graph, or `None` (another kind, an eager launch, which the
/// cubecl observer times, or a record without timestamps).
fn parse_kernel(record: &[u8]) -> Option<GraphKernel> {
    let kind = read_u32(record, offset::KIND);
    if kind != KIND_CONCURRENT_KERNEL && kind != KIND_KERNEL {
        return None;
    }
    let graph_id = read_u32(record, offset::GRAPH_ID);
    // An eager launch (the observer has it), or a record the driver could not time.
    let (start_ns, end_ns) = (read_u64(record, offset::START), read_u64(record, offset::END));
    if graph_id == 0 || start_ns == 0 || end_ns < start_ns {
        return None;
    }
    let name = read_u64(record, offset::NAME) as usize as *const c_char;
    // Safety: CUPTI's name pointer is a NUL-terminated string it owns (read here, at once).
    let name = if name.is_null() { "unnamed kernel".to_string() } else { unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned() };
    Some(GraphKernel { name, start_ns, end_ns, graph_id })
}

/// Concurrent-kernel tracing for one window; only one is live at a time.
///
/// The driver's tracing, once on, stays on for the rest of the process: turning it off and on
/// again left later tracing windows without records on CUDA 13 (reported by other tracers), and a
/// `profile run --repeat N` opens N windows in one process. Outside a window the completed
/// buffers are dropped; `LIBREYOLO_CUPTI=0` keeps it off altogether.
pub struct GraphTrace {
    api: &'static Api,
}

/// Turns the driver's kernel tracing on, once per process, or says why it cannot. The profiler
/// calls it when it starts, before any graph is recorded (PyTorch's profiler, too, starts CUPTI
/// before a capture: attached after it, replays misbehaved on older CUDA); records are kept only
/// while a [`GraphTrace`] is live.
pub fn enable() -> Result<(), String> {
    let api = api().as_ref().map_err(Clone::clone)?;
    static ENABLED: OnceLock<Result<(), String>> = OnceLock::new();
    ENABLED
        .get_or_init(|| {
            // Safety: the callbacks match CUPTI's typedefs and live for the process; a plain
            // call with a kind of the header.
            api.check("cuptiActivityRegisterCallbacks", unsafe { (api.register_callbacks)(buffer_requested, buffer_completed) })?;
            api.check("cuptiActivityEnable(CONCURRENT_KERNEL)", unsafe { (api.enable)(KIND_CONCURRENT_KERNEL) })
        })
        .clone()
}

impl GraphTrace {
    /// Starts keeping the records (tracing turned on first if it is not yet), or says why not.
    pub fn start() -> Result<Self, String> {
        enable()?;
        let api = api().as_ref().map_err(Clone::clone)?;
        // Records of kernels before this window (the warm-up's, another window's) go.
        let trace = Self { api };
        trace.flush_with(FLUSH_FORCED)?;
        RECORDS.lock().expect("CUPTI records").clear();
        COLLECTING.store(true, Ordering::Release);
        Ok(trace)
    }

    fn flush_with(&self, flag: u32) -> Result<(), String> {
        // Safety: a plain call; the flush runs `buffer_completed` for the buffers it hands back.
        self.api.check("cuptiActivityFlushAll", unsafe { (self.api.flush_all)(flag) })
    }

    /// CUPTI's clock now (ns): the clock of the records' start and end.
    pub fn now_ns(&self) -> u64 {
        let mut t = 0u64;
        // Safety: CUPTI writes one u64.
        let _ = unsafe { (self.api.timestamp)(&mut t) };
        t
    }

    /// Hands the completed records to the buffers' callback (call with the device drained).
    pub fn flush(&self) -> Result<(), String> {
        self.flush_with(FLUSH_COMPLETED)
    }

    /// Ends the window: the graph kernels recorded since [`start`](Self::start) (the device
    /// drained before, so every record is complete).
    pub fn finish(self) -> Result<Vec<GraphKernel>, String> {
        self.flush_with(FLUSH_FORCED)?;
        Ok(std::mem::take(&mut *RECORDS.lock().expect("CUPTI records")))
    }
}

impl Drop for GraphTrace {
    /// Outside a window (finished, or a run stopped before its window filled) records are
    /// dropped, so none pile up for the rest of the process.
    fn drop(&mut self) {
        COLLECTING.store(false, Ordering::Release);
        if let Ok(mut records) = RECORDS.lock() {
            records.clear();
        }
    }
}

/// The synced half's graph kernels: a trace, and the spans of the phases that replayed a graph
/// (on CUPTI's clock), so each kernel is attributed to the phase and step that ran it.
pub struct GraphKernels {
    trace: GraphTrace,
    /// The profiler's clock (ms since its epoch) and CUPTI's (ns) at one instant.
    base: (f64, u64),
    entered: Option<u64>,
    spans: Vec<Span>,
}

/// A synced phase that replayed a graph: phase, step, and its start and end on CUPTI's clock.
struct Span {
    phase: String,
    step: usize,
    start: u64,
    end: u64,
}

impl GraphKernels {
    /// Starts tracing; `epoch` is the profiler's clock.
    pub fn start(epoch: std::time::Instant) -> Result<Self, String> {
        let trace = GraphTrace::start()?;
        let base = (epoch.elapsed().as_secs_f64() * 1e3, trace.now_ns());
        Ok(Self { trace, base, entered: None, spans: vec![] })
    }

    /// A synced phase starts (the device drained).
    pub fn enter(&mut self) {
        self.entered = Some(self.trace.now_ns());
    }

    /// The synced phase ends (the device drained), having replayed a graph.
    pub fn exit(&mut self, phase: &str, step: usize) {
        if let Some(start) = self.entered.take() {
            self.spans.push(Span { phase: phase.to_string(), step, start, end: self.trace.now_ns() });
        }
    }

    /// A synced step ended (the device drained): its records are collected.
    pub fn step_done(&self) {
        if let Err(e) = self.trace.flush() {
            tracing::warn!("profile: {e}");
        }
    }

    /// Ends the trace: each graph kernel as a kernel event of the phase whose span holds its
    /// start, on the profiler's clock.
    pub fn finish(self) -> Result<Vec<KernelEvent>, String> {
        let Self { trace, base, spans, .. } = self;
        let kernels = trace.finish()?;
        Ok(kernels
            .into_iter()
            .map(|k| {
                let span = spans.iter().find(|s| (s.start..=s.end).contains(&k.start_ns));
                let (phase, step) = span.map_or(("unphased".to_string(), 0), |s| (s.phase.clone(), s.step));
                // Subtracted as integers: ~1.7e18 ns as f64 would lose a quarter microsecond.
                let start_ms = base.0 + (k.start_ns as i128 - base.1 as i128) as f64 / 1e6;
                KernelEvent { name: k.name, phase, step, start_ms, dur_ms: k.end_ns.saturating_sub(k.start_ns) as f64 / 1e6 }
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The prefix of `CUpti_ActivityKernel9/10/11` (cupti_activity.h; the same fields in the
    /// same order in all three), laid out as the header lays it out (`PACKED_ALIGNMENT` is
    /// `__attribute__((__packed__)) __attribute__((aligned (8)))`, i.e. `packed(8)` fields).
    #[repr(C, packed(8))]
    #[allow(dead_code)]
    struct KernelPrefix {
        kind: u32,
        cache_config: u8,
        shared_memory_config: u8,
        registers_per_thread: u16,
        partitioned_requested: u32,
        partitioned_executed: u32,
        start: u64,
        end: u64,
        completed: u64,
        device_id: u32,
        context_id: u32,
        stream_id: u32,
        grid: [i32; 3],
        block: [i32; 3],
        static_shared: i32,
        dynamic_shared: i32,
        local_per_thread: u32,
        local_total: u32,
        correlation_id: u32,
        grid_id: i64,
        name: *const c_char,
        reserved0: *mut c_void,
        queued: u64,
        submitted: u64,
        launch_type: u8,
        carveout_requested_flag: u8,
        carveout_requested: u8,
        padding: u8,
        shared_memory_executed: u32,
        graph_node_id: u64,
        shmem_limit_config: u32,
        graph_id: u32,
    }

    #[test]
    fn the_variable_turns_it_off_names_a_library_or_leaves_it_looked_for() {
        assert_eq!(wanted(None), Wanted::Search);
        assert_eq!(wanted(Some("1")), Wanted::Search);
        assert_eq!(wanted(Some("")), Wanted::Search);
        assert_eq!(wanted(Some("0")), Wanted::Off);
        assert_eq!(wanted(Some("/opt/cuda/libcupti.so.13")), Wanted::Path("/opt/cuda/libcupti.so.13".into()));
    }

    /// PyTorch's wheels keep CUPTI beside NVRTC: that directory is tried first, once.
    #[test]
    fn the_library_is_looked_for_beside_the_loaded_cuda_libraries_first() {
        let maps = "7f00-7f01 r-xp 00000000 08:01 1 /venv/nvidia/cu13/lib/libnvrtc.so.13\n\
                    7f01-7f02 r--p 00001000 08:01 1 /venv/nvidia/cu13/lib/libnvrtc.so.13\n\
                    7f02-7f03 r-xp 00000000 08:01 2 /usr/lib/x86_64-linux-gnu/libc.so.6\n\
                    7f03-7f04 rw-p 00000000 00:00 0\n";
        let list = search_list(maps);
        assert_eq!(&list[..3], ["/venv/nvidia/cu13/lib/libcupti.so.13", "/venv/nvidia/cu13/lib/libcupti.so.12", "/venv/nvidia/cu13/lib/libcupti.so"]);
        assert_eq!(&list[3..], CANDIDATES);
    }

    #[test]
    fn the_record_offsets_are_the_headers() {
        use std::mem::offset_of;
        assert_eq!(offset_of!(KernelPrefix, kind), offset::KIND);
        assert_eq!(offset_of!(KernelPrefix, start), offset::START);
        assert_eq!(offset_of!(KernelPrefix, end), offset::END);
        assert_eq!(offset_of!(KernelPrefix, name), offset::NAME);
        assert_eq!(offset_of!(KernelPrefix, graph_id), offset::GRAPH_ID);
        assert_eq!(std::mem::size_of::<KernelPrefix>(), offset::LEN);
    }

    /// A record written at those offsets reads back; eager launches and other kinds are skipped.
    #[test]
    fn graph_kernels_are_parsed_and_others_skipped() {
        let name = c"fused_elemwise";
        let mut r = vec![0u8; offset::LEN];
        let mut put = |at: usize, bytes: &[u8]| r[at..at + bytes.len()].copy_from_slice(bytes);
        put(offset::KIND, &KIND_CONCURRENT_KERNEL.to_le_bytes());
        put(offset::START, &1_000u64.to_le_bytes());
        put(offset::END, &3_500u64.to_le_bytes());
        put(offset::NAME, &(name.as_ptr() as usize as u64).to_le_bytes());
        put(offset::GRAPH_ID, &7u32.to_le_bytes());
        assert_eq!(parse_kernel(&r), Some(GraphKernel { name: "fused_elemwise".into(), start_ns: 1_000, end_ns: 3_500, graph_id: 7 }));
        let mut eager = r.clone();
        eager[offset::GRAPH_ID..offset::GRAPH_ID + 4].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(parse_kernel(&eager), None);
        let mut untimed = r.clone();
        untimed[offset::START..offset::START + 8].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(parse_kernel(&untimed), None);
        let mut memcpy = r.clone();
        memcpy[0..4].copy_from_slice(&1u32.to_le_bytes()); // CUPTI_ACTIVITY_KIND_MEMCPY
        assert_eq!(parse_kernel(&memcpy), None);
    }

    /// A library that is not there is an error naming it, and the profiler keeps its fallback.
    #[test]
    fn a_missing_library_says_which() {
        let err = Api::open("/nonexistent/libcupti.so.13").err().expect("no such library");
        assert!(err.contains("/nonexistent/libcupti.so.13"), "{err}");
    }
}
