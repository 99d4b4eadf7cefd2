//! `capture trace`'s option parsing: one scenario, a backend, a timeline and a log, the
//! list, help, and every refusal named.

use super::*;

fn trace(args: &[&str]) -> Result<Trace, UsageError> {
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    parse_trace(&args)
}

#[test]
fn trace_takes_one_scenario_a_backend_a_timeline_and_a_log() {
    assert_eq!(
        trace(&[
            "fault_dooms_taints_recovers",
            "--backend",
            "affine-mock",
            "--timeline",
            "t.json",
            "--log=debug"
        ]),
        Ok(Trace::Run(TraceArgs {
            scenario: "fault_dooms_taints_recovers".into(),
            backend: TraceBackend::AffineMock,
            log: Some("debug".into()),
            timeline: Some(PathBuf::from("t.json")),
        }))
    );
    assert_eq!(
        trace(&["--backend=mock", "two_streams_capture_at_once"]),
        Ok(Trace::Run(TraceArgs {
            scenario: "two_streams_capture_at_once".into(),
            backend: TraceBackend::Mock,
            log: None,
            timeline: None,
        }))
    );
    assert_eq!(trace(&["--list"]), Ok(Trace::List));
    assert_eq!(
        trace(&["fault_dooms_taints_recovers", "-h"]),
        Ok(Trace::Help)
    );
    for (args, named) in [
        (&[][..], "name a scenario"),
        (&["a", "b"], "one scenario at a time"),
        (
            &["fault_dooms_taints_recovers", "--backend", "vulkan"],
            "\"vulkan\"",
        ),
        (
            &["fault_dooms_taints_recovers", "--kernels", "3"],
            "\"--kernels\"",
        ),
    ] {
        let error = trace(args).expect_err("refused");
        assert!(error.0.contains(named), "{args:?}: {error}");
    }
}

#[cfg(feature = "mock")]
#[test]
fn a_scenario_s_failed_check_is_its_message_and_where_it_was_raised() {
    assert_eq!(checked(|| 7), Ok(7));
    let why = checked(|| -> () { panic!("bytes of buf#3: {}", 4) }).expect_err("a failure");
    assert!(why.starts_with("bytes of buf#3: 4 (at "), "{why}");
    assert!(why.contains("trace/tests.rs:"), "{why}");
    // A two-thread scenario's worker fails; the main thread's hand-over stops because
    // of it: the worker's message is the one reported.
    let why = checked(|| {
        capture_scenarios::two_threads(
            |turn| {
                turn.hand_over();
                Ok(())
            },
            |_| panic!("the worker's check"),
        )
    })
    .expect_err("a failure");
    assert!(why.starts_with("the worker's check (at "), "{why}");
}
