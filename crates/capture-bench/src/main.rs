//! The `capture-bench` program: `capture bench`'s benchmark matrix (`capture bench
//! --help` lists its options); everything it does lives in the `capture_bench` library.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    capture_bench::main_with_args(&args)
}
