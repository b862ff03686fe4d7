fn main() -> std::process::ExitCode {
    libreyolo_run::cli::main()
}
