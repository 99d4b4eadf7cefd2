//! The scenario suite every backend runs: each scenario drives a [`Device`](capture_core::Device) over a
//! backend wrapped in [`Faulty`](capture_mock::Faulty), asserts the result bytes against a host model, and
//! returns the core's trace, which [`check`] snapshots into files shared by every
//! backend (`crates/capture-suite/snapshots/<scenario>.snap`).
//!
//! A backend runs the whole suite in one line: `capture_suite::suite!(MyBackend::new());`
//! in one of its test files.
//!
//! Every scenario holds [`suite_lock`] while it runs, so the driver-call counts and
//! traces one scenario sees are its own.

mod basic;
mod faults;
mod harness;
mod lifecycle;
mod memory;

use std::sync::{Mutex, MutexGuard};

use capture_core::{Builtins, Chain, ServerError};

pub use harness::{Harness, N, S0, S1, S2, assert_contains, bytes, floats, map, ramp, splat};

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

macro_rules! scenarios {
    ($($variant:ident => $name:literal,)*) => {
        /// A scenario of the suite. Variants are named as their tests and snapshots are.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Scenario {
            $(
                #[doc = concat!("`", $name, "`")]
                $variant,
            )*
        }

        impl Scenario {
            /// Every scenario, in suite order.
            pub const ALL: &'static [Scenario] = &[$(Scenario::$variant,)*];

            /// The scenario's name: its test's and its snapshot's.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Scenario::$variant => $name,)*
                }
            }
        }

        /// Runs the whole suite on a backend: one `#[test]` per scenario, each asserting
        /// result bytes and the shared trace snapshot. `$make` builds a fresh backend.
        #[macro_export]
        macro_rules! suite {
            ($make:expr) => {
                $(
                    #[test]
                    fn $variant() {
                        $crate::scenarios::check($crate::scenarios::Scenario::$variant, || $make);
                    }
                )*
            };
            (fallible: $make:expr, after: $after:expr) => {
                $(
                    #[test]
                    fn $variant() {
                        $crate::scenarios::check_fallible(
                            $crate::scenarios::Scenario::$variant,
                            || $make,
                            $after,
                        );
                    }
                )*
            };
        }
    };
}

scenarios! {
    capture_replay => "capture_replay",
    growing_pool_refused => "growing_pool_refused",
    input_rewrite => "input_rewrite",
    intermediate_recycling => "intermediate_recycling",
    input_dropped_after_capture => "input_dropped_after_capture",
    many_launches_metadata => "many_launches_metadata",
    read_refused_while_recording => "read_refused_while_recording",
    host_write_in_window => "host_write_in_window",
    drop_after_enqueued_replay => "drop_after_enqueued_replay",
    isolation_from_other_stream => "isolation_from_other_stream",
    foreign_end_abandons => "foreign_end_abandons",
    neighbour_refused => "neighbour_refused",
    begin_refused_then_retry => "begin_refused_then_retry",
    instantiate_refused_taints => "instantiate_refused_taints",
    replay_enqueue_failure_then_settle => "replay_enqueue_failure_then_settle",
    tainted_input_skips_chain_of_3 => "tainted_input_skips_chain_of_3",
    panic_in_capture_closure => "panic_in_capture_closure",
    page_release_refused_while_recording => "page_release_refused_while_recording",
    shared_info_entry_two_graphs => "shared_info_entry_two_graphs",
    kernel_first_loaded_in_window => "kernel_first_loaded_in_window",
    async_error_taints_since_last_good_fence => "async_error_taints_since_last_good_fence",
    replay_inside_window_refused => "replay_inside_window_refused",
    abort_from_capture => "abort_from_capture",
    abort_from_prepare => "abort_from_prepare",
    memory_report_and_ledger => "memory_report_and_ledger",
    out_of_order_lifecycle_refused => "out_of_order_lifecycle_refused",
    end_in_prepare_disarms => "end_in_prepare_disarms",
    replay_k_times_in_one_submission => "replay_k_times_in_one_submission",
    cross_stream_input_ordered => "cross_stream_input_ordered",
    launch_failure_in_window_dooms => "launch_failure_in_window_dooms",
    upload_failure_only_logged => "upload_failure_only_logged",
    capture_ended_from_another_thread => "capture_ended_from_another_thread",
    submit_failure_taints_then_recovers => "submit_failure_taints_then_recovers",
}

