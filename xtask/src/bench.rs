//! `cargo xtask bench`: the benchmark matrix (`capture bench`, release build) on every
//! backend this machine has, then the core's bookkeeping microbenchmarks (divan) with
//! their ratios against baselines, and the flat-cost benchmark. Benchmarks report; the
//! only figure that fails a step is flat_cost's growth, which is a property (cost per
//! call does not grow with the run's length), not a speed target.

use anyhow::{Result, bail};

use crate::cargo::{cargo, step};
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
        let features = if Probe::detect().loader {
            "vulkan,cuda"
        } else {
            "cuda"
        };
        let mut command = cargo(&format!(
            "run --release -p capture-bench --features {features} --"
        ));
        command.args(&passed);
        if std::env::var_os("LP_NUM_THREADS").is_none() {
            command.env("LP_NUM_THREADS", "0");
        }
        step("capture bench", &mut command)?;
    }
    if micro {
        step(
            "core microbenchmarks",
            &mut cargo("bench -p capture-core --features bench-internals"),
        )?;
    }
    Ok(())
}
