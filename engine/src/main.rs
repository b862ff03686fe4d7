/// mimalloc keeps freed pages for reuse: the loader's per-sample canvases (megabytes each) would
/// otherwise be mapped and faulted in afresh for every image by the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (mimalloc.h's option 15, between `eager_commit_delay` and
/// `use_numa_nodes`; libmimalloc-sys names neither it nor its legacy `reset_delay`).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() -> std::process::ExitCode {
    // Freed memory is never handed back to the system: a training step frees and allocates the
    // same large buffers every step, and handing them back (purging after 1 s) made each
    // allocation fault its pages in afresh. On the CPU (2 cores, 2026-12-04) that was most of
    // the step: RT-DETR-r18 at 128 px b8 forward 7.6 -> 1.4 s, YOLOv9-t at 320 px b8 loss
    // 3.8 -> 0.8 s, for ~5% more peak memory. `MIMALLOC_PURGE_DELAY` still overrides it.
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one of mimalloc's process-wide options; no memory is touched.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    }
    libreyolo_run::cli::main()
}
