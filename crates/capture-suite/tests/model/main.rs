//! The model-based tests: random programs checked op by op against the reference model
//! in `capture_suite::model`, on the mock as the CUDA backend drives CUDA
//! (`MockBackend`: relaxed-mode capture, calls from any thread), on the mock with
//! thread-affine streams (`AffineMock`: the core's worker path; declared unable to put a
//! copy or the user's work in a loop body, as Vulkan's loop emulation is, so rule 30's
//! record-time refusals are predicted there), and the threaded variant.
//!
//! Cases: `CAPTURE_PROPTEST_CASES` (default 2000 per single-threaded test; the threaded
//! test runs a fortieth of it, at least 10). A failure shrinks to a minimal program,
//! which the panic prints; its seed is kept in `tests/model/regressions/` and replayed
//! first on every later run. Each passing test prints one line,
//! `model: <N> cases on <backend>, 0 violations`, for the CI summary.

use std::collections::BTreeMap;
use std::time::Instant;

use capture_core::{Builtins, DeviceLoops};
use capture_mock::{AffineMock, MockBackend};
use capture_suite::model;
use capture_suite::scenarios::suite_lock;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;

fn cases(default: u32) -> u32 {
    model::cases_from_env(default, 1, 0)
}

fn run<S: Strategy>(
    backend: &str,
    cases: u32,
    regressions: &'static str,
    strategy: S,
    check: impl Fn(&S::Value) -> Result<(), model::Violation>,
) where
    S::Value: std::fmt::Display,
{
    model::drive(backend, cases, regressions, &strategy, |program| {
        check(program).map_err(|v| v.to_string())
    });
}

fn single<B: Builtins + Clone>(
    backend: &str,
    make: fn() -> B,
    extras: fn() -> model::Extras<B>,
    regressions: &'static str,
) {
    let extras = extras();
    run(
        backend,
        cases(2000),
        regressions,
        model::program(),
        |program| model::check_with(make, program, &extras),
    );
}

#[test]
fn mock() {
    single(
        "MockBackend",
        MockBackend::new,
        model::mock_extras,
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/model/regressions/mock.txt"
        ),
    );
}

/// The thread-affine mock, its loop bodies holding no copy and no work (rule 30).
fn affine_without_loop_copies() -> AffineMock {
    AffineMock::with_loops(DeviceLoops::Supported {
        copies: Some("no copy is predicated (as on Vulkan)"),
        work: Some("the user's commands are not predicated (as on Vulkan)"),
    })
}

#[test]
fn affine_mock() {
    single(
        "AffineMock",
        affine_without_loop_copies,
        model::mock_extras,
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/model/regressions/affine_mock.txt"
        ),
    );
}

#[test]
fn threads() {
    run(
        "MockBackend (threads)",
        (cases(2000) / 40).max(10),
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/model/regressions/threads.txt"
        ),
        model::threads_program(),
        |program| model::check_threads(MockBackend::new, program),
    );
}

/// A violation's kind: its op's name and its text up to the first detail, digits
/// folded.
fn category(v: &model::Violation) -> String {
    let op: String = v.op.chars().take_while(|c| c.is_alphanumeric()).collect();
    let what = v.what.split(": got").next().unwrap_or(&v.what);
    // Wrong bytes say where they came from: the mock's fresh pages (`a5`), a slice
    // poisoned when it went back to its pool (`de`), or other writes.
    let source = match v.what.split(": got [").nth(1).map(|g| &g[..2]) {
        Some("a5") => " (fresh memory)",
        Some("de") => " (poisoned: freed memory)",
        Some(_) => " (other values)",
        None => "",
    };
    let mut folded = String::new();
    for c in what.chars().take(90) {
        if c.is_ascii_digit() {
            if !folded.ends_with('#') {
                folded.push('#');
            }
        } else {
            folded.push(c);
        }
    }
    format!("{op}: {folded}{source}")
}

/// The survey's programs: the deterministic runner's first `n`, the same in every
/// process.
fn survey_programs(n: u32) -> impl Iterator<Item = model::Program> {
    let mut runner = TestRunner::deterministic();
    let strategy = model::program();
    (0..n).map(move |_| strategy.new_tree(&mut runner).expect("a program").current())
}

fn survey_check(program: &model::Program) -> Result<(), model::Violation> {
    let _suite = suite_lock();
    model::check_with(MockBackend::new, program, &model::mock_extras())
}

