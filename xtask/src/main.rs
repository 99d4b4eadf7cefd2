//! Project automation, run as `cargo xtask <command>`.
//!
//! - `test`: the README's test command: installs what the tests need when it is missing,
//!   runs the gate (fmt, clippy, docs, tidy), every test, and prints which backends ran
//!   and which were skipped and why, from each test binary's `test result:` line.
//! - `test-gpu`: on a machine with an NVIDIA GPU: the CUDA tests with a driver
//!   required, the Vulkan tests when a loader is present, and the demo on each GPU
//!   backend.
//! - `gpu-bundle`: prebuilt test binaries, snapshots and `run.sh` (`xtask/gpu/run.sh`),
//!   for a GPU machine with no Rust and no network.
//! - `bench`: the benchmark matrix (`capture bench`) on every backend present, then the
//!   core's bookkeeping microbenchmarks with their ratios.
//! - `nvrtc`: fetches NVRTC when missing and prints the directory of `libnvrtc.so.12`.
//! - `tidy`: the project's own conventions, unused dependencies among them (also run as
//!   a `#[test]`).

mod bench;
mod cargo;
mod cuda_model;
mod examples;
mod gpu_bundle;
mod imports;
mod libs;
mod manifest;
mod nvrtc;
mod package;
mod results;
mod summary;
mod test;
mod test_gpu;
mod tidy;
mod vulkan;
mod wheel;

use std::process::ExitCode;

use anyhow::{Result, bail};

const USAGE: &str = "usage: cargo xtask <command>

commands:
  test        install what the tests need, run the gate and every test, print a summary
  test-gpu    on an NVIDIA GPU machine: CUDA (required) and Vulkan tests, GPU demos
  bench       the benchmark matrix on every backend present, then the core's
              microbenchmarks against their baselines (release)
  gpu-bundle  build test binaries and a run.sh for a GPU machine without Rust [--out DIR]
  nvrtc       fetch NVRTC when missing; print the directory holding libnvrtc.so.12
  tidy        check the project's conventions (headers, stubs, unsafe, snapshots, core's
              dependencies, unused dependencies)

`cargo xtask <command> --help` describes a command.";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("test") => test::run(&args[1..]),
        Some("test-gpu") => test_gpu::run(&args[1..]),
        Some("gpu-bundle") => gpu_bundle::run(&args[1..]),
        Some("bench") => bench::run(&args[1..]),
        Some("nvrtc") => match args.get(1).map(String::as_str) {
            None => {
                println!("{}", nvrtc::ensure()?.display());
                Ok(())
            }
            Some("-h" | "--help") => {
                println!("{}", nvrtc::HELP);
                Ok(())
            }
            Some(other) => bail!("unknown option {other:?}\n\n{}", nvrtc::HELP),
        },
        Some("tidy") => {
            let problems = tidy::check(&cargo::workspace_root())?;
            if problems.is_empty() {
                println!("tidy: ok");
                Ok(())
            } else {
                for p in &problems {
                    eprintln!("tidy: {p}");
                }
                bail!("tidy found {} problem(s)", problems.len())
            }
        }
        Some("-h" | "--help" | "help") | None => {
            println!("{USAGE}");
            Ok(())
        }
        Some(other) => bail!("unknown command {other:?}\n\n{USAGE}"),
    }
}
