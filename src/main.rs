fn main() -> std::process::ExitCode {
    ksearch::cli::main()
}
