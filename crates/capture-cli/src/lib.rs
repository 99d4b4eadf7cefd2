//! capture-cli: the `capture` command-line program over `capture-graphs`, and the
//! command-line helpers it shares with the workspace's other programs (`capture-bench`):
//! option parsing ([`args`]), how a command ends ([`exit`]) and `--log`/`--timeline`
//! ([`logging`]).
//!
//! The program is a user of the facade like any other: every call goes through
//! `capture_graphs`.
//!
//! `capture demo [--backend mock|vulkan|cuda] [--device D] [--kernels N] [--replays R]` runs a
//! decode-shaped chain of small dependent kernels eagerly and as a replayed graph,
//! checks that both give the same bytes, and prints the cost per kernel of each mode,
//! their ratio, the capture time and the graph's ledger. The mock runs by default; Vulkan
//! and CUDA in builds with the `vulkan` and `cuda` features.
//!
//! `capture decode` runs the llama-shaped decoder of `capture-decode` eagerly and as one
//! replayed graph per token (docs/decode.md). `capture bench` runs the benchmark matrix:
//! the `capture-bench` program (package capture-bench). `capture trace SCENARIO` runs
//! one of the named scenarios of `capture-scenarios` (the ones every backend's test
//! suite runs) on the mock and prints its trace lines.
//! `--log LEVEL` (demo, bench, trace, decode) logs the core's spans and events to stderr;
//! `--timeline PATH` (demo, trace, decode) writes the run's timeline as Chrome trace-event JSON,
//! which `capture timeline-svg IN.json OUT.svg` draws as a picture.

#![forbid(unsafe_code)]

pub mod args;
mod backends;
mod chain;
mod cli;
mod demo;
pub mod exit;
pub mod logging;
mod table;
mod timeline;
mod timeline_svg;
mod trace_event;

use std::process::ExitCode;

/// Runs `capture ARGS` (the program's arguments, without its name) and returns its exit
/// status: the `capture` binary's whole `main`.
pub fn main_with_args(args: &[String]) -> ExitCode {
    cli::run(args)
}
