//! Every scenario on both mock modes: it passes its own checks, shows what its line in
//! `--list` promises, and traces the same on every run.

use capture_graphs::mock::{AffineMock, MockBackend};

use super::*;

fn traced(name: &str, affine: bool) -> String {
    let scenario = find(name).expect("a scenario of that name");
    let ran = if affine {
        scenario.run(AffineMock::new())
    } else {
        scenario.run(MockBackend::new())
    };
    ran.unwrap_or_else(|Failed(why)| panic!("{name} (affine: {affine}): {why}"))
}

#[test]
fn every_scenario_passes_on_both_mocks_and_traces_the_same_on_each_run() {
    for scenario in ALL {
        let first = traced(scenario.name, false);
        assert_eq!(first, traced(scenario.name, false), "{}", scenario.name);
        assert_eq!(first, traced(scenario.name, true), "{}", scenario.name);
    }
}

#[test]
fn each_scenario_shows_what_it_says() {
    for (name, lines) in [
        (
            "two-streams",
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
            "fault",
            &[
                "stream#0 doomed by copy after 1 recorded launches",
                "stream#0 refuse replay: driver call replay failed: injected fault in replay",
                "stream#0 fault: ",
                "taint buf#",
            ],
        ),
        (
            "foreign-end",
            &[
                "stream#2 end -> refused (capture window of stream#0 abandoned: ended by stream#2)",
                "stream#0 end -> refused (capture window of stream#0 abandoned: ended by stream#2)",
                "stream#0 end -> graph#0 (1 launches)",
            ],
        ),
        (
            "drop-under-replay",
            &["stream#0 replay graph#0 x2", "stream#0 drop graph#0"],
        ),
    ] {
        let trace = traced(name, false);
        for line in lines {
            assert!(trace.contains(line), "{name}: {line:?} missing:\n{trace}");
        }
    }
}

#[test]
fn names_are_unique_and_found() {
    for s in ALL {
        assert_eq!(find(s.name), Some(*s));
    }
    let mut names: Vec<_> = ALL.iter().map(|s| s.name).collect();
    names.dedup();
    assert_eq!(names.len(), ALL.len());
    assert_eq!(find("capture_replay"), None);
}
