//! `capture bench` (the `capture-bench` program): its help, the parsing of its options
//! into [`BenchArgs`], and its run: every backend named (or built) through
//! [`crate::floors`], then the tables or JSON.

use std::process::ExitCode;

use crate::floors::{self, BenchBackend};
use crate::{bench_table, competitors};
use capture_cli::args::{Options, UsageError, log, number, out_of_range};
use capture_cli::exit::{finish, usage};
use capture_cli::logging;

pub(crate) const BENCH_HELP: &str =
    "usage: capture bench [--backend B[,B...]] [--rows R[,R...]] [--rounds N]
                     [--passes P] [--competitors C] [--device D] [--json] [--log LEVEL]

The benchmark matrix. Each row is a chain of dependent add-one launches over f32
buffers, ping-ponging between two of them, with a full readback of the first after
every pass: 64x150, 64x1000 and 64x5000 (64 elements, one workgroup of 256:
launch-bound), and the controls 64kx1000 and 1Mx500 (execution-bound, where replay
must read about 1.0x). Eager and replay rounds alternate (and, on Vulkan, the
hand-written ash floor's eager and replay rounds); every figure is the median over
rounds of a round's mean per pass, and every round's result is checked. Then the
decode row (on mock, vulkan and cuda): `capture decode`'s decoder (dim 64, 2 layers,
32 tokens per mode) eager, replayed once per token and all tokens in one replay
call, one decoder run per round, in tokens/s with each mode's ratio to eager and the
host CPU per token, its checks enforced. Then the update row: a 7-launch step whose
input changes every token (rebound between two buffers, as a moved KV block is),
32 tokens per mode, each token read back and checked: the graph's input slot rebound
and one replay (rule 26) against the step captured again and replayed, in us/token
with their ratio, paired round by round. Then the fork row: two experts of a small
MoE layer (4 dependent launches each over 4096 elements) and a combine, captured with
the second expert forked onto a branch stream and joined before the combine (rules 28
and 29) against the same work captured on one stream, 32 steps per graph, each step
read back and checked bit for bit against the eager run, in us/step with their ratio,
paired round by round. Then the until row: `capture decode --until-eos`'s decoder
(the decode row's sizes, at most 32 tokens, ending at its end token) decoded by one
loop replay the device ends (rule 30), against replays of 8 with a host check of the
stop flag after each (the overshoot run and thrown away) and one replay per token
with a check each, in tokens/s with the loop's ratio to each, paired round by round,
every mode's ids checked against eager.

Columns: enqueue us/pass (until the launches or the replay call return), end-to-end
us/kernel (through the readback), their ratio, the capture time, the graph's device
bytes against the stream's live working set, and the replay call's median and 99th
percentile. Where the backend has a hand-written floor, the library against it: on
Vulkan the same dispatches recorded by hand per pass (eager floor: submitted as a
whole pass and every 256, 64 and 16 dispatches, each measured every round, the
fastest kept and named) or once (replay floor); on CUDA a bare cuLaunchKernel loop.
Each library/floor ratio is the median of every round's ratio (the two ran side by
side in it), with its min-max; then the calling thread's CPU time per kernel, the
part of a pass the host pays, steadier than the wall clock when the driver's own
threads share the CPUs.

options:
  --backend B      mock, affine-mock (thread-affine streams), vulkan, cuda; a comma
                   list (default: every backend this build has, skipping one that
                   is not present and saying why)
  --rows R         row names, decode, update, fork or until, a comma list, or
                   launch-bound, controls, all (default: every row, decode,
                   update, fork and until)
  --rounds N       rounds per mode, 5 to 1000 (default 5)
  --passes P       passes per round, 1 to 100000 (default: about 10000 launches
                   per round, fewer on the controls)
  --competitors C  CPU-bound threads spinning beside the benchmark, 0 to 64
                   (default 0)
  --device D       with vulkan: the device to open (index or piece of its name)
  --json           print the results as JSON instead of tables
  --log LEVEL      log to stderr, as `capture demo --log` (a subscriber costs time on
                   every span: figures measured with it are not the library's)
  -h, --help       this help

Settings that matter are printed with the results: the build profile, the device and
driver, LP_NUM_THREADS on lavapipe (0 starts none of llvmpipe's worker threads: tiny
dispatches run 16-19x faster, still on lavapipe's queue thread, not the calling one),
the Vulkan submission cadence.

exit status: 0 when every row ran and checked; 1 when a row (or a decode check)
failed or a named backend is missing; 2 for a usage error.";

/// `capture bench`'s options.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct BenchArgs {
    /// Backends named; empty for every backend built.
    pub(crate) backends: Vec<BenchBackend>,
    /// What to measure.
    pub(crate) options: crate::bench::BenchOptions,
    /// Busy threads beside the benchmark.
    pub(crate) competitors: usize,
    /// The Vulkan device to open.
    pub(crate) device: Option<String>,
    /// JSON instead of tables.
    pub(crate) json: bool,
    /// `--log`'s directives.
    pub(crate) log: Option<String>,
}

/// What `capture bench`'s arguments ask for.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Bench {
    /// Print the help.
    Help,
    /// Run the benchmark.
    Run(BenchArgs),
}

