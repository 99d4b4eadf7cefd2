//! capture-cli: the `capture` command-line program over `capture-graphs`, and the
//! library its tests, benches and examples (among them its kernel library for the CUDA
//! driver model, `examples/cuda_model_kernels.rs`) use: the
//! llama-shaped decoder ([`decode`]).
//!
//! The program is a user of the facade like any other: every call goes through
//! `capture_graphs`; the benchmark's hand-written floors ([`floor`]) talk to the
//! drivers themselves.
//!
//! `capture demo [--backend mock|vulkan|cuda] [--device D] [--kernels N] [--replays R]` runs a
//! decode-shaped chain of small dependent kernels eagerly and as a replayed graph,
//! checks that both give the same bytes, and prints the cost per kernel of each mode,
//! their ratio, the capture time and the graph's ledger. The mock runs by default; Vulkan
//! and CUDA in builds with the `vulkan` and `cuda` features.
//!
//! `capture decode` runs a llama-shaped decoder eagerly and as one replayed graph per
//! token (docs/decode.md). `capture bench` runs the benchmark matrix. `capture trace SCENARIO` runs one of the
//! named scenarios of `capture-scenarios` (the ones every backend's test suite runs) on
//! the mock and prints its trace lines.
//! `--log LEVEL` (demo, bench, trace, decode) logs the core's spans and events to stderr;
//! `--timeline PATH` (demo, trace, decode) writes the run's timeline as Chrome trace-event JSON,
//! which `capture timeline-svg IN.json OUT.svg` draws as a picture.

// Unsafe code only in `decode::cublas` (the cuBLAS FFI and its foreign work), the
// floors' FFI (`floor::vulkan::raw`, `floor::cuda::raw`) and `cpu_time`, which allow it;
// each block there has a `// SAFETY:` line.
#![deny(unsafe_code)]

mod bench;
mod bench_table;
mod chain;
mod cli;
mod competitors;
mod cpu_time;
pub mod decode;
mod decoder_update_row;
mod demo;
mod exit;
pub mod floor;
mod floors;
mod fork_row;
mod logging;
mod table;
mod timeline;
mod timeline_svg;
mod trace_event;
mod until_row;
mod update_row;

use std::process::ExitCode;

/// Runs `capture ARGS` (the program's arguments, without its name) and returns its exit
/// status: the `capture` binary's whole `main`.
pub fn main_with_args(args: &[String]) -> ExitCode {
    cli::run(args)
}
