//! capture-scenarios: the named scenarios of capture, once. Each drives a
//! [`Device`](capture_core::Device) over a backend wrapped in
//! [`Faulty`](capture_mock::Faulty) (the [`Harness`]), checks its result bytes against a
//! host model and the refusals it expects, and returns the core's trace.
//!
//! Two users run them: every backend's test suite (capture-suite's `suite!`, which
//! snapshots each trace into files shared by every backend), and the `capture` program
//! (`capture trace SCENARIO`, on the mock). [`Scenario::ALL`] lists them, each with its
//! [`name`](Scenario::name) and a line on what it shows ([`about`](Scenario::about));
//! [`run`] runs one. [`scenario_tests!`] makes one `#[test]` per scenario.
//!
//! A scenario panics, naming what was wrong, when a result byte or an expected refusal
//! is not as it should be; an unexpected error from the device is its `Err`. Scenarios
//! on two threads hand the turn over in a fixed order ([`two_threads`]), so every
//! scenario traces the same on every run and every backend.
//!
//! Logical streams [`S0`] and [`S2`] share pooled stream 0; [`S1`] is on pooled stream 1.
//!
//! This crate has no features and no unsafe code.

#![forbid(unsafe_code)]

mod basic;
mod branches;
mod faults;
mod harness;
mod lifecycle;
mod memory;
mod turn;

use capture_core::{Builtins, ServerError};

pub use harness::{
    Harness, N, S0, S1, S2, assert_contains, assert_refused, bytes, floats, map, ramp, splat,
};
pub use turn::{Turn, two_threads};

macro_rules! scenarios {
    ($($module:ident :: $variant:ident => $about:literal,)*) => {
        /// A named scenario. Variants are named as their tests and snapshots are.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Scenario {
            $(
                #[doc = concat!("`", stringify!($variant), "`: ", $about, ".")]
                $variant,
            )*
        }

        impl Scenario {
            /// Every scenario, in the order `capture trace --list` shows them.
            pub const ALL: &'static [Scenario] = &[$(Scenario::$variant,)*];

            /// The scenario's name: its test's, its snapshot's, and its name on
            /// `capture trace`'s command line.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Scenario::$variant => stringify!($variant),)*
                }
            }

            /// One line on what the scenario shows.
            pub const fn about(self) -> &'static str {
                match self {
                    $(Scenario::$variant => $about,)*
                }
            }
        }

        fn body<B: Builtins>(scenario: Scenario, h: &Harness<B>) -> Result<(), ServerError> {
            match scenario {
                $(Scenario::$variant => $module::$variant(h),)*
            }
        }

        /// One `#[test]` per scenario, named as the scenario, each calling `$check` (a
        /// function or closure taking a [`Scenario`]) with it:
        /// `capture_scenarios::scenario_tests!(|s| my_check(s, MyBackend::new));`.
        #[macro_export]
        macro_rules! scenario_tests {
            ($check:expr) => {
                $(
                    #[test]
                    fn $variant() {
                        let check = $check;
                        check($crate::Scenario::$variant);
                    }
                )*
            };
        }
    };
}

