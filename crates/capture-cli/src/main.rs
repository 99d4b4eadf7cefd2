//! The `capture` program: `capture demo`, `bench`, `decode`, `trace` and `timeline-svg`
//! (`capture --help` lists them); everything it does lives in the `capture_cli` library.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    capture_cli::main_with_args(&args)
}
