//! capture-cli: the `capture` command-line program over `capture-graphs`, and the
//! library its tests, benches and the CUDA driver model's kernel set use: the
//! llama-shaped decoder ([`decode`]) and the program's named multi-stream scenarios
//! ([`scenarios`]).
//!
//! The program is a user of the facade like any other: every call goes through
//! `capture_graphs`; only the benchmark's hand-written floors come from the backends
//! themselves (their non-default `floor` feature).
//!
//! `capture demo [--backend mock|vulkan|cuda] [--device D] [--kernels N] [--replays R]` runs a
//! decode-shaped chain of small dependent kernels eagerly and as a replayed graph,
//! checks that both give the same bytes, and prints the cost per kernel of each mode,
//! their ratio, the capture time and the graph's ledger. The mock runs by default; Vulkan
//! and CUDA in builds with the `vulkan` and `cuda` features.
//!
//! `capture decode` runs a llama-shaped decoder eagerly and as one replayed graph per
//! token (docs/decode.md). `capture bench` runs the benchmark matrix. `capture trace SCENARIO` runs one of the
//! program's named multi-stream scenarios on the mock and prints its trace lines.
//! `--log LEVEL` (demo, bench, trace, decode) logs the core's spans and events to stderr;
//! `--timeline PATH` (demo, trace, decode) writes the run's timeline as Chrome trace-event JSON,
//! which `capture timeline-svg IN.json OUT.svg` draws as a picture.

// Unsafe code only in `decode::cublas` (the cuBLAS FFI and its foreign work), which
// allows it; each block there has a `// SAFETY:` line.
#![deny(unsafe_code)]

mod bench;
mod bench_table;
mod chain;
mod cli;
mod competitors;
mod cpu_time;
pub mod decode;
mod decode_cmd;
mod demo;
mod exit;
mod floors;
mod logging;
#[cfg(feature = "mock")]
pub mod scenarios;
mod table;
mod timeline;
mod timeline_svg;
mod trace_event;

use std::process::ExitCode;

use cli::{BackendName, Demo, DemoArgs};
use exit::{USAGE_EXIT, finish, usage};

/// Runs `capture ARGS` (the program's arguments, without its name) and returns its exit
/// status: the `capture` binary's whole `main`.
pub fn main_with_args(args: &[String]) -> ExitCode {
    match args.first().map(String::as_str) {
        Some("demo") => demo_command(&args[1..]),
        Some("bench") => bench_command(&args[1..]),
        Some("decode") => decode_cmd::command(&args[1..]),
        Some("trace") => trace_command(&args[1..]),
        Some("timeline-svg") => svg_command(&args[1..]),
        Some("-h" | "--help" | "help") => {
            println!("{}", cli::USAGE);
            ExitCode::SUCCESS
        }
        None => {
            eprintln!("{}", cli::USAGE);
            ExitCode::from(USAGE_EXIT)
        }
        Some(other) => {
            eprintln!("capture: unknown command {other:?}\n\n{}", cli::USAGE);
            ExitCode::from(USAGE_EXIT)
        }
    }
}

fn demo_command(args: &[String]) -> ExitCode {
    match cli::parse_demo(args) {
        Ok(Demo::Help) => {
            println!("{}", cli::DEMO_HELP);
            ExitCode::SUCCESS
        }
        Ok(Demo::Run(args)) => {
            let session = match logging::start(args.log.as_deref(), args.timeline.as_deref()) {
                Ok(session) => session,
                Err(error) => return usage("demo", cli::DEMO_HELP, &error),
            };
            let code = match args.backend {
                BackendName::Mock => run_mock(args),
                BackendName::Vulkan => run_vulkan(args),
                BackendName::Cuda => run_cuda(args),
            };
            finish("demo", session, code)
        }
        Err(error) => usage("demo", cli::DEMO_HELP, &error),
    }
}