scenarios! {
    basic::capture_replay =>
        "a graph of one launch, replayed twice: each replay leaves its result",
    memory::growing_pool_refused =>
        "an allocation that would grow a pool inside the window is refused, naming size, \
         pool and stream; the window is doomed",
    basic::input_rewrite =>
        "inputs rewritten in place between replays: each replay sees the new bytes",
    memory::intermediate_recycling =>
        "an intermediate dropped after capture, then sentinels allocated from its pool: \
         the replay corrupts none",
    memory::input_dropped_after_capture =>
        "a graph input dropped after capture stays the graph's: no sentinel lands on it",
    basic::many_launches_metadata =>
        "150 launches with differing info words: warmup uploads them, the window finds \
         each warm, two replays match a host model",
    lifecycle::read_refused_while_recording =>
        "a host read of the recording stream is refused without dooming the capture",
    memory::host_write_in_window =>
        "host writes recorded in the window keep their staging; every replay copies \
         those bytes again",
    memory::drop_after_enqueued_replay =>
        "a graph dropped right after a replay is enqueued: the replay still runs, and \
         sentinels over released memory are untouched",
    basic::isolation_from_other_stream =>
        "a capture on one pooled stream while another works eagerly on its own memory: \
         neither sees the other's work",
    lifecycle::foreign_end_abandons =>
        "another stream's end abandons the window: no graph, an error naming both \
         streams, and the owner's end is told",
    lifecycle::neighbour_refused =>
        "a neighbour on the window's pooled stream is refused, naming both streams; the \
         window is not doomed",
    faults::begin_refused_then_retry =>
        "the driver refuses begin: the stream unwinds to no capture, and the next try \
         works",
    faults::instantiate_refused_taints =>
        "the driver refuses to instantiate: no graph, and what the window wrote is \
         tainted until a host write",
    faults::replay_enqueue_failure_then_settle =>
        "a replay failing to enqueue taints its outputs until a replay succeeds; a \
         tainted input skips the replay",
    faults::tainted_input_skips_chain_of_3 =>
        "a tainted input skips a chain of three launches; the read names the cause and \
         every skip",
    lifecycle::panic_in_capture_closure =>
        "a panic in the capture closure aborts the window and taints its writes; the \
         stream captures again",
    memory::page_release_refused_while_recording =>
        "a cleanup while a stream records is refused, naming it, and changes nothing; \
         after the window it releases",
    basic::shared_info_entry_two_graphs =>
        "two graphs share one info-cache entry, pinned until both are dropped",
    lifecycle::kernel_first_loaded_in_window =>
        "a kernel first loaded inside the window dooms it, naming the kernel",
    faults::async_error_taints_since_last_good_fence =>
        "an asynchronous error at a fence taints what the stream wrote since its last \
         good fence",
    lifecycle::replay_inside_window_refused =>
        "a replay inside a window is refused; the window still seals",
    lifecycle::abort_from_capture =>
        "abort while recording closes the capture, drops the recording and taints its \
         writes",
    lifecycle::abort_from_prepare =>
        "abort in prepare disarms: warmup's results stay readable",
    memory::memory_report_and_ledger =>
        "the memory report and the graph's ledger after capture, and after the graph \
         drops",
    lifecycle::out_of_order_lifecycle_refused =>
        "lifecycle calls out of order are refused and change nothing",
    lifecycle::end_in_prepare_disarms =>
        "end on a window still in prepare disarms it and seals nothing",
    basic::replay_k_times_in_one_submission =>
        "K replays in one submission run the graph K times",
    basic::cross_stream_input_ordered =>
        "a launch reading another stream's write waits for it, eagerly and in a graph, \
         which pins that stream's buffer",
    faults::launch_failure_in_window_dooms =>
        "a launch failing inside the window dooms it, naming the kernel, the stream and \
         the launches recorded",
    faults::upload_failure_only_logged =>
        "an upload failure is only logged: the graph seals and replays",
    lifecycle::capture_ended_from_another_thread =>
        "a capture begun on one thread ends on another",
    faults::submit_failure_taints_then_recovers =>
        "a refused fence wait taints what the stream wrote since its last good fence, \
         until the next good wait",
    lifecycle::two_streams_capture_at_once =>
        "two threads capture on two pooled streams at once; a neighbour of the first \
         window is refused; both graphs replay",
    faults::fault_dooms_taints_recovers =>
        "a launch failing inside a window dooms it; a replay failing to enqueue taints \
         its outputs until the next replay; a failed submit taints the stream",
    lifecycle::foreign_end_from_another_thread =>
        "another thread ends the window from a neighbour stream: abandoned, its writes \
         tainted; the owner is told and captures again",
    memory::drop_under_replay =>
        "a graph dropped right after its replay was enqueued waits behind the replay's \
         fence; memory allocated afterwards aliases nothing it used",
    branches::forked_experts =>
        "two experts of a step forked onto two streams and joined: one graph whose replays \
         match the eager bytes and a one-stream graph's, bit for bit",
    branches::branch_race_refused =>
        "the window's stream reads what its unjoined branch writes: refused when recorded, \
         naming both; joined first, the same read is ordered",
    branches::unjoined_branch_dooms =>
        "a branch the recording never joins dooms the window, naming it; what it wrote is \
         claimed, and its stream is free after",
}

impl Scenario {
    /// The scenario called `name`.
    pub fn find(name: &str) -> Option<Scenario> {
        Scenario::ALL.iter().copied().find(|s| s.name() == name)
    }
}

/// Runs `scenario` on `backend` (under [`Faulty`](capture_mock::Faulty), with two pooled
/// streams and the trace on) and returns the core's trace, one event per line.
///
/// # Panics
///
/// When a result byte or an expected refusal is wrong, or a stream is left recording;
/// the message says what was wrong.
///
/// # Errors
///
/// An unexpected error from the device.
pub fn run<B: Builtins>(scenario: Scenario, backend: B) -> Result<String, ServerError> {
    let h = Harness::new(backend)?;
    body(scenario, &h)?;
    let recording = h.dev.captures().recording();
    assert!(
        recording.is_empty(),
        "{} left streams recording: {recording:?}",
        scenario.name()
    );
    Ok(h.dev.trace().render())
}

#[cfg(test)]
mod tests;
