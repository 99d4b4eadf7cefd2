//! `capture trace`: its help, the parsing of its options into [`TraceArgs`], and its
//! run: a named scenario of [`capture_scenarios`] on the mock, its trace lines printed,
//! or the check it failed.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::args::{Options, UsageError, log, path};
#[cfg(not(feature = "mock"))]
use crate::exit::USAGE_EXIT;
#[cfg(feature = "mock")]
use crate::exit::finish;
use crate::exit::usage;
#[cfg(feature = "mock")]
use crate::logging;
#[cfg(feature = "mock")]
use capture_scenarios::Scenario;

/// `capture trace`'s help.
pub(crate) const TRACE_HELP: &str =
    "usage: capture trace SCENARIO [--backend mock|affine-mock] [--timeline PATH] [--log LEVEL]
       capture trace --list

Runs a named scenario (`--list` names them; every backend's test suite runs them too)
on the mock, under the fault wrapper, with two pooled streams (logical streams 0 and 2
share pooled stream 0, stream 1 is on pooled stream 1). Checks its bytes and the
refusals it expects, then prints the core's trace, one event per line, as the snapshot
tests see it.

options:
  --backend NAME   mock (default; every call on the caller's thread) or affine-mock
                   (thread-affine streams: captures open and close on a worker)
  --timeline PATH  write the scenario's timeline to PATH as Chrome trace-event JSON
  --log LEVEL      log to stderr, as `capture demo --log`
  --list           the scenarios, one a line, with what each shows
  -h, --help       this help

exit status: 0 when the scenario ran as expected; 1 when it did not (what was wrong on
stderr); 2 for a usage error or a build without the mock.";

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

/// `capture trace`: a named scenario's trace lines, and its timeline.
pub(super) fn command(args: &[String]) -> ExitCode {
    match parse_trace(args) {
        Ok(Trace::Help) => {
            println!("{TRACE_HELP}");
            ExitCode::SUCCESS
        }
        Ok(Trace::List) => list_scenarios(),
        Ok(Trace::Run(args)) => run_scenario(args),
        Err(error) => usage("trace", TRACE_HELP, &error),
    }
}

#[cfg(feature = "mock")]
fn list_scenarios() -> ExitCode {
    let width = Scenario::ALL
        .iter()
        .map(|s| s.name().len())
        .max()
        .unwrap_or(0);
    for s in Scenario::ALL {
        println!("{:width$}  {}", s.name(), s.about());
    }
    ExitCode::SUCCESS
}

#[cfg(feature = "mock")]
fn run_scenario(args: TraceArgs) -> ExitCode {
    let Some(scenario) = Scenario::find(&args.scenario) else {
        let error = format!(
            "unknown scenario {:?} (`capture trace --list` names them)",
            args.scenario
        );
        return usage("trace", TRACE_HELP, &error);
    };
    let session = match logging::start(args.log.as_deref(), args.timeline.as_deref()) {
        Ok(session) => session,
        Err(error) => return usage("trace", TRACE_HELP, &error),
    };
    let ran = checked(|| match args.backend {
        TraceBackend::Mock => {
            capture_scenarios::run(scenario, capture_graphs::mock::MockBackend::new())
        }
        TraceBackend::AffineMock => {
            capture_scenarios::run(scenario, capture_graphs::mock::AffineMock::new())
        }
    });
    let failed = |why: &str| {
        eprintln!("capture trace {}: {why}", scenario.name());
        ExitCode::FAILURE
    };
    let code = match ran {
        Ok(Ok(trace)) => {
            print!("{trace}");
            ExitCode::SUCCESS
        }
        Ok(Err(error)) => failed(&format!(
            "unexpected error: {}",
            capture_graphs::Chain(&error)
        )),
        Err(why) => failed(&why),
    };
    finish("trace", session, code)
}

/// Runs `f`, a scenario, and returns what it returned, or, when one of its checks
/// panicked, the panic's message and where it was raised. The panic hook prints
/// nothing meanwhile: the message is reported once, as the scenario's failure.
#[cfg(feature = "mock")]
fn checked<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    use std::panic::{AssertUnwindSafe, catch_unwind, set_hook, take_hook};
    use std::sync::{Arc, Mutex, PoisonError};

    // Each panic's message and where it was raised; the one that reaches here is
    // reported (a side of a two-thread scenario may panic and another go on with it).
    let raised: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let seen = Arc::clone(&raised);
    let previous = take_hook();
    set_hook(Box::new(move |info| {
        let message = info.payload_as_str().unwrap_or("").to_owned();
        let at = info.location().map(ToString::to_string).unwrap_or_default();
        let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.push((message, at));
    }));
    let result = catch_unwind(AssertUnwindSafe(f));
    set_hook(previous);
    result.map_err(|payload| {
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("a check panicked");
        let raised = raised.lock().unwrap_or_else(PoisonError::into_inner);
        match raised.iter().rev().find(|(m, _)| m == message) {
            Some((_, at)) if !at.is_empty() => format!("{message} (at {at})"),
            _ => message.to_owned(),
        }
    })
}

#[cfg(not(feature = "mock"))]
fn list_scenarios() -> ExitCode {
    eprintln!("capture trace: this build has no mock backend, which the scenarios run on");
    ExitCode::from(USAGE_EXIT)
}

#[cfg(not(feature = "mock"))]
fn run_scenario(_: TraceArgs) -> ExitCode {
    list_scenarios()
}

#[cfg(test)]
mod tests;
