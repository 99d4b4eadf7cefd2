//! The command line: the program's and each command's help, and the parsing of each
//! command's options (`demo` into [`DemoArgs`], `bench` into [`BenchArgs`], `trace`
//! into [`TraceArgs`], `timeline-svg` into [`SvgArgs`]) or a [`UsageError`].

use std::fmt;
use std::path::PathBuf;

/// The program's help: its commands.
pub(crate) const USAGE: &str = "usage: capture <command> [options]

commands:
  demo          a decode-shaped kernel chain, run eagerly and as a replayed graph
  decode        a llama-shaped decoder's step captured once and replayed per token
  bench         the benchmark matrix: launch-bound to execution-bound rows, eager
                against replayed, beside a hand-written floor where the backend has one
  trace         a named multi-stream scenario: its trace lines, and its timeline
  timeline-svg  a timeline JSON file drawn as an SVG picture

options:
  -h, --help   this help

Run `capture <command> --help` for a command's options.";

/// `capture demo`'s help: what it runs, its options and its exit statuses.
pub(crate) const DEMO_HELP: &str =
    "usage: capture demo [--backend mock|vulkan|cuda] [--device D] [--kernels N] [--replays R]
                    [--log LEVEL] [--timeline PATH]

Runs a decode-shaped chain of N small dependent kernels (add_scalar, mul_scalar, axpy,
row_bias and copy over ping-pong f32 buffers of 1024 elements) eagerly for R steps, then
captures it once as a graph and replays that graph for R steps. Checks that both give
bit-identical output (and that it equals the kernels' host model), then prints the cost
per kernel of each mode, their ratio, the capture time and the graph's ledger.

options:
  --backend NAME   mock (default), vulkan or cuda (builds with `--features vulkan`,
                   `--features cuda`)
  --device D       with --backend vulkan: the device to open, an index in the driver's
                   enumeration or a piece of its name (default: CAPTURE_VULKAN_DEVICE,
                   else the best-ranked device: discrete, integrated, virtual, CPU)
  --kernels N      kernels in the chain, 2 to 100000 (default 512; a decode step is
                   500 or more, fewer is allowed for quick checks)
  --replays R      timed steps per mode, 1 to 100000 (default 20), each mode after one
                   untimed warmup step
  --log LEVEL      log to stderr: a level (info, debug, trace) or any env-filter
                   directive list (capture=debug,capture_mock=trace); RUST_LOG when
                   absent. The core logs under target `capture`: spans and routine
                   events at debug, refusals, dooms, taints and faults at info
  --timeline PATH  write the run's timeline to PATH as Chrome trace-event JSON, for
                   ui.perfetto.dev (\"Open trace file\") or chrome://tracing
  -h, --help       this help

Options also take the form --name=value.

exit status: 0 when the outputs match; 1 when they differ or the runtime fails;
2 for a usage error or a backend this build was made without.";

/// Kernels in the chain when `--kernels` is not given.
pub(crate) const DEFAULT_KERNELS: usize = 512;

/// Timed steps per mode when `--replays` is not given.
pub(crate) const DEFAULT_REPLAYS: u32 = 20;

const KERNELS: (u64, u64) = (2, 100_000);
const REPLAYS: (u64, u64) = (1, 100_000);

/// The backends `--backend` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BackendName {
    /// The deterministic mock backend.
    Mock,
    /// The Vulkan backend.
    Vulkan,
    /// The CUDA backend.
    Cuda,
}

impl BackendName {
    /// The name as `--backend` takes it.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            BackendName::Mock => "mock",
            BackendName::Vulkan => "vulkan",
            BackendName::Cuda => "cuda",
        }
    }
}

impl fmt::Display for BackendName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `capture demo`'s options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DemoArgs {
    /// The backend to run on.
    pub(crate) backend: BackendName,
    /// The Vulkan device to open (an index or a piece of its name), if named.
    pub(crate) device: Option<String>,
    /// Kernels in the chain.
    pub(crate) kernels: usize,
    /// Timed steps per mode.
    pub(crate) replays: u32,
    /// `--log`'s directives.
    pub(crate) log: Option<String>,
    /// Where `--timeline` writes the timeline.
    pub(crate) timeline: Option<PathBuf>,
}

impl Default for DemoArgs {
    fn default() -> Self {
        Self {
            backend: BackendName::Mock,
            device: None,
            kernels: DEFAULT_KERNELS,
            replays: DEFAULT_REPLAYS,
            log: None,
            timeline: None,
        }
    }
}

