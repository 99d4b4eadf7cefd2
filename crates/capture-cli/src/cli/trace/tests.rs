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
            "fault",
            "--backend",
            "affine-mock",
            "--timeline",
            "t.json",
            "--log=debug"
        ]),
        Ok(Trace::Run(TraceArgs {
            scenario: "fault".into(),
            backend: TraceBackend::AffineMock,
            log: Some("debug".into()),
            timeline: Some(PathBuf::from("t.json")),
        }))
    );
    assert_eq!(
        trace(&["--backend=mock", "two-streams"]),
        Ok(Trace::Run(TraceArgs {
            scenario: "two-streams".into(),
            backend: TraceBackend::Mock,
            log: None,
            timeline: None,
        }))
    );
    assert_eq!(trace(&["--list"]), Ok(Trace::List));
    assert_eq!(trace(&["fault", "-h"]), Ok(Trace::Help));
    for (args, named) in [
        (&[][..], "name a scenario"),
        (&["a", "b"], "one scenario at a time"),
        (&["fault", "--backend", "vulkan"], "\"vulkan\""),
        (&["fault", "--kernels", "3"], "\"--kernels\""),
    ] {
        let error = trace(args).expect_err("refused");
        assert!(error.0.contains(named), "{args:?}: {error}");
    }
}
