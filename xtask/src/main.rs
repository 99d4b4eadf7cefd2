//! Project automation, run as `cargo xtask <command>`: the test command CI runs, the GPU
//! bundle, the benchmarks, NVRTC, and tidy; [`USAGE`] lists them and each command's
//! module says what it does.

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
mod tidy;
mod vulkan;
mod wheel;

use std::process::ExitCode;

use anyhow::{Result, bail};

const USAGE: &str = "usage: cargo xtask <command>

commands:
  test        install what the tests need, run the gate and every test, print a summary
  bench       the benchmark matrix on every backend present, then the core's
              microbenchmarks against their baselines (release)
  gpu-bundle  build test binaries and a run.sh for a GPU machine without Rust [--out DIR];
              on the GPU machine, ./run.sh runs the GPU tests, demos and benchmark
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
    type Run = fn(&[String]) -> Result<()>;
    let (help, run): (&str, Run) = match args.first().map(String::as_str) {
        Some("test") => (test::HELP, test::run),
        Some("gpu-bundle") => (gpu_bundle::HELP, gpu_bundle::run),
        Some("bench") => (bench::HELP, bench::run),
        Some("nvrtc") => (nvrtc::HELP, nvrtc::run),
        Some("tidy") => (tidy::HELP, tidy::run),
        Some("-h" | "--help" | "help") | None => {
            println!("{USAGE}");
            return Ok(());
        }
        Some(other) => bail!("unknown command {other:?}\n\n{USAGE}"),
    };
    // Options after `--` are another program's (`cargo xtask bench -- --help`).
    let mut options = args[1..].iter().take_while(|a| *a != "--");
    if options.any(|a| a == "-h" || a == "--help") {
        println!("{help}");
        return Ok(());
    }
    run(&args[1..])
}