/// Parses `capture bench`'s arguments (those after `bench`).
pub(crate) fn parse_bench(args: &[String]) -> Result<Bench, UsageError> {
    use crate::bench::{BenchOptions, ROWS};
    let mut parsed = BenchArgs {
        backends: Vec::new(),
        options: BenchOptions {
            rows: ROWS.to_vec(),
            rounds: 5,
            passes: None,
            decode: true,
            update: true,
            fork: true,
            until: true,
        },
        competitors: 0,
        device: None,
        json: false,
        log: None,
    };
    let mut options = Options(args.iter());
    while let Some((name, inline)) = options.next_option() {
        let mut value = |name: &str| options.value(name, inline.clone());
        match name {
            "-h" | "--help" => return Ok(Bench::Help),
            "--json" => parsed.json = true,
            "--log" => parsed.log = Some(log(name, value(name)?)?),
            "--backend" => {
                for v in value(name)?.split(',') {
                    let b = BenchBackend::named(v.trim()).map_err(UsageError)?;
                    if !parsed.backends.contains(&b) {
                        parsed.backends.push(b);
                    }
                }
            }
            "--rows" => {
                let v = value(name)?;
                let mut rows = Vec::new();
                parsed.options.decode = false;
                parsed.options.update = false;
                parsed.options.fork = false;
                parsed.options.until = false;
                for r in v.split(',') {
                    let r = r.trim();
                    let chosen: Vec<_> = match r {
                        "decode" => {
                            parsed.options.decode = true;
                            Vec::new()
                        }
                        "update" => {
                            parsed.options.update = true;
                            Vec::new()
                        }
                        "fork" => {
                            parsed.options.fork = true;
                            Vec::new()
                        }
                        "until" => {
                            parsed.options.until = true;
                            Vec::new()
                        }
                        "all" => {
                            parsed.options.decode = true;
                            parsed.options.update = true;
                            parsed.options.fork = true;
                            parsed.options.until = true;
                            ROWS.to_vec()
                        }
                        "launch-bound" => ROWS.iter().copied().filter(|r| !r.control).collect(),
                        "controls" => ROWS.iter().copied().filter(|r| r.control).collect(),
                        name => match ROWS.iter().find(|row| row.name == name) {
                            Some(row) => vec![*row],
                            None => {
                                let names: Vec<_> = ROWS.iter().map(|r| r.name).collect();
                                return Err(UsageError(format!(
                                    "unknown row {name:?} for --rows ({}, decode, update, fork, \
                                     until, launch-bound, controls or all)",
                                    names.join(", ")
                                )));
                            }
                        },
                    };
                    for row in chosen {
                        if !rows.contains(&row) {
                            rows.push(row);
                        }
                    }
                }
                parsed.options.rows = rows;
            }
            "--rounds" => {
                let v = value(name)?;
                let n = number(name, &v, (5, 1000), "rounds per mode")?;
                parsed.options.rounds = usize::try_from(n).map_err(|_| out_of_range(name, &v))?;
            }
            "--passes" => {
                let v = value(name)?;
                let n = number(name, &v, (1, 100_000), "passes per round")?;
                parsed.options.passes =
                    Some(usize::try_from(n).map_err(|_| out_of_range(name, &v))?);
            }
            "--competitors" => {
                let v = value(name)?;
                let n = number(name, &v, (0, 64), "competing threads")?;
                parsed.competitors = usize::try_from(n).map_err(|_| out_of_range(name, &v))?;
            }
            "--device" => {
                let v = value(name)?;
                if v.trim().is_empty() {
                    return Err(UsageError(format!("invalid value {v:?} for --device")));
                }
                parsed.device = Some(v);
            }
            other => return Err(UsageError(format!("unknown option {other:?}"))),
        }
    }
    if parsed.device.is_some()
        && !(parsed.backends.is_empty() || parsed.backends.iter().any(|b| b.takes_device()))
    {
        return Err(UsageError(
            "--device is for the vulkan backend, which --backend leaves out".into(),
        ));
    }
    Ok(Bench::Run(parsed))
}

/// `capture bench`: every backend named (or built), each row, then the tables or JSON.
pub(crate) fn command(args: &[String]) -> ExitCode {
    let args = match parse_bench(args) {
        Ok(Bench::Help) => {
            println!("{}", BENCH_HELP);
            return ExitCode::SUCCESS;
        }
        Ok(Bench::Run(args)) => args,
        Err(error) => return usage("bench", BENCH_HELP, &error),
    };
    let session = match logging::start(args.log.as_deref(), None) {
        Ok(session) => session,
        Err(error) => return usage("bench", BENCH_HELP, &error),
    };
    let competitors = competitors::Competitors::start(args.competitors);
    let named = !args.backends.is_empty();
    let backends = if named {
        args.backends.clone()
    } else {
        floors::built()
    };
    let mut run = bench_table::Run {
        build: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        competitors: competitors.len(),
        rounds: args.options.rounds,
        backends: Vec::new(),
    };
    for backend in backends {
        run.backends.push(floors::bench(
            backend,
            named,
            &args.options,
            args.device.as_deref(),
        ));
    }
    drop(competitors);
    if args.json {
        println!("{}", bench_table::json(&run));
    } else {
        print!("{}", bench_table::render(&run));
    }
    let code = if run.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    };
    finish("bench", session, code)
}

#[cfg(test)]
mod tests;
