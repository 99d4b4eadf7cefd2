//! `--log` and `RUST_LOG` as a user runs them: the core's spans and events on stderr at
//! the level asked for, the tables on stdout untouched, nothing logged when neither is
//! given, and a directive that is not one refused.

mod program;

use program::{capture_logged as capture, text};

#[cfg(feature = "mock")]
const DEMO: &[&str] = &["demo", "--kernels", "2", "--replays", "1"];

#[cfg(feature = "mock")]
fn demo_with(extra: &[&str], rust_log: Option<&str>) -> (String, String) {
    let args: Vec<&str> = DEMO.iter().chain(extra).copied().collect();
    let out = capture(&args, rust_log);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{args:?}\n{stdout}\n{stderr}");
    assert!(stdout.contains("results match"), "{stdout}");
    (stdout, stderr)
}

#[cfg(feature = "mock")]
#[test]
fn log_debug_shows_the_replay_span_naming_its_graph_on_stderr_only() {
    let (stdout, stderr) = demo_with(&["--log", "debug"], None);
    let replay = stderr
        .lines()
        .find(|l| l.contains("DEBUG replay{"))
        .unwrap_or_else(|| panic!("no replay span:\n{stderr}"));
    assert!(replay.contains("graph=graph#0"), "{replay}");
    assert!(
        replay.contains("event=stream#0 replay graph#0 x1"),
        "{replay}"
    );
    for span in [
        "capture{", "prepare{", "window{", "begin{", "seal{", "sync{", "read{",
    ] {
        assert!(stderr.contains(span), "no {span} span:\n{stderr}");
    }
    assert!(!stdout.contains("DEBUG"), "{stdout}");
}

#[cfg(feature = "mock")]
#[test]
fn without_log_or_rust_log_nothing_is_logged() {
    let (_, stderr) = demo_with(&[], None);
    assert!(stderr.is_empty(), "{stderr}");
    let (_, stderr) = demo_with(&[], Some(""));
    assert!(stderr.is_empty(), "{stderr}");
}

#[cfg(feature = "mock")]
#[test]
fn rust_log_is_honoured_when_log_is_absent_and_log_wins_over_it() {
    let (_, stderr) = demo_with(&[], Some("capture=debug"));
    assert!(stderr.contains("replay graph#0"), "{stderr}");
    let (_, stderr) = demo_with(&["--log", "off"], Some("debug"));
    assert!(stderr.is_empty(), "{stderr}");
}

#[cfg(feature = "mock")]
#[test]
fn log_info_shows_refusals_and_taints_but_not_the_routine() {
    let out = capture(
        &["trace", "fault_dooms_taints_recovers", "--log", "info"],
        None,
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for kind in [
        "kind=\"refuse\"",
        "kind=\"taint\"",
        "kind=\"doom\"",
        "kind=\"fault\"",
    ] {
        assert!(
            stderr
                .lines()
                .any(|l| l.contains(" INFO ") && l.contains(kind)),
            "no {kind} at info:\n{stderr}"
        );
    }
    assert!(!stderr.contains("DEBUG"), "{stderr}");
    assert!(!stderr.contains("replay graph#0 x1"), "{stderr}");
    // The trace lines on stdout are the same as without a log.
    let quiet = capture(&["trace", "fault_dooms_taints_recovers"], None);
    assert_eq!(text(&out.stdout), text(&quiet.stdout));
}

#[test]
fn a_directive_that_is_not_one_is_a_usage_error() {
    let mut commands = vec![&["demo"][..]];
    if cfg!(feature = "mock") {
        commands.push(&["trace", "fault_dooms_taints_recovers"]);
    }
    for command in commands {
        let args: Vec<&str> = command
            .iter()
            .chain(&["--log", "capture=loud"])
            .copied()
            .collect();
        let out = capture(&args, None);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("invalid value \"capture=loud\" for --log"),
            "{args:?}: {stderr}"
        );
    }
    let out = capture(&["demo", "--log", " "], None);
    assert_eq!(out.status.code(), Some(2));
}

#[cfg(feature = "mock")]
#[test]
fn a_bad_rust_log_is_reported_and_ignored() {
    let (_, stderr) = demo_with(&[], Some("capture=loud"));
    assert!(
        stderr.starts_with("capture: RUST_LOG=\"capture=loud\" ignored: "),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}
