//! Running the `capture` program as a user does, shared by the program's test files
//! (each uses what it needs).
#![allow(dead_code)]

use std::process::{Command, Output};

/// Runs `capture ARGS` with no `RUST_LOG`, or with `rust_log` as `RUST_LOG`.
pub(crate) fn capture_logged(args: &[&str], rust_log: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_capture"));
    command.args(args).env_remove("RUST_LOG");
    if let Some(directives) = rust_log {
        command.env("RUST_LOG", directives);
    }
    command.output().expect("the capture binary starts")
}

/// Runs `capture ARGS` with no `RUST_LOG`.
pub(crate) fn capture(args: &[&str]) -> Output {
    capture_logged(args, None)
}

/// Output bytes as text.
pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