static SUITE: Mutex<()> = Mutex::new(());

/// Serialises scenarios (and anything else that captures) within a process, so what a
/// scenario counts and traces is its own.
pub fn suite_lock() -> MutexGuard<'static, ()> {
    SUITE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `scenario` on `backend` and returns the core's trace. Panics (naming the
/// scenario) when a result byte or an expected refusal is wrong.
///
/// # Errors
///
/// An unexpected error from the device, for the test to report.
pub fn run<B: Builtins>(scenario: Scenario, backend: B) -> Result<String, ServerError> {
    let h = Harness::new(backend)?;
    match scenario {
        Scenario::capture_replay => basic::capture_replay(&h)?,
        Scenario::input_rewrite => basic::input_rewrite(&h)?,
        Scenario::many_launches_metadata => basic::many_launches_metadata(&h)?,
        Scenario::isolation_from_other_stream => basic::isolation_from_other_stream(&h)?,
        Scenario::shared_info_entry_two_graphs => basic::shared_info_entry_two_graphs(&h)?,
        Scenario::replay_k_times_in_one_submission => basic::replay_k_times_in_one_submission(&h)?,
        Scenario::cross_stream_input_ordered => basic::cross_stream_input_ordered(&h)?,
        Scenario::growing_pool_refused => memory::growing_pool_refused(&h)?,
        Scenario::intermediate_recycling => memory::intermediate_recycling(&h)?,
        Scenario::input_dropped_after_capture => memory::input_dropped_after_capture(&h)?,
        Scenario::host_write_in_window => memory::host_write_in_window(&h)?,
        Scenario::drop_after_enqueued_replay => memory::drop_after_enqueued_replay(&h)?,
        Scenario::page_release_refused_while_recording => {
            memory::page_release_refused_while_recording(&h)?
        }
        Scenario::memory_report_and_ledger => memory::memory_report_and_ledger(&h)?,
        Scenario::read_refused_while_recording => lifecycle::read_refused_while_recording(&h)?,
        Scenario::foreign_end_abandons => lifecycle::foreign_end_abandons(&h)?,
        Scenario::neighbour_refused => lifecycle::neighbour_refused(&h)?,
        Scenario::panic_in_capture_closure => lifecycle::panic_in_capture_closure(&h)?,
        Scenario::kernel_first_loaded_in_window => lifecycle::kernel_first_loaded_in_window(&h)?,
        Scenario::replay_inside_window_refused => lifecycle::replay_inside_window_refused(&h)?,
        Scenario::abort_from_capture => lifecycle::abort_from_capture(&h)?,
        Scenario::abort_from_prepare => lifecycle::abort_from_prepare(&h)?,
        Scenario::out_of_order_lifecycle_refused => lifecycle::out_of_order_lifecycle_refused(&h)?,
        Scenario::end_in_prepare_disarms => lifecycle::end_in_prepare_disarms(&h)?,
        Scenario::capture_ended_from_another_thread => {
            lifecycle::capture_ended_from_another_thread(&h)?
        }
        Scenario::begin_refused_then_retry => faults::begin_refused_then_retry(&h)?,
        Scenario::instantiate_refused_taints => faults::instantiate_refused_taints(&h)?,
        Scenario::replay_enqueue_failure_then_settle => {
            faults::replay_enqueue_failure_then_settle(&h)?
        }
        Scenario::tainted_input_skips_chain_of_3 => faults::tainted_input_skips_chain_of_3(&h)?,
        Scenario::async_error_taints_since_last_good_fence => {
            faults::async_error_taints_since_last_good_fence(&h)?
        }
        Scenario::launch_failure_in_window_dooms => faults::launch_failure_in_window_dooms(&h)?,
        Scenario::upload_failure_only_logged => faults::upload_failure_only_logged(&h)?,
        Scenario::submit_failure_taints_then_recovers => {
            faults::submit_failure_taints_then_recovers(&h)?
        }
    }
    Ok(h.dev.trace().render())
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

fn snapshot(scenario: Scenario, trace: &str) {
    insta::with_settings!({
        snapshot_path => snapshot_dir(),
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!(scenario.name(), trace);
    });
}
