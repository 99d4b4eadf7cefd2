//! The scenario suite every backend runs: each scenario of
//! [`capture_scenarios`] runs on the backend, asserting its result bytes, and returns the
//! core's trace, which [`check`] snapshots into files shared by every backend
//! (`crates/capture-suite/snapshots/<scenario>.snap`).
//!
//! A backend runs the whole suite in one line: `capture_suite::suite!(MyBackend::new());`
//! in one of its test files.
//!
//! Every scenario holds [`suite_lock`] while it runs, so the driver-call counts and
//! traces one scenario sees are its own.

use std::sync::{Mutex, MutexGuard};

use capture_core::{Builtins, Chain};

pub use capture_scenarios::{
    Harness, N, S0, S1, S2, Scenario, assert_contains, assert_refused, bytes, floats, map, ramp,
    run, scenario_tests, splat,
};

/// Where every backend's scenario snapshots live.
pub const SNAPSHOTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/snapshots");

/// The directory snapshots are checked against: `$CAPTURE_SNAPSHOTS` when set (a test
/// binary run away from its source tree, as in the GPU bundle), else [`SNAPSHOTS`].
pub fn snapshot_dir() -> String {
    std::env::var("CAPTURE_SNAPSHOTS")
        .ok()
        .filter(|dir| !dir.is_empty())
        .unwrap_or_else(|| SNAPSHOTS.to_string())
}

/// Runs the whole suite on a backend: one `#[test]` per scenario of
/// [`Scenario::ALL`], each asserting result bytes and the shared trace snapshot
/// ([`check`]). `$make` builds a fresh backend. With `fallible:`, `$make` gives a
/// `Result` whose `Err` says why the backend is missing, and `after` inspects it once
/// each scenario is done ([`check_fallible`]).
#[macro_export]
macro_rules! suite {
    ($make:expr) => {
        $crate::scenarios::scenario_tests!(|scenario: $crate::scenarios::Scenario| {
            $crate::scenarios::check(scenario, || $make)
        });
    };
    (fallible: $make:expr, after: $after:expr) => {
        $crate::scenarios::scenario_tests!(|scenario: $crate::scenarios::Scenario| {
            $crate::scenarios::check_fallible(scenario, || $make, $after)
        });
    };
}

static SUITE: Mutex<()> = Mutex::new(());

/// Serialises scenarios (and anything else that captures) within a process, so what a
/// scenario counts and traces is its own.
pub fn suite_lock() -> MutexGuard<'static, ()> {
    SUITE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `scenario` on a backend `make` builds, under the suite lock, and snapshots its
/// trace as `<scenario>.snap` in [`SNAPSHOTS`]. Panics on any failure.
pub fn check<B: Builtins>(scenario: Scenario, make: impl FnOnce() -> B) {
    let _suite = suite_lock();
    let trace = match run(scenario, make()) {
        Ok(trace) => trace,
        Err(e) => panic!("scenario {} failed: {}", scenario.name(), Chain(&e)),
    };
    snapshot(scenario, &trace);
}

/// As [`check`], for a backend that may be missing: when `make` says why it cannot be
/// built, the scenario prints `SKIP:` and the reason and passes (`make` itself panics
/// where the backend is required). After the scenario, once its device is gone, `after`
/// inspects a clone of the backend (a validation layer's messages, say).
pub fn check_fallible<B: Builtins + Clone>(
    scenario: Scenario,
    make: impl FnOnce() -> Result<B, String>,
    after: impl FnOnce(&B),
) {
    let _suite = suite_lock();
    let backend = match make() {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: {}: {why}", scenario.name());
            return;
        }
    };
    let handle = backend.clone();
    let trace = match run(scenario, backend) {
        Ok(trace) => trace,
        Err(e) => panic!("scenario {} failed: {}", scenario.name(), Chain(&e)),
    };
    after(&handle);
    snapshot(scenario, &trace);
}

/// Checks `trace` against the shared snapshot `<scenario>.snap` in [`snapshot_dir`].
fn snapshot(scenario: Scenario, trace: &str) {
    insta::with_settings!({
        snapshot_path => snapshot_dir(),
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!(scenario.name(), trace);
    });
}