/// `capture trace`: a named scenario's trace lines, and its timeline.
fn trace_command(args: &[String]) -> ExitCode {
    match cli::parse_trace(args) {
        Ok(cli::Trace::Help) => {
            println!("{}", cli::TRACE_HELP);
            ExitCode::SUCCESS
        }
        Ok(cli::Trace::List) => list_scenarios(),
        Ok(cli::Trace::Run(args)) => run_scenario(args),
        Err(error) => usage("trace", cli::TRACE_HELP, &error),
    }
}

#[cfg(feature = "mock")]
fn list_scenarios() -> ExitCode {
    let width = scenarios::ALL
        .iter()
        .map(|s| s.name.len())
        .max()
        .unwrap_or(0);
    for s in scenarios::ALL {
        println!("{:width$}  {}", s.name, s.about);
    }
    ExitCode::SUCCESS
}

#[cfg(feature = "mock")]
fn run_scenario(args: cli::TraceArgs) -> ExitCode {
    let Some(scenario) = scenarios::find(&args.scenario) else {
        let names: Vec<_> = scenarios::ALL.iter().map(|s| s.name).collect();
        let error = format!(
            "unknown scenario {:?} ({})",
            args.scenario,
            names.join(", ")
        );
        return usage("trace", cli::TRACE_HELP, &error);
    };
    let session = match logging::start(args.log.as_deref(), args.timeline.as_deref()) {
        Ok(session) => session,
        Err(error) => return usage("trace", cli::TRACE_HELP, &error),
    };
    let ran = match args.backend {
        cli::TraceBackend::Mock => scenario.run(capture_graphs::mock::MockBackend::new()),
        cli::TraceBackend::AffineMock => scenario.run(capture_graphs::mock::AffineMock::new()),
    };
    let code = match ran {
        Ok(trace) => {
            print!("{trace}");
            ExitCode::SUCCESS
        }
        Err(scenarios::Failed(why)) => {
            eprintln!("capture trace {}: {why}", scenario.name);
            ExitCode::FAILURE
        }
    };
    finish("trace", session, code)
}

#[cfg(not(feature = "mock"))]
fn list_scenarios() -> ExitCode {
    eprintln!("capture trace: this build has no mock backend, which the scenarios run on");
    ExitCode::from(USAGE_EXIT)
}

#[cfg(not(feature = "mock"))]
fn run_scenario(_: cli::TraceArgs) -> ExitCode {
    list_scenarios()
}

/// `capture timeline-svg IN.json OUT.svg`.
fn svg_command(args: &[String]) -> ExitCode {
    let args = match cli::parse_svg(args) {
        Ok(cli::Svg::Help) => {
            println!("{}", cli::SVG_HELP);
            return ExitCode::SUCCESS;
        }
        Ok(cli::Svg::Run(args)) => args,
        Err(error) => return usage("timeline-svg", cli::SVG_HELP, &error),
    };
    let drawn = std::fs::read_to_string(&args.input)
        .map_err(|e| format!("cannot read {}: {e}", args.input.display()))
        .and_then(|text| {
            serde_json::from_str(&text)
                .map_err(|e| format!("{} is not JSON: {e}", args.input.display()))
        })
        .and_then(|json| {
            timeline_svg::render(&json)
                .map_err(|e| format!("{} is not a timeline: {}", args.input.display(), e.0))
        })
        .and_then(|svg| {
            std::fs::write(&args.output, svg)
                .map_err(|e| format!("cannot write {}: {e}", args.output.display()))
        });
    match drawn {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("capture timeline-svg: {error}");
            ExitCode::FAILURE
        }
    }
}