/// Runs this test binary's survey as a child doing `mode` (`from=<i>`, or
/// `run=<i> <cut>`); its survey lines.
fn survey_child(mode: &str) -> Vec<String> {
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new(exe)
        .args([
            "survey",
            "--ignored",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("CAPTURE_SURVEY_CHILD", mode)
        .output()
        .expect("the survey child runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.find("SURVEY\t").map(|at| l[at + 7..].to_string()))
        .collect()
}

const ABORT: &str = "process abort: a panic while a panic unwound";

/// The kind of violation program `i` with `cut` has, run in a child: `None` when it
/// passes, [`ABORT`] when it aborts the process.
fn survey_kind(i: usize, cut: &model::Cut) -> Option<String> {
    let lines = survey_child(&format!("run={i} {cut}"));
    match lines.iter().find_map(|l| l.strip_prefix("result\t")) {
        Some("ok") => None,
        Some(kind) => Some(kind.to_string()),
        None => Some(ABORT.to_string()),
    }
}

/// What a survey child does: check the programs from `from` on, one line each, or run
/// one program with a cut.
fn survey_child_main(mode: &str, n: u32) {
    // Violations include panics; their reports would bury the survey's lines.
    std::panic::set_hook(Box::new(|_| {}));
    if let Some(from) = mode.strip_prefix("from=") {
        let from: u32 = from.parse().expect("a case number");
        for (i, program) in survey_programs(n).enumerate().skip(from as usize) {
            println!("SURVEY\tstart\t{i}");
            match survey_check(&program) {
                Ok(()) => println!("SURVEY\tok\t{i}"),
                Err(v) => println!("SURVEY\tviolation\t{i}\t{}", category(&v)),
            }
        }
    } else if let Some(i) = mode.strip_prefix("minimize=") {
        let i: usize = i.parse().expect("a case number");
        let program = survey_programs(n).nth(i).expect("the program");
        let kind = survey_check(&program).err().map(|v| category(&v));
        // Two minutes at most: after that every candidate counts as passing.
        let start = Instant::now();
        let cut = model::minimize_cut(&program, |cut| {
            if start.elapsed().as_secs() > 120 {
                return false;
            }
            let v = survey_check(&cut.apply(&program));
            v.err().map(|v| category(&v)) == kind
        });
        println!("SURVEY\tcut\t{cut}");
    } else if let Some(run) = mode.strip_prefix("run=") {
        let (i, cut) = run.split_once(' ').unwrap_or((run, ""));
        let i: usize = i.parse().expect("a case number");
        let cut = model::Cut::parse(cut).expect("a cut");
        let program = cut.apply(&survey_programs(n).nth(i).expect("the program"));
        match survey_check(&program) {
            Ok(()) => println!("SURVEY\tresult\tok"),
            Err(v) => {
                let text = format!("{v}");
                println!("SURVEY\tviolation\t{}", text.replace('\n', " "));
                println!("SURVEY\tresult\t{}", category(&v));
            }
        }
    }
}

/// Which kinds of violation the code has, how often, and a minimal program for each:
/// `CAPTURE_PROPTEST_CASES` programs on `MockBackend` (none shrunk by proptest), each
/// kind minimized by `model::minimize_cut`. Every program runs in a child process, so
/// one that aborts the process (a panic while unwinding) is a kind, not the end.
#[test]
#[ignore = "a survey of distinct violations, run by hand with --ignored"]
fn survey() {
    let n = cases(1000);
    if let Ok(mode) = std::env::var("CAPTURE_SURVEY_CHILD") {
        survey_child_main(&mode, n);
        return;
    }
    let mut kinds: BTreeMap<String, (u32, usize)> = BTreeMap::new();
    let mut failing = 0;
    let mut from = 0;
    while from < n as usize {
        let lines = survey_child(&format!("from={from}"));
        let mut started = None;
        for line in &lines {
            let fields: Vec<&str> = line.split('\t').collect();
            let i: usize = fields[1].parse().expect("a case number");
            match fields[0] {
                "start" => started = Some(i),
                "violation" => {
                    failing += 1;
                    kinds.entry(fields[2].to_string()).or_insert((0, i)).0 += 1;
                    started = None;
                }
                _ => started = None,
            }
            from = i + 1;
        }
        if let Some(i) = started {
            failing += 1;
            kinds.entry(ABORT.to_string()).or_insert((0, i)).0 += 1;
        }
        if lines.is_empty() {
            break;
        }
    }
    println!(
        "survey: {failing} of {n} programs violate, {} kinds",
        kinds.len()
    );
    for (kind, (count, i)) in &kinds {
        println!("  {count}x {kind} (first: case {i})");
    }
    for (kind, (count, i)) in kinds {
        let program = survey_programs(n).nth(i).expect("the program");
        // In one child first; a child per candidate where that one aborts.
        let lines = match kind.as_str() {
            ABORT => Vec::new(),
            _ => survey_child(&format!("minimize={i}")),
        };
        let cut = match lines.iter().find_map(|l| l.strip_prefix("cut\t")) {
            Some(cut) => model::Cut::parse(cut).expect("a cut"),
            None => {
                // A child per candidate is slow: 200 candidates at most.
                let mut tried = 0;
                model::minimize_cut(&program, |cut| {
                    tried += 1;
                    tried <= 200 && survey_kind(i, cut).is_some_and(|k| k == kind)
                })
            }
        };
        let minimal = cut.apply(&program);
        let lines = survey_child(&format!("run={i} {cut}"));
        let what = lines
            .iter()
            .find_map(|l| l.strip_prefix("violation\t"))
            .unwrap_or("the process aborted");
        println!("\n== {count}x {kind} (first: case {i})\n{what}\n{minimal}");
    }
}
