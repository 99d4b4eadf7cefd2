//! capture-bench: the benchmark matrix of `capture bench`, a program of its own
//! (`capture-bench`, which `capture bench` and `cargo xtask bench` run), as wgpu keeps
//! its benches beside its tools: the launch-bound and execution-bound chain rows, the
//! decoder rows (decode, decoder update, until), the update and fork rows, their tables
//! and JSON, and the hand-written floors each backend's figures are measured against
//! ([`floor`]).
//!
//! The library is a user of the facade like any other; the floors talk to the drivers
//! themselves, each through its own FFI module (`floor::vulkan::raw` over ash,
//! `floor::cuda::raw` over the driver API loaded at run time), the crate's only unsafe
//! code.

#![deny(unsafe_code)]

mod bench;
mod bench_table;
mod cli;
mod competitors;
mod decoder_update_row;
pub mod floor;
mod floors;
mod fork_row;
mod until_row;
mod update_row;

use std::process::ExitCode;

/// Runs `capture-bench ARGS` (`capture bench ARGS`: the arguments after `bench`) and
/// returns its exit status: the `capture-bench` binary's whole `main`.
pub fn main_with_args(args: &[String]) -> ExitCode {
    cli::command(args)
}