/// What `capture demo`'s arguments ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Demo {
    /// Print the help.
    Help,
    /// Run the demo.
    Run(DemoArgs),
}

/// Arguments that cannot be run: what is wrong, naming the option or value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UsageError(pub(crate) String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `capture bench`'s help.
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
host CPU per token, its checks enforced.

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
  --rows R         row names or decode, a comma list, or launch-bound, controls, all
                   (default: every row and decode)
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

/// A backend `capture bench` measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BenchBackend {
    /// The mock, every call on the caller's thread.
    Mock,
    /// The mock with thread-affine streams.
    AffineMock,
    /// Vulkan.
    Vulkan,
    /// CUDA.
    Cuda,
}

impl BenchBackend {
    /// The name as `--backend` takes it.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Mock => "mock",
            Self::AffineMock => "affine-mock",
            Self::Vulkan => "vulkan",
            Self::Cuda => "cuda",
        }
    }
}

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
                    let b = match v.trim() {
                        "mock" => BenchBackend::Mock,
                        "affine-mock" => BenchBackend::AffineMock,
                        "vulkan" => BenchBackend::Vulkan,
                        "cuda" => BenchBackend::Cuda,
                        other => {
                            return Err(UsageError(format!(
                                "unknown backend {other:?} for --backend (mock, affine-mock, \
                                 vulkan or cuda)"
                            )));
                        }
                    };
                    if !parsed.backends.contains(&b) {
                        parsed.backends.push(b);
                    }
                }
            }
            "--rows" => {
                let v = value(name)?;
                let mut rows = Vec::new();
                parsed.options.decode = false;
                for r in v.split(',') {
                    let r = r.trim();
                    let chosen: Vec<_> = match r {
                        "decode" => {
                            parsed.options.decode = true;
                            Vec::new()
                        }
                        "all" => {
                            parsed.options.decode = true;
                            ROWS.to_vec()
                        }
                        "launch-bound" => ROWS.iter().copied().filter(|r| !r.control).collect(),
                        "controls" => ROWS.iter().copied().filter(|r| r.control).collect(),
                        name => match ROWS.iter().find(|row| row.name == name) {
                            Some(row) => vec![*row],
                            None => {
                                let names: Vec<_> = ROWS.iter().map(|r| r.name).collect();
                                return Err(UsageError(format!(
                                    "unknown row {name:?} for --rows ({}, decode, \
                                     launch-bound, controls or all)",
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
        && !(parsed.backends.is_empty() || parsed.backends.contains(&BenchBackend::Vulkan))
    {
        return Err(UsageError(
            "--device is for the vulkan backend, which --backend leaves out".into(),
        ));
    }
    Ok(Bench::Run(parsed))
}

/// The backend `--backend` names.
fn backend_name(v: &str) -> Result<BackendName, UsageError> {
    match v {
        "mock" => Ok(BackendName::Mock),
        "vulkan" => Ok(BackendName::Vulkan),
        "cuda" => Ok(BackendName::Cuda),
        _ => Err(UsageError(format!(
            "unknown backend {v:?} for --backend (mock, vulkan or cuda)"
        ))),
    }
}

/// The device `--device` names: anything but blank.
fn device_name(v: String) -> Result<String, UsageError> {
    if v.trim().is_empty() {
        return Err(UsageError(format!("invalid value {v:?} for --device")));
    }
    Ok(v)
}

/// Parses `capture demo`'s arguments (those after `demo`).
pub(crate) fn parse_demo(args: &[String]) -> Result<Demo, UsageError> {
    let mut parsed = DemoArgs::default();
    let mut options = Options(args.iter());
    while let Some((name, inline)) = options.next_option() {
        let mut value = |name: &str| options.value(name, inline.clone());
        match name {
            "-h" | "--help" => return Ok(Demo::Help),
            "--backend" => parsed.backend = backend_name(&value(name)?)?,
            "--device" => parsed.device = Some(device_name(value(name)?)?),
            "--kernels" => {
                let v = value(name)?;
                let n = number(name, &v, KERNELS, "kernels in the chain")?;
                parsed.kernels = usize::try_from(n).map_err(|_| out_of_range(name, &v))?;
            }
            "--replays" => {
                let v = value(name)?;
                let n = number(name, &v, REPLAYS, "timed steps per mode")?;
                parsed.replays = u32::try_from(n).map_err(|_| out_of_range(name, &v))?;
            }
            "--log" => parsed.log = Some(log(name, value(name)?)?),
            "--timeline" => parsed.timeline = Some(path(name, value(name)?)?),
            other => return Err(UsageError(format!("unknown option {other:?}"))),
        }
    }
    if parsed.device.is_some() && parsed.backend != BackendName::Vulkan {
        return Err(UsageError(format!(
            "--device is for --backend vulkan, not {}",
            parsed.backend
        )));
    }
    Ok(Demo::Run(parsed))
}

/// `capture trace`'s help.
pub(crate) const TRACE_HELP: &str =
    "usage: capture trace SCENARIO [--backend mock|affine-mock] [--timeline PATH] [--log LEVEL]
       capture trace --list

Runs a named multi-stream scenario (`--list` names them) on the mock, under the fault
wrapper, with two pooled streams (logical streams 0 and 2 share pooled stream 0,
stream 1 is on pooled stream 1). Checks its bytes and the refusals it expects, then
prints the core's trace, one event per line, as the snapshot tests see it.

options:
  --backend NAME   mock (default; every call on the caller's thread) or affine-mock
                   (thread-affine streams: captures open and close on a worker)
  --timeline PATH  write the scenario's timeline to PATH as Chrome trace-event JSON
  --log LEVEL      log to stderr, as `capture demo --log`
  --list           the scenarios, one a line, with what each shows
  -h, --help       this help

exit status: 0 when the scenario ran as expected; 1 when it did not; 2 for a usage
error or a build without the mock.";

/// `capture timeline-svg`'s help.
pub(crate) const SVG_HELP: &str = "usage: capture timeline-svg IN.json OUT.svg

Draws a timeline that `--timeline` wrote (Chrome trace-event JSON) as an SVG picture:
a lane per track, spans as labelled boxes on one time axis (a nested span a row below
its parent), instants as ticks; every box and tick has a tooltip with its arguments.

exit status: 0 when the picture was written; 1 when IN.json cannot be read or drawn,
or OUT.svg cannot be written; 2 for a usage error.";

/// The backends `capture trace` runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TraceBackend {
    /// The mock, every call on the caller's thread.
    Mock,
    /// The mock with thread-affine streams.
    AffineMock,
}

/// `capture trace`'s options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TraceArgs {
    /// The scenario's name (checked when it is looked up).
    pub(crate) scenario: String,
    /// The backend.
    pub(crate) backend: TraceBackend,
    /// `--log`'s directives.
    pub(crate) log: Option<String>,
    /// Where `--timeline` writes the timeline.
    pub(crate) timeline: Option<PathBuf>,
}

/// What `capture trace`'s arguments ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Trace {
    /// Print the help.
    Help,
    /// List the scenarios.
    List,
    /// Run a scenario.
    Run(TraceArgs),
}

/// Parses `capture trace`'s arguments (those after `trace`).
pub(crate) fn parse_trace(args: &[String]) -> Result<Trace, UsageError> {
    let mut scenario = None;
    let mut parsed = TraceArgs {
        scenario: String::new(),
        backend: TraceBackend::Mock,
        log: None,
        timeline: None,
    };
    let mut list = false;
    let mut options = Options(args.iter());
    while let Some((name, inline)) = options.next_option() {
        let mut value = |name: &str| options.value(name, inline.clone());
        match name {
            "-h" | "--help" => return Ok(Trace::Help),
            "--list" => list = true,
            "--backend" => {
                let v = value(name)?;
                parsed.backend = match v.as_str() {
                    "mock" => TraceBackend::Mock,
                    "affine-mock" => TraceBackend::AffineMock,
                    _ => {
                        return Err(UsageError(format!(
                            "unknown backend {v:?} for --backend (mock or affine-mock)"
                        )));
                    }
                };
            }
            "--log" => parsed.log = Some(log(name, value(name)?)?),
            "--timeline" => parsed.timeline = Some(path(name, value(name)?)?),
            other if other.starts_with('-') => {
                return Err(UsageError(format!("unknown option {other:?}")));
            }
            other => match scenario {
                None => scenario = Some(other.to_owned()),
                Some(first) => {
                    return Err(UsageError(format!(
                        "one scenario at a time: {first:?} and {other:?}"
                    )));
                }
            },
        }
    }
    if list {
        return Ok(Trace::List);
    }
    parsed.scenario = scenario
        .ok_or_else(|| UsageError("name a scenario (`capture trace --list` names them)".into()))?;
    Ok(Trace::Run(parsed))
}

/// `capture timeline-svg`'s arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SvgArgs {
    /// The timeline JSON to read.
    pub(crate) input: PathBuf,
    /// The SVG file to write.
    pub(crate) output: PathBuf,
}

/// What `capture timeline-svg`'s arguments ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Svg {
    /// Print the help.
    Help,
    /// Draw the picture.
    Run(SvgArgs),
}

/// Parses `capture timeline-svg`'s arguments: `IN.json OUT.svg`.
pub(crate) fn parse_svg(args: &[String]) -> Result<Svg, UsageError> {
    let mut files = Vec::new();
    for arg in args {
        match arg.as_str() {
            "-h" | "--help" => return Ok(Svg::Help),
            other if other.starts_with('-') && other.len() > 1 => {
                return Err(UsageError(format!("unknown option {other:?}")));
            }
            other => files.push(path("a file name", other.to_owned())?),
        }
    }
    match <[PathBuf; 2]>::try_from(files) {
        Ok([input, output]) => Ok(Svg::Run(SvgArgs { input, output })),
        Err(files) => Err(UsageError(format!(
            "expected two files, IN.json and OUT.svg; got {}",
            files.len()
        ))),
    }
}

/// `--log`'s value: a directive list, checked when the subscriber is built.
fn log(name: &str, value: String) -> Result<String, UsageError> {
    if value.trim().is_empty() {
        return Err(UsageError(format!("invalid value {value:?} for {name}")));
    }
    Ok(value)
}

/// A file name option's value.
fn path(name: &str, value: String) -> Result<PathBuf, UsageError> {
    if value.is_empty() {
        return Err(UsageError(format!("invalid value {value:?} for {name}")));
    }
    Ok(PathBuf::from(value))
}

/// `capture decode`'s help: what it runs, its options and its exit statuses.
pub(crate) const DECODE_HELP: &str =
    "usage: capture decode [--backend mock|vulkan|cuda] [--device D] [--tokens T] [--dim D]
       [--layers L] [--heads H] [--vocab V] [--context C] [--seed S]
       [--buckets B1,B2,... [--steps N] [--replays R] [--block-rows K]]
       [--log LEVEL] [--timeline PATH]

A llama-shaped decoder with seeded random weights (no download): prefills a short
prompt eagerly, generates T tokens eagerly, then captures the decode step once and
generates them again by replaying it, the position and token advancing on the device.
Prints tokens/s and µs per token for each mode, their ratio, kernels per step, the
capture time, the graph's ledger and the generated ids. Checks that both modes give
the same ids and bit-identical logits at every step, and that the logits match a
plain-Rust reference of the model within the stated tolerance.

With --buckets, a batch of sequences steps at once over a paged KV cache (blocks of
K rows, a block table per sequence in device memory), its step captured once per
bucket into one graph pool; each step runs the smallest bucket that holds the live
batch, padding the rest. Over N steps (up the buckets and back down, sequences
starting and ending, tables changing) it checks the replayed logits bit for bit
against eager and against a ladder of separate pools, that the shared pool holds at
most 1.05x its largest bucket captured alone (captured ascending and descending),
and that R further replays leave the memory report unchanged; it prints tokens/s per
bucket eager and replayed, and the ladder's memory shared against separate pools.

options:
  --backend NAME   mock (default), vulkan or cuda (builds with `--features vulkan`,
                   `--features cuda`)
  --device D       with --backend vulkan: the device to open (index or piece of its name)
  --tokens T       tokens generated per mode, 1 to 65536 (default 64)
  --dim D          model width, 2 to 8192 (default 256)
  --layers L       transformer layers, 1 to 256 (default 4)
  --heads H        attention heads, 1 to 256, dividing dim into even widths (default 4)
  --vocab V        vocabulary size, 2 to 1048576 (default 512)
  --context C      KV-cache rows, 2 to 65536 (default 256); the 4-token prompt and T
                   tokens need T + 3 rows
  --seed S         the weights' and prompt's seed (default 14)
  --buckets LIST   batch-size buckets, ascending (e.g. 1,2,4,8; 1 to 64 slots): run
                   the batched ladder (model default: dim 64, 1 layer, 2 heads,
                   vocab 128, context 64)
  --steps N        with --buckets: decode steps, 32 to 4096 (default 40)
  --replays R      with --buckets: further replays the memory must not move over,
                   0 to 1000000 (default 1000)
  --block-rows K   with --buckets: rows per KV-cache block (default 8)
  --log LEVEL      log the core's spans and events to stderr, as `capture demo --log`
  --timeline PATH  write the run's timeline to PATH as Chrome trace-event JSON
  -h, --help       this help

Options also take the form --name=value.

exit status: 0 when every check holds (or CUDA has no GPU: SKIP, unless
CAPTURE_REQUIRE_CUDA=1); 1 when a check fails or the runtime fails; 2 for a usage
error or a backend this build was made without.";

/// `capture decode`'s options.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DecodeArgs {
    /// Where it runs.
    pub(crate) backend: BackendName,
    /// The Vulkan device to open.
    pub(crate) device: Option<String>,
    /// What it runs.
    pub(crate) options: crate::decode::DecodeOptions,
    /// With `--buckets`: the batched ladder instead.
    pub(crate) ladder: Option<crate::decode::LadderOptions>,
    /// `--log`'s directives.
    pub(crate) log: Option<String>,
    /// Where `--timeline` writes the timeline.
    pub(crate) timeline: Option<PathBuf>,
}

/// What `capture decode`'s arguments ask for.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Decode {
    /// Print the help.
    Help,
    /// Run the decoder.
    Run(DecodeArgs),
}

/// Parses `capture decode`'s arguments (those after `decode`).
pub(crate) fn parse_decode(args: &[String]) -> Result<Decode, UsageError> {
    let mut parsed = DecodeArgs {
        backend: BackendName::Mock,
        device: None,
        options: crate::decode::DecodeOptions::default(),
        ladder: None,
        log: None,
        timeline: None,
    };
    let (mut buckets, mut steps, mut replays, mut block_rows) = (None, None, None, None);
    let (mut size_given, mut tokens) = (false, false);
    let mut options = Options(args.iter());
    while let Some((name, inline)) = options.next_option() {
        match name {
            "--log" => {
                parsed.log = Some(log(name, options.value(name, inline)?)?);
                continue;
            }
            "--timeline" => {
                parsed.timeline = Some(path(name, options.value(name, inline)?)?);
                continue;
            }
            _ => {}
        }
        let mut value = |name: &str| options.value(name, inline.clone());
        let o = &mut parsed.options;
        let mut sized = |name: &str, range: (u64, u64), what: &str| -> Result<u32, UsageError> {
            let v = value(name)?;
            let n = number(name, &v, range, what)?;
            u32::try_from(n).map_err(|_| out_of_range(name, &v))
        };
        match name {
            "-h" | "--help" => return Ok(Decode::Help),
            "--backend" => parsed.backend = backend_name(&value(name)?)?,
            "--device" => parsed.device = Some(device_name(value(name)?)?),
            "--tokens" => {
                o.tokens = sized(name, (1, 65_536), "tokens")?;
                tokens = true;
            }
            "--dim" | "--layers" | "--heads" | "--vocab" | "--context" => {
                let (range, what, field) = match name {
                    "--dim" => ((2, 8192), "model width", &mut o.config.dim),
                    "--layers" => ((1, 256), "layers", &mut o.config.layers),
                    "--heads" => ((1, 256), "heads", &mut o.config.heads),
                    "--vocab" => ((2, 1 << 20), "vocabulary entries", &mut o.config.vocab),
                    _ => ((2, 65_536), "cache rows", &mut o.config.context),
                };
                *field = sized(name, range, what)?;
                size_given = true;
            }
            "--buckets" => buckets = Some(bucket_list(name, &value(name)?)?),
            "--steps" => steps = Some(sized(name, (32, 4096), "steps")?),
            "--replays" => replays = Some(sized(name, (0, 1_000_000), "replays")?),
            "--block-rows" => block_rows = Some(sized(name, (1, 65_536), "rows per block")?),
            "--seed" => {
                let v = value(name)?;
                o.seed = number(name, &v, (0, u64::MAX), "seed")?;
            }
            other => return Err(UsageError(format!("unknown option {other:?}"))),
        }
    }
    match buckets {
        Some(buckets) => {
            if tokens {
                return Err(UsageError(
                    "--tokens is the single-sequence decoder's; with --buckets, --steps".into(),
                ));
            }
            let mut ladder = crate::decode::LadderOptions::new(buckets);
            if size_given {
                ladder.config = parsed.options.config;
            }
            ladder.seed = parsed.options.seed;
            ladder.steps = steps.unwrap_or(ladder.steps);
            ladder.replays = replays.unwrap_or(ladder.replays);
            ladder.block_rows = block_rows.unwrap_or(ladder.block_rows);
            ladder.check().map_err(|e| UsageError(e.to_string()))?;
            parsed.ladder = Some(ladder);
        }
        None if steps.is_some() || replays.is_some() || block_rows.is_some() => {
            return Err(UsageError(
                "--steps, --replays and --block-rows go with --buckets".into(),
            ));
        }
        None => {}
    }
    if parsed.device.is_some() && parsed.backend != BackendName::Vulkan {
        return Err(UsageError(format!(
            "--device is for --backend vulkan, not {}",
            parsed.backend
        )));
    }
    if parsed.ladder.is_none() {
        parsed
            .options
            .check()
            .map_err(|e| UsageError(e.to_string()))?;
    }
    Ok(Decode::Run(parsed))
}

/// `--buckets`' list: slot counts separated by commas.
fn bucket_list(name: &str, value: &str) -> Result<Vec<u32>, UsageError> {
    value
        .split(',')
        .map(|b| {
            b.trim().parse::<u32>().map_err(|_| {
                UsageError(format!(
                    "invalid value {value:?} for {name}: {b:?} is not a slot count"
                ))
            })
        })
        .collect()
}

/// A command's arguments, option by option: `--name value` or `--name=value`.
struct Options<'a>(std::slice::Iter<'a, String>);

