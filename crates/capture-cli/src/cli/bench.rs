//! `capture bench`: the benchmark matrix is a program of its own, `capture-bench`
//! (package capture-bench, as wgpu keeps its benches beside its tools), which this
//! command runs with the arguments after `bench`, as cargo runs `cargo-NAME`: the
//! program `CAPTURE_BENCH` names, else `capture-bench` beside this executable, else
//! `capture-bench` on `PATH`. Its output and exit status are the command's.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use crate::exit::USAGE_EXIT;

/// The program's name.
const PROGRAM: &str = "capture-bench";

/// Where the benchmark program is: `CAPTURE_BENCH`, beside this executable, else its
/// bare name for `PATH`.
fn program() -> PathBuf {
    if let Some(named) = std::env::var_os("CAPTURE_BENCH").filter(|v| !v.is_empty()) {
        return PathBuf::from(named);
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join(PROGRAM)))
        .filter(|path| path.is_file());
    beside.unwrap_or_else(|| PathBuf::from(PROGRAM))
}

/// Runs `capture-bench ARGS`; its exit status is this command's (2 where it could not
/// start, saying how to build it).
pub(super) fn command(args: &[String]) -> ExitCode {
    let program = program();
    match Command::new(&program)
        .args(args.iter().map(OsString::from))
        .status()
    {
        Ok(status) => match status.code() {
            Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
            None => {
                eprintln!(
                    "capture bench: {} ended by a signal ({status})",
                    program.display()
                );
                ExitCode::FAILURE
            }
        },
        Err(error) => {
            eprintln!(
                "capture bench: cannot run the benchmark program {} ({error}); it is the \
                 package capture-bench: `cargo run --release -p capture-bench -- ARGS`, \
                 `cargo xtask bench ARGS`, or `cargo install --path crates/capture-bench` \
                 beside `capture` (or name it in CAPTURE_BENCH). Nothing was run.",
                program.display()
            );
            ExitCode::from(USAGE_EXIT)
        }
    }
}