/// `capture bench`: every backend named (or built), each row, then the tables or JSON.
fn bench_command(args: &[String]) -> ExitCode {
    let args = match cli::parse_bench(args) {
        Ok(cli::Bench::Help) => {
            println!("{}", cli::BENCH_HELP);
            return ExitCode::SUCCESS;
        }
        Ok(cli::Bench::Run(args)) => args,
        Err(error) => return usage("bench", cli::BENCH_HELP, &error),
    };
    let session = match logging::start(args.log.as_deref(), None) {
        Ok(session) => session,
        Err(error) => return usage("bench", cli::BENCH_HELP, &error),
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
        run.backends.push(floors::bench(backend, named, &args));
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

/// The demo on CUDA device 0.
#[cfg(feature = "cuda")]
fn run_cuda(args: DemoArgs) -> ExitCode {
    let describe = |b: &capture_graphs::cuda::CudaBackend| {
        let (major, minor) = b.compute_capability();
        format!(
            "{} (compute {major}.{minor}), driver CUDA {}",
            b.device_name(),
            b.driver_version()
        )
    };
    open_then_run(capture_graphs::cuda::CudaBackend::new(0), describe, args)
}

#[cfg(not(feature = "cuda"))]
fn run_cuda(args: DemoArgs) -> ExitCode {
    not_built(args, "cuda")
}

/// A backend this build was made without: says which feature brings it, runs nothing.
#[cfg(any(not(feature = "vulkan"), not(feature = "cuda")))]
fn not_built(args: DemoArgs, feature: &str) -> ExitCode {
    eprintln!(
        "capture demo: this build has no {} backend; build with `--features {feature}` \
         (`cargo run --release -p capture-cli --features {feature} -- demo --backend {feature}`). \
         Nothing was run.",
        args.backend
    );
    ExitCode::from(USAGE_EXIT)
}

/// Runs the demo on a backend that opened (after printing `device`), or says why it
/// could not open.
#[cfg(any(feature = "vulkan", feature = "cuda"))]
fn open_then_run<B: capture_graphs::Builtins, E: std::fmt::Display>(
    opened: Result<B, E>,
    device: impl FnOnce(&B) -> String,
    args: DemoArgs,
) -> ExitCode {
    match opened {
        Ok(backend) => {
            println!("device: {}", device(&backend));
            run(backend, args, false)
        }
        Err(e) => {
            eprintln!(
                "capture demo --backend {}: {e}. Nothing was run.",
                args.backend
            );
            ExitCode::FAILURE
        }
    }
}

#[cfg(feature = "mock")]
fn run_mock(args: DemoArgs) -> ExitCode {
    run(capture_graphs::mock::MockBackend::new(), args, true)
}

#[cfg(not(feature = "mock"))]
fn run_mock(args: DemoArgs) -> ExitCode {
    eprintln!(
        "capture demo: this build has no {} backend (built without the `mock` feature). \
         Nothing was run.",
        args.backend
    );
    ExitCode::from(USAGE_EXIT)
}

/// The demo on the Vulkan device `--device` or `CAPTURE_VULKAN_DEVICE` names, else the
/// best-ranked one (lavapipe in CI), in the memory mode `CAPTURE_VK_FORCE_STAGING`
/// selects; the device line says which memory the backend chose.
#[cfg(feature = "vulkan")]
fn run_vulkan(args: DemoArgs) -> ExitCode {
    let describe = |b: &capture_graphs::vulkan::VulkanBackend| {
        let (major, minor, patch) = b.api_version();
        format!(
            "{} ({}, Vulkan {major}.{minor}.{patch}), {:?} memory: {}",
            b.device_name(),
            b.device_kind(),
            b.memory_mode(),
            b.memory_choice()
        )
    };
    let mut options = capture_graphs::vulkan::VulkanOptions::from_env();
    if let Some(device) = &args.device {
        options.device = Some(capture_graphs::vulkan::DeviceSelector::parse(device));
    }
    open_then_run(
        capture_graphs::vulkan::VulkanBackend::new(options),
        describe,
        args,
    )
}

#[cfg(not(feature = "vulkan"))]
fn run_vulkan(args: DemoArgs) -> ExitCode {
    not_built(args, "vulkan")
}

/// Runs the demo on `backend`, prints its table and compares the outputs.
/// `host_overhead_only` says the figures measure host cost only (the mock's).
#[cfg_attr(
    not(any(feature = "mock", feature = "vulkan", feature = "cuda")),
    allow(dead_code)
)]
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