impl<'a> Options<'a> {
    /// The next option's name, and its value when given inline.
    fn next_option(&mut self) -> Option<(&'a str, Option<String>)> {
        let arg = self.0.next()?;
        Some(match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => (name, Some(value.to_owned())),
            _ => (arg.as_str(), None),
        })
    }

    /// Option `name`'s value: the inline one, else the next argument.
    fn value(&mut self, name: &str, inline: Option<String>) -> Result<String, UsageError> {
        inline
            .or_else(|| self.0.next().cloned())
            .ok_or_else(|| UsageError(format!("{name} needs a value")))
    }
}

/// `value` of option `name` as a whole number within `range` (inclusive).
fn number(name: &str, value: &str, range: (u64, u64), what: &str) -> Result<u64, UsageError> {
    let (min, max) = range;
    let n: u64 = value.trim().parse().map_err(|_| {
        UsageError(format!(
            "invalid value {value:?} for {name}: expected a whole number of {what}, \
             {min} to {max}"
        ))
    })?;
    if !(min..=max).contains(&n) {
        return Err(UsageError(format!(
            "invalid value {value:?} for {name}: {what} must be {min} to {max}"
        )));
    }
    Ok(n)
}

fn out_of_range(name: &str, value: &str) -> UsageError {
    UsageError(format!(
        "invalid value {value:?} for {name}: too large for this machine"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Demo, UsageError> {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        parse_demo(&args)
    }

    #[test]
    fn defaults_are_the_mock_512_kernels_and_20_replays() {
        assert_eq!(
            parse(&[]),
            Ok(Demo::Run(DemoArgs {
                backend: BackendName::Mock,
                device: None,
                kernels: 512,
                replays: 20,
                log: None,
                timeline: None,
            }))
        );
    }

    #[test]
    fn options_take_a_separate_or_inline_value() {
        assert_eq!(
            parse(&["--backend", "cuda", "--kernels=64", "--replays", "3"]),
            Ok(Demo::Run(DemoArgs {
                backend: BackendName::Cuda,
                device: None,
                kernels: 64,
                replays: 3,
                log: None,
                timeline: None,
            }))
        );
    }

    #[test]
    fn device_names_a_vulkan_device() {
        assert_eq!(
            parse(&["--backend", "vulkan", "--device=llvmpipe"]),
            Ok(Demo::Run(DemoArgs {
                backend: BackendName::Vulkan,
                device: Some("llvmpipe".into()),
                ..DemoArgs::default()
            }))
        );
        let error = parse(&["--device", "0"]).expect_err("refused");
        assert!(
            error
                .0
                .contains("--device is for --backend vulkan, not mock"),
            "{error}"
        );
    }

    #[test]
    fn help_wins_over_other_options() {
        assert_eq!(parse(&["--kernels", "64", "-h"]), Ok(Demo::Help));
        assert_eq!(parse(&["--help"]), Ok(Demo::Help));
    }

    fn bench(args: &[&str]) -> Result<Bench, UsageError> {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        parse_bench(&args)
    }

    #[test]
    fn bench_defaults_to_every_row_and_backend_with_five_rounds() {
        let Ok(Bench::Run(args)) = bench(&[]) else {
            panic!("parsed")
        };
        assert!(args.backends.is_empty());
        assert_eq!(args.options.rows.len(), 5);
        assert_eq!(args.options.rounds, 5);
        assert_eq!(args.options.passes, None);
        assert_eq!((args.competitors, args.json), (0, false));
    }

    #[test]
    fn bench_takes_lists_groups_and_counts() {
        let Ok(Bench::Run(args)) = bench(&[
            "--backend=mock,affine-mock",
            "--rows",
            "controls,64x150",
            "--rounds=7",
            "--passes",
            "3",
            "--competitors=2",
            "--json",
        ]) else {
            panic!("parsed")
        };
        assert_eq!(
            args.backends,
            vec![BenchBackend::Mock, BenchBackend::AffineMock]
        );
        let rows: Vec<_> = args.options.rows.iter().map(|r| r.name).collect();
        assert_eq!(rows, ["64kx1000", "1Mx500", "64x150"]);
        assert_eq!((args.options.rounds, args.options.passes), (7, Some(3)));
        assert_eq!((args.competitors, args.json), (2, true));
        assert!(
            !args.options.decode,
            "rows named without decode leave it out"
        );
        assert_eq!(bench(&["--json", "-h"]), Ok(Bench::Help));
        let decode_only = |args: &[&str]| match bench(args) {
            Ok(Bench::Run(a)) => (a.options.rows.len(), a.options.decode),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            decode_only(&[]),
            (5, true),
            "by default every row and decode"
        );
        assert_eq!(decode_only(&["--rows", "decode"]), (0, true));
        assert_eq!(decode_only(&["--rows=all"]), (5, true));
    }

    #[test]
    fn bench_bad_values_are_named() {
        for (args, named) in [
            (&["--rounds", "4"][..], "\"4\""),
            (&["--passes", "0"], "\"0\""),
            (&["--competitors", "65"], "\"65\""),
            (&["--backend", "metal"], "\"metal\""),
            (&["--rows", "64x7"], "\"64x7\""),
            (&["--backend", "mock", "--device", "0"], "--device"),
            (&["--frobnicate"], "\"--frobnicate\""),
        ] {
            let error = bench(args).expect_err("refused");
            assert!(error.0.contains(named), "{args:?}: {error}");
        }
    }

    #[test]
    fn demo_and_bench_take_a_log_directive_and_demo_a_timeline_file() {
        assert_eq!(
            parse(&["--log", "capture=debug", "--timeline=out.json"]),
            Ok(Demo::Run(DemoArgs {
                log: Some("capture=debug".into()),
                timeline: Some(PathBuf::from("out.json")),
                ..DemoArgs::default()
            }))
        );
        let Ok(Bench::Run(args)) = bench(&["--log=info"]) else {
            panic!("parsed")
        };
        assert_eq!(args.log.as_deref(), Some("info"));
        for args in [&["--log", ""][..], &["--timeline="], &["--timeline"]] {
            let error = parse(args).expect_err("refused");
            assert!(
                error.0.contains(args[0].split('=').next().unwrap_or("")),
                "{error}"
            );
        }
        assert!(
            bench(&["--timeline", "x.json"]).is_err(),
            "bench draws no timeline"
        );
    }

    fn trace(args: &[&str]) -> Result<Trace, UsageError> {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        parse_trace(&args)
    }

    #[test]
    fn trace_takes_one_scenario_a_backend_a_timeline_and_a_log() {
        assert_eq!(
            trace(&[
                "fault",
                "--backend",
                "affine-mock",
                "--timeline",
                "t.json",
                "--log=debug"
            ]),
            Ok(Trace::Run(TraceArgs {
                scenario: "fault".into(),
                backend: TraceBackend::AffineMock,
                log: Some("debug".into()),
                timeline: Some(PathBuf::from("t.json")),
            }))
        );
        assert_eq!(
            trace(&["--backend=mock", "two-streams"]),
            Ok(Trace::Run(TraceArgs {
                scenario: "two-streams".into(),
                backend: TraceBackend::Mock,
                log: None,
                timeline: None,
            }))
        );
        assert_eq!(trace(&["--list"]), Ok(Trace::List));
        assert_eq!(trace(&["fault", "-h"]), Ok(Trace::Help));
        for (args, named) in [
            (&[][..], "name a scenario"),
            (&["a", "b"], "one scenario at a time"),
            (&["fault", "--backend", "vulkan"], "\"vulkan\""),
            (&["fault", "--kernels", "3"], "\"--kernels\""),
        ] {
            let error = trace(args).expect_err("refused");
            assert!(error.0.contains(named), "{args:?}: {error}");
        }
    }

    #[test]
    fn timeline_svg_takes_two_files() {
        let svg =
            |args: &[&str]| parse_svg(&args.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
        assert_eq!(
            svg(&["in.json", "out.svg"]),
            Ok(Svg::Run(SvgArgs {
                input: PathBuf::from("in.json"),
                output: PathBuf::from("out.svg"),
            }))
        );
        assert_eq!(svg(&["in.json", "--help"]), Ok(Svg::Help));
        for args in [&["in.json"][..], &["a", "b", "c"], &["--width", "3"]] {
            assert!(svg(args).is_err(), "{args:?}");
        }
    }

    #[test]
    fn bad_values_are_named() {
        for (args, named) in [
            (&["--kernels", "0"][..], "\"0\""),
            (&["--kernels", "1"], "\"1\""),
            (&["--kernels", "abc"], "\"abc\""),
            (&["--kernels", "-5"], "\"-5\""),
            (&["--kernels", "100001"], "\"100001\""),
            (&["--replays", "0"], "\"0\""),
            (&["--replays=x"], "\"x\""),
            (&["--backend", "metal"], "\"metal\""),
            (&["--frobnicate"], "\"--frobnicate\""),
            (&["--kernels"], "--kernels needs a value"),
            (&["--backend", "vulkan", "--device", ""], "--device"),
        ] {
            let error = parse(args).expect_err("refused");
            assert!(error.0.contains(named), "{args:?}: {error}");
        }
    }

    fn decode(args: &[&str]) -> Result<Decode, UsageError> {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        parse_decode(&args)
    }

    #[test]
    fn decode_takes_sizes_and_refuses_what_does_not_fit() {
        let Ok(Decode::Run(args)) = decode(&["--dim=64", "--layers", "2", "--tokens", "16"]) else {
            panic!("parsed")
        };
        assert_eq!(
            (args.backend, args.options.config.dim),
            (BackendName::Mock, 64)
        );
        assert_eq!((args.options.config.layers, args.options.tokens), (2, 16));
        assert_eq!(args.options.config.heads, 4);
        for (args, named) in [
            (&["--dim", "30"][..], "even head width"),
            (&["--tokens", "300"], "cache rows"),
            (&["--tokens", "0"], "\"0\""),
            (&["--seed", "x"], "\"x\""),
            (&["--device", "0"], "--device"),
            (&["--backend", "metal"], "\"metal\""),
        ] {
            let error = decode(args).expect_err("refused");
            assert!(error.0.contains(named), "{args:?}: {error}");
        }
        assert_eq!(decode(&["--dim", "7", "-h"]), Ok(Decode::Help));
    }

    #[test]
    fn decode_takes_buckets_and_refuses_a_ladder_that_does_not_fit() {
        let Ok(Decode::Run(args)) = decode(&["--buckets", "1,2,4,8", "--replays=10"]) else {
            panic!("parsed")
        };
        let ladder = args.ladder.expect("a ladder");
        assert_eq!(ladder.buckets, [1, 2, 4, 8]);
        assert_eq!(
            (ladder.steps, ladder.replays, ladder.block_rows),
            (40, 10, 8)
        );
        assert_eq!(ladder.config, crate::decode::LadderOptions::CONFIG);
        let Ok(Decode::Run(args)) = decode(&["--buckets=2,3", "--dim", "32", "--steps", "33"])
        else {
            panic!("parsed")
        };
        let ladder = args.ladder.expect("a ladder");
        assert_eq!((ladder.config.dim, ladder.steps), (32, 33));
        for (args, named) in [
            (&["--buckets", "4,2"][..], "ascending"),
            (&["--buckets", "0,1"], "ascending"),
            (&["--buckets", "1,128"], "64"),
            (&["--buckets", "1,x"], "\"x\""),
            (&["--buckets", "1", "--steps", "8"], "--steps"),
            (&["--buckets", "1", "--tokens", "8"], "--steps"),
            (&["--buckets", "1", "--block-rows", "99"], "block rows"),
            (&["--replays", "5"], "--buckets"),
        ] {
            let error = decode(args).expect_err("refused");
            assert!(error.0.contains(named), "{args:?}: {error}");
        }
    }

    #[test]
    fn decode_takes_log_and_timeline_like_demo() {
        let Ok(Decode::Run(args)) = decode(&["--log", "debug", "--timeline=t.json", "--dim", "64"])
        else {
            panic!("parsed")
        };
        assert_eq!(args.log.as_deref(), Some("debug"));
        assert_eq!(args.timeline, Some(PathBuf::from("t.json")));
        assert_eq!(args.options.config.dim, 64);
        assert!(decode(&["--timeline"]).is_err(), "--timeline needs a path");
    }
}
