/// mimalloc keeps freed pages for reuse: the loader's per-sample canvases (megabytes each) would
/// otherwise be mapped and faulted in afresh for every image by the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    libreyolo_run::cli::main()
}
