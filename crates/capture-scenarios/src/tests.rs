//! Every scenario on both mock modes, traced the same on every run; what the multi-stream
//! scenarios' lines in `--list` promise; the names; and the hand-over's failures.

use std::panic::{AssertUnwindSafe, catch_unwind};

use capture_core::ServerError;
use capture_mock::{AffineMock, MockBackend};

use super::*;

fn traced(scenario: Scenario, affine: bool) -> String {
    let ran = if affine {
        run(scenario, AffineMock::new())
    } else {
        run(scenario, MockBackend::new())
    };
    ran.unwrap_or_else(|e| {
        let name = scenario.name();
        panic!("{name} (affine: {affine}): {}", capture_core::Chain(&e))
    })
}

#[test]
fn every_scenario_passes_on_both_mocks_and_traces_the_same_on_each_run() {
    for &scenario in Scenario::ALL {
        let first = traced(scenario, false);
        assert!(
            first.starts_with("0 stream#"),
            "{}: {first}",
            scenario.name()
        );
        assert_eq!(first, traced(scenario, false), "{}", scenario.name());
        assert_eq!(first, traced(scenario, true), "{}", scenario.name());
    }
}

#[test]
fn the_multi_stream_scenarios_show_what_they_say() {
    for (scenario, lines) in [
        (
            Scenario::two_streams_capture_at_once,
            &[
                "stream#2 refuse launch: stream#0 holds a capture window",
                "stream#1 end -> graph#0 (1 launches)",
                "stream#0 end -> graph#1 (1 launches)",
                "graph#0 pins",
                "stream#1 replay graph#0 x2",
                "stream#0 drop graph#1",
            ][..],
        ),
        (
            Scenario::fault_dooms_taints_recovers,
            &[
                "stream#0 doomed by copy after 1 recorded launches",
                "stream#0 refuse replay: driver call replay failed: injected fault in replay",
                "stream#0 fault: ",
                "taint buf#",
            ],
        ),
        (
            Scenario::foreign_end_from_another_thread,
            &[
                "stream#2 end -> refused (capture window of stream#0 abandoned: ended by stream#2)",
                "stream#0 end -> refused (capture window of stream#0 abandoned: ended by stream#2)",
                "stream#0 end -> graph#0 (1 launches)",
            ],
        ),
        (
            Scenario::drop_under_replay,
            &["stream#0 replay graph#0 x2", "stream#0 drop graph#0"],
        ),
    ] {
        let trace = traced(scenario, false);
        for line in lines {
            let name = scenario.name();
            assert!(trace.contains(line), "{name}: {line:?} missing:\n{trace}");
        }
    }
}

#[test]
fn names_are_snake_case_unique_and_found_and_each_has_one_line_about_it() {
    let mut names: Vec<_> = Scenario::ALL.iter().map(|s| s.name()).collect();
    for &s in Scenario::ALL {
        assert_eq!(Scenario::find(s.name()), Some(s));
        let snake = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
        assert!(s.name().chars().all(snake), "{}", s.name());
        let about = s.about();
        assert!(!about.is_empty() && !about.contains('\n'), "{}", s.name());
        assert!(!about.ends_with('.'), "{}: {about}", s.name());
    }
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), Scenario::ALL.len());
    assert_eq!(Scenario::find("two-streams"), None);
}

/// The message of a caught panic.
fn message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(p) => p
            .downcast::<&str>()
            .map(|s| s.to_string())
            .unwrap_or_default(),
    }
}

#[test]
fn the_hand_over_reports_the_side_that_failed_not_the_side_that_stopped() {
    // The worker panics on its first turn: the main thread's hand-over stops, and the
    // worker's panic is what goes on.
    let caught = catch_unwind(AssertUnwindSafe(|| {
        two_threads(
            |turn| {
                turn.hand_over();
                Ok(())
            },
            |_| panic!("the worker's own panic"),
        )
    }));
    assert_eq!(
        message(caught.expect_err("a panic")),
        "the worker's own panic"
    );
    // The main thread fails before its first hand-over: the worker never runs, and the
    // main thread's error is returned.
    let refused = two_threads(
        |_| Err(ServerError::graph_state("main", "the main thread's error")),
        |_| panic!("the worker never gets the turn"),
    );
    let refused = refused.expect_err("the main thread's error");
    assert!(
        capture_core::Chain(&refused)
            .to_string()
            .contains("the main thread's error")
    );
    // The worker fails on its turn: its error is returned.
    let refused = two_threads(
        |turn| {
            turn.hand_over();
            Ok(())
        },
        |_| Err(ServerError::graph_state("worker", "the worker's error")),
    );
    let text = capture_core::Chain(&refused.expect_err("an error")).to_string();
    assert!(text.contains("the worker's error"), "{text}");
}
