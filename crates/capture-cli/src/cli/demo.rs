//! `capture demo`: its help, the parsing of its options into [`DemoArgs`], and its run
//! on the backend named (the chain of [`crate::demo`] eager and replayed, its table,
//! the outputs compared).

use std::path::PathBuf;
use std::process::ExitCode;

use capture_decode::DecodeBackend;

use crate::args::{Options, UsageError, device_name, log, number};
use crate::args::{out_of_range, path};
use crate::backends::{BackendName, OnBackend, backend_name, device_for, run_on};
use crate::exit::{finish, usage};
use crate::{chain, demo, logging, table};

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
    device_for(parsed.backend, parsed.device.as_deref())?;
    Ok(Demo::Run(parsed))
}

/// Parses the arguments after `demo` and runs it.
pub(super) fn command(args: &[String]) -> ExitCode {
    match parse_demo(args) {
        Ok(Demo::Help) => {
            println!("{DEMO_HELP}");
            ExitCode::SUCCESS
        }
        Ok(Demo::Run(args)) => {
            let session = match logging::start(args.log.as_deref(), args.timeline.as_deref()) {
                Ok(session) => session,
                Err(error) => return usage("demo", DEMO_HELP, &error),
            };
            let (backend, device) = (args.backend, args.device.clone());
            let code = run_on(backend, device.as_deref(), args);
            finish("demo", session, code)
        }
        Err(error) => usage("demo", DEMO_HELP, &error),
    }
}

impl OnBackend for DemoArgs {
    const COMMAND: &'static str = "demo";
    const MEMORY_IN_DEVICE_LINE: bool = true;
    const SKIP_WITHOUT_CUDA: bool = false;

    fn run<B: capture_graphs::Builtins + DecodeBackend>(self, backend: B, host: bool) -> ExitCode {
        run(backend, self, host)
    }
}

/// Runs the demo on `backend`, prints its table and compares the outputs.
/// `host_overhead_only` says the figures measure host cost only (the mock's).
fn run<B: capture_graphs::Builtins>(
    backend: B,
    args: DemoArgs,
    host_overhead_only: bool,
) -> ExitCode {
    use capture_graphs::Chain;

    let options = demo::DemoOptions {
        kernels: args.kernels,
        replays: args.replays,
    };
    let report = match demo::run_demo(backend, options) {
        Ok(report) => report,
        Err(error) => {
            eprintln!(
                "capture demo --backend {}: the runtime failed: {}",
                args.backend,
                Chain(&error)
            );
            return ExitCode::FAILURE;
        }
    };
    print!(
        "{}",
        table::render(&report, args.backend.as_str(), host_overhead_only)
    );
    let mut ok = true;
    for (what, right) in [
        ("replayed", &report.replayed_output),
        ("host model", &report.model_output),
    ] {
        if let Some(d) = demo::first_difference(&report.eager_output, right) {
            ok = false;
            eprintln!(
                "results differ: element {} of the output is {} eager but {} {what}",
                d.index,
                shown(d.left),
                shown(d.right)
            );
        }
    }
    if !ok {
        return ExitCode::FAILURE;
    }
    println!(
        "results match: eager and replayed outputs are bit-identical ({} elements) and equal \
         the builtins' host model",
        chain::ELEMENTS
    );
    ExitCode::SUCCESS
}

/// An element for a message: its value with its bits, or that there is none.
fn shown(value: Option<f32>) -> String {
    value.map_or_else(
        || "missing".to_owned(),
        |v| format!("{v} (0x{:08x})", v.to_bits()),
    )
}

#[cfg(test)]
mod tests;
