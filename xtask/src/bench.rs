//! `cargo xtask bench`: the benchmark matrix (`capture bench`, release build) on every
//! backend this machine has, then the core's bookkeeping microbenchmarks (divan) with
//! their ratios against baselines, and the flat-cost benchmark. Benchmarks report; the
//! only figure that fails a step is flat_cost's growth, which is a property (cost per
//! call does not grow with the run's length), not a speed target.

use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::cargo::cargo;
use crate::vulkan::Probe;

pub(crate) const HELP: &str = "usage: cargo xtask bench [--matrix-only | --micro-only] [-- ARGS]

Builds in release and runs
  capture bench ARGS   the matrix (package capture-bench): both mock modes, Vulkan
                       when a loader is present (LP_NUM_THREADS=0 unless set, which
                       runs lavapipe's dispatches on the calling thread), CUDA when
                       the driver is present; ARGS go to `capture bench` (see
                       `capture bench --help`: --rows, --rounds, --competitors, --json)
  cargo bench -p capture-core --features bench-internals
                       the core's bookkeeping microbenchmarks, each printed beside a
                       baseline measured in the same run, as a ratio; and flat_cost,
                       100,000 producer/consumer iterations whose last 10,000 may take
                       at most 1.2x their first 10,000 (it fails the step otherwise)

The figures and how to read them: docs/benchmarks.md.";

pub(crate) fn run(args: &[String]) -> Result<()> {
    let (mut matrix, mut micro) = (true, true);
    let mut passed: Vec<String> = Vec::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "-h" | "--help" => {
                println!("{HELP}");
                return Ok(());
            }
            "--matrix-only" => micro = false,
            "--micro-only" => matrix = false,
            "--" => passed.extend(rest.by_ref().cloned()),
            other => bail!("unknown option {other:?}\n\n{HELP}"),
        }
    }
    if !matrix && !micro {
        bail!("--matrix-only and --micro-only leave nothing to run");
    }
    if matrix {
        let mut features = Vec::new();
        if Probe::detect().loader {
            features.push("vulkan");
        }
        features.push("cuda");
        let features = features.join(",");
        let mut command = cargo(&[
            "run",
            "--release",
            "-p",
            "capture-bench",
            "--features",
            &features,
            "--",
        ]);
        command.args(&passed);
        if std::env::var_os("LP_NUM_THREADS").is_none() {
            command.env("LP_NUM_THREADS", "0");
        }
        step("capture bench", &mut command)?;
    }
    if micro {
        step(
            "core microbenchmarks",
            &mut cargo(&[
                "bench",
                "-p",
                "capture-core",
                "--features",
                "bench-internals",
            ]),
        )?;
    }
    Ok(())
}

fn step(name: &str, command: &mut Command) -> Result<()> {
    println!("xtask: {name}");
    let status = command
        .status()
        .with_context(|| format!("starting {name}"))?;
    if !status.success() {
        bail!("{name} failed ({status})");
    }
    Ok(())
}
