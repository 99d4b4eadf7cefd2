//! Many cases of a strategy, as every backend's model-based test runs them: proptest's
//! runner with the project's settings (the case count from `CAPTURE_PROPTEST_CASES`, a
//! failure's seed kept in the test's regressions file and replayed first, the suite lock
//! around each case), and the line a passing run prints for the CI summary:
//! `model: <N> cases on <label>, 0 violations`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, FileFailurePersistence, TestCaseError, TestError, TestRunner};

use crate::scenarios::suite_lock;

/// The cases to run: `CAPTURE_PROPTEST_CASES` divided by `divisor` (at least
/// `at_least`), or `default` when it is not set.
pub fn cases_from_env(default: u32, divisor: u32, at_least: u32) -> u32 {
    std::env::var("CAPTURE_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .map_or(default, |n| (n / divisor.max(1)).max(at_least))
}

/// Runs `cases` values of `strategy` through `check` (each under the suite lock), a
/// failure shrunk to a minimal value and its seed kept in `regressions`; prints the
/// summary line on success.
///
/// # Panics
///
/// On a violation, with the minimal value; on an aborted run.
pub fn drive<S>(
    label: &str,
    cases: u32,
    regressions: &'static str,
    strategy: &S,
    check: impl Fn(&S::Value) -> Result<(), String>,
) where
    S: Strategy,
    S::Value: std::fmt::Display,
{
    let ran = AtomicU64::new(0);
    let start = Instant::now();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(regressions))),
        source_file: Some(file!()),
        ..Config::default()
    });
    let result = runner.run(strategy, |value| {
        let _suite = suite_lock();
        ran.fetch_add(1, Ordering::Relaxed);
        check(&value).map_err(TestCaseError::fail)
    });
    let ran = ran.load(Ordering::Relaxed);
    match result {
        Ok(()) => {
            let per_case = start.elapsed().as_secs_f64() * 1000.0 / ran.max(1) as f64;
            println!("model: {ran} cases on {label}, 0 violations ({per_case:.2} ms per case)");
        }
        Err(TestError::Fail(reason, value)) => {
            panic!("model: violation on {label}: {reason}\nminimal program:\n{value}")
        }
        Err(TestError::Abort(reason)) => panic!("model: aborted on {label}: {reason}"),
    }
}
