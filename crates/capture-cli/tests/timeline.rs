//! `--timeline` as a user runs it: `capture demo` and every `capture trace` scenario
//! (each of capture-scenarios' list) write Chrome trace-event JSON whose structure Perfetto and `chrome://tracing` rely
//! on: the fields each phase needs, a name for every track, spans that nest per track,
//! the lifecycle's spans where they belong and the instants a scenario promises; and
//! `capture timeline-svg` draws it.

#![cfg(feature = "mock")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Output;

use serde_json::Value;

mod program;

use program::{capture, text};

/// A file in the test's scratch directory.
fn scratch(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()))
}

/// Runs `capture ARGS --timeline FILE`, checks it succeeded, and returns the JSON.
fn timeline(name: &str, args: &[&str]) -> (Output, Value) {
    let path = scratch(&format!("{name}.json"));
    let path_text = path.to_str().expect("a UTF-8 path");
    let mut all = args.to_vec();
    all.extend(["--timeline", path_text]);
    let out = capture(&all);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{all:?}\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let json = std::fs::read_to_string(&path).expect("the timeline was written");
    let json: Value = serde_json::from_str(&json).expect("the timeline is JSON");
    (out, json)
}

/// A complete event.
#[derive(Clone, Debug)]
struct Span {
    name: String,
    track: (u64, u64),
    start: f64,
    end: f64,
    args: Value,
}

/// What a timeline holds, once its structure is checked.
#[derive(Debug, Default)]
struct Checked {
    processes: BTreeMap<u64, String>,
    tracks: BTreeMap<(u64, u64), String>,
    spans: Vec<Span>,
    /// Instants: their name, category (kind), track and time.
    instants: Vec<(String, String, (u64, u64), f64)>,
}

impl Checked {
    fn named(&self, name: &str) -> Vec<&Span> {
        self.spans.iter().filter(|s| s.name == name).collect()
    }

    fn track(&self, name: &str) -> (u64, u64) {
        let found: Vec<_> = self.tracks.iter().filter(|(_, n)| *n == name).collect();
        assert_eq!(
            found.len(),
            1,
            "one track named {name:?}: {:?}",
            self.tracks
        );
        *found[0].0
    }
}

/// Half a nanosecond, in the format's microseconds: times are whole nanoseconds.
const SLACK: f64 = 0.0005;

/// Checks what every timeline must hold and returns its parts.
fn check(json: &Value) -> Checked {
    assert_eq!(json["displayTimeUnit"], "ms");
    let events = json["traceEvents"].as_array().expect("a traceEvents array");
    let mut checked = Checked::default();
    let mut used = BTreeSet::new();
    for e in events {
        let ph = e["ph"].as_str().unwrap_or_else(|| panic!("no ph: {e}"));
        let name = e["name"].as_str().unwrap_or_else(|| panic!("no name: {e}"));
        let pid = e["pid"].as_u64().unwrap_or_else(|| panic!("no pid: {e}"));
        let tid = e["tid"].as_u64().unwrap_or_else(|| panic!("no tid: {e}"));
        match ph {
            "M" => {
                let arg = |key: &str| e["args"][key].clone();
                match name {
                    "process_name" => {
                        let n = arg("name").as_str().expect("a process name").to_owned();
                        checked.processes.insert(pid, n);
                    }
                    "thread_name" => {
                        let n = arg("name").as_str().expect("a track name").to_owned();
                        checked.tracks.insert((pid, tid), n);
                    }
                    "process_sort_index" | "thread_sort_index" => {
                        assert!(arg("sort_index").is_u64(), "{e}");
                    }
                    other => panic!("unexpected metadata {other}: {e}"),
                }
            }
            "X" => {
                let ts = e["ts"].as_f64().unwrap_or_else(|| panic!("no ts: {e}"));
                let dur = e["dur"].as_f64().unwrap_or_else(|| panic!("no dur: {e}"));
                assert!(dur >= 0.0 && ts >= 0.0, "{e}");
                assert!(e["cat"].is_string() && e["args"].is_object(), "{e}");
                used.insert((pid, tid));
                checked.spans.push(Span {
                    name: name.to_owned(),
                    track: (pid, tid),
                    start: ts,
                    end: ts + dur,
                    args: e["args"].clone(),
                });
            }
            "i" => {
                let ts = e["ts"].as_f64().unwrap_or_else(|| panic!("no ts: {e}"));
                assert!(ts >= 0.0, "{e}");
                assert_eq!(e["s"], "t", "{e}");
                assert!(e["args"].is_object(), "{e}");
                let cat = e["cat"].as_str().expect("a category").to_owned();
                used.insert((pid, tid));
                checked
                    .instants
                    .push((name.to_owned(), cat, (pid, tid), ts));
            }
            other => panic!("unexpected phase {other}: {e}"),
        }
    }
    assert_eq!(
        checked.processes,
        BTreeMap::from([(1, "pooled streams".into()), (2, "threads".into())])
    );
    for track in &used {
        assert!(
            checked.tracks.contains_key(track),
            "track {track:?} has no name"
        );
    }
    for (pid, _) in checked.tracks.keys() {
        assert!(checked.processes.contains_key(pid));
    }
    // Per track, any two spans nest or are disjoint.
    let mut by_track: BTreeMap<(u64, u64), Vec<&Span>> = BTreeMap::new();
    for s in &checked.spans {
        by_track.entry(s.track).or_default().push(s);
    }
    for (track, spans) in &mut by_track {
        spans.sort_by(|a, b| a.start.total_cmp(&b.start).then(b.end.total_cmp(&a.end)));
        let mut open: Vec<&Span> = Vec::new();
        for s in spans.iter() {
            while open.last().is_some_and(|o| o.end <= s.start + SLACK) {
                open.pop();
            }
            if let Some(parent) = open.last() {
                assert!(
                    s.end <= parent.end + SLACK,
                    "on {track:?}, {s:?} overlaps {parent:?} partly"
                );
            }
            open.push(s);
        }
    }
    // Each span is on its pooled stream's track and its thread's.
    let on = |pid: u64| checked.spans.iter().filter(|s| s.track.0 == pid).count();
    assert_eq!(
        on(1),
        on(2),
        "as many spans on the pooled streams as on the threads"
    );
    checked
}

/// Whether `inner` lies within `outer` on the same track.
fn within(inner: &Span, outer: &Span) -> bool {
    inner.track == outer.track
        && outer.start <= inner.start + SLACK
        && inner.end <= outer.end + SLACK
}

/// The lifecycle's spans where they belong: warmup and window inside a capture on both
/// tracks; every replay on the pooled track of the stream that captured its graph.
fn check_lifecycle(checked: &Checked) {
    for name in [
        "capture", "prepare", "warmup", "window", "begin", "seal", "replay", "sync", "read",
    ] {
        assert!(!checked.named(name).is_empty(), "no {name} span");
    }
    let captures = checked.named("capture");
    for name in ["warmup", "window"] {
        for s in checked.named(name) {
            assert!(
                captures.iter().any(|c| within(s, c)),
                "{s:?} lies in no capture"
            );
        }
    }
    // A prepare opens a capture closure's warmup, or (the explicit lifecycle) comes
    // before a begin on its track.
    let begins = checked.named("begin");
    for s in checked.named("prepare") {
        assert!(
            captures.iter().any(|c| within(s, c))
                || begins
                    .iter()
                    .any(|b| b.track == s.track && b.start + SLACK >= s.end),
            "{s:?} lies in no capture and no begin follows it"
        );
    }
    for w in checked.named("window") {
        for name in ["begin", "seal"] {
            let inside = checked.named(name).into_iter().filter(|s| within(s, w));
            assert_eq!(inside.count(), 1, "one {name} in {w:?}");
        }
    }
    let mut captured_on = BTreeMap::new();
    for c in captures.iter().filter(|c| c.track.0 == 1) {
        let graph = c.args["graph"].as_str().expect("a capture names its graph");
        assert_eq!(c.args["pooled"].as_u64(), Some(c.track.1));
        captured_on.insert(graph.to_owned(), c.track);
    }
    let replays = checked.named("replay");
    for r in &replays {
        let graph = r.args["graph"].as_str().expect("a replay names its graph");
        if r.track.0 == 1 {
            match captured_on.get(graph) {
                Some(track) => assert_eq!(&r.track, track, "{r:?}"),
                // A graph of the explicit lifecycle (no capture span names it): on the
                // track of the pooled stream the replay names.
                None => assert_eq!(r.args["pooled"].as_u64(), Some(r.track.1), "{r:?}"),
            }
        }
    }
    assert!(replays.iter().any(|r| r.track.0 == 2));
}

#[test]
fn demo_writes_a_timeline_of_its_lifecycle() {
    let (out, json) = timeline("demo", &["demo", "--kernels", "4", "--replays", "2"]);
    assert!(text(&out.stdout).contains("results match"));
    assert!(text(&out.stderr).is_empty(), "{}", text(&out.stderr));
    let checked = check(&json);
    check_lifecycle(&checked);
    let pooled = checked.track("pooled#0 (stream#0)");
    let main = checked.track("thread 1 (main)");
    // Two timed replays and a check step's, after an untimed one.
    let replays = checked.named("replay");
    assert_eq!(replays.iter().filter(|r| r.track == pooled).count(), 4);
    assert_eq!(replays.iter().filter(|r| r.track == main).count(), 4);
    let kinds: BTreeSet<_> = checked
        .instants
        .iter()
        .map(|(_, k, _, _)| k.as_str())
        .collect();
    assert_eq!(kinds, BTreeSet::from(["drop", "pin"]));
    assert!(
        checked
            .instants
            .iter()
            .any(|(name, _, track, _)| name == "pin graph#0" && *track == pooled)
    );
}

#[test]
fn decode_writes_a_timeline_of_its_capture_and_replays() {
    let tokens = 4;
    let (out, json) = timeline(
        "decode",
        &[
            "decode", "--dim", "64", "--layers", "2", "--vocab", "128", "--tokens", "4",
        ],
    );
    assert!(text(&out.stdout).contains("all checks hold"));
    let checked = check(&json);
    check_lifecycle(&checked);
    let pooled = checked.track("pooled#0 (stream#0)");
    // One call replaying all the tokens, then one replay per token in each of three
    // modes: the step's graph, the slotted graph updated, a graph captured per token.
    let replays = checked.named("replay");
    assert_eq!(
        replays.iter().filter(|r| r.track == pooled).count(),
        3 * tokens + 1
    );
    assert_eq!(
        checked.named("capture").len(),
        4,
        "two captures (the step, the slotted step), each on two tracks"
    );
    // The slotted graph's updates, two a token (position and attention grid), on its
    // pooled stream's track.
    let updates = checked.named("update");
    assert_eq!(
        updates.iter().filter(|u| u.track == pooled).count(),
        2 * tokens
    );
}

#[test]
fn each_trace_scenario_writes_its_timeline_and_prints_its_trace() {
    for (scenario, kinds, tracks) in [
        (
            "two_streams_capture_at_once",
            &["refuse", "pin", "drop"][..],
            &[
                "pooled#0 (stream#0, stream#2)",
                "pooled#1 (stream#1)",
                "thread 1 (main)",
                "thread 2 (worker)",
            ][..],
        ),
        (
            "fault_dooms_taints_recovers",
            &[
                "refuse",
                "doom",
                "not sealed",
                "taint",
                "fault",
                "pin",
                "drop",
            ],
            &["pooled#0 (stream#0)", "thread 1 (main)"],
        ),
        (
            "foreign_end_from_another_thread",
            &["not sealed", "taint", "pin", "drop"],
            &["pooled#0 (stream#0, stream#2)", "thread 2 (worker)"],
        ),
        (
            "drop_under_replay",
            &["pin", "drop"],
            &["pooled#0 (stream#0)"],
        ),
    ] {
        let (out, json) = timeline(scenario, &["trace", scenario]);
        let stdout = text(&out.stdout);
        assert!(
            stdout.starts_with("0 stream#0 alloc buf#0"),
            "{scenario}: {stdout}"
        );
        let checked = check(&json);
        let seen: BTreeSet<_> = checked
            .instants
            .iter()
            .map(|(_, k, _, _)| k.as_str())
            .collect();
        for kind in kinds {
            assert!(
                seen.contains(kind),
                "{scenario}: no {kind} instant in {seen:?}"
            );
        }
        for track in tracks {
            checked.track(track);
        }
    }
}

#[test]
fn the_trace_scenarios_instants_are_named_and_placed_by_their_logical_ids() {
    let (_, json) = timeline("two-streams-ids", &["trace", "two_streams_capture_at_once"]);
    let checked = check(&json);
    let pooled0 = checked.track("pooled#0 (stream#0, stream#2)");
    let worker = checked.track("thread 2 (worker)");
    let refusal: Vec<_> = checked
        .instants
        .iter()
        .filter(|(name, _, _, _)| name == "refuse launch stream#2")
        .map(|(_, _, track, _)| *track)
        .collect();
    assert_eq!(refusal, [pooled0, worker]);
    // The worker captured stream#1 first (graph#0), and replayed it there.
    let pooled1 = checked.track("pooled#1 (stream#1)");
    let replays: Vec<_> = checked
        .named("replay")
        .into_iter()
        .filter(|r| r.args["graph"] == "graph#0")
        .map(|r| r.track)
        .collect();
    assert_eq!(replays, [pooled1, worker]);
    // stream#1's whole capture ran on the worker while stream#0's hand-driven window
    // was open: after stream#0's begin, before its seal.
    let on = |name: &str, track| -> Vec<Span> {
        let spans = checked.named(name).into_iter().filter(|s| s.track == track);
        spans.cloned().collect()
    };
    let (begin0, seal0) = (&on("begin", pooled0)[0], &on("seal", pooled0)[0]);
    let window1 = &on("window", pooled1)[0];
    assert!(begin0.end <= window1.start && window1.end <= seal0.start);
}

#[test]
fn a_taint_is_placed_on_the_pooled_stream_of_the_span_around_it() {
    let (_, json) = timeline("fault-ids", &["trace", "fault_dooms_taints_recovers"]);
    let checked = check(&json);
    let pooled0 = checked.track("pooled#0 (stream#0)");
    // The doomed window's seal taints what it would have written: buf#2.
    let seals = checked.named("seal");
    let in_seal = |track: (u64, u64), at: f64| {
        seals
            .iter()
            .any(|s| s.track == track && s.start <= at && at <= s.end)
    };
    let taints: Vec<_> = checked
        .instants
        .iter()
        .filter(|(name, _, track, at)| name == "taint buf#2" && in_seal(*track, *at))
        .map(|(_, _, track, _)| *track)
        .collect();
    assert!(taints.contains(&pooled0), "{:?}", checked.instants);
}

#[test]
fn on_the_thread_affine_mock_the_stream_workers_show_as_threads() {
    let (_, json) = timeline(
        "affine",
        &["trace", "drop_under_replay", "--backend", "affine-mock"],
    );
    let checked = check(&json);
    check_lifecycle_spans_only(&checked);
    assert!(
        checked
            .tracks
            .values()
            .any(|n| n.ends_with("(capture-stream-0)")),
        "{:?}",
        checked.tracks
    );
}

/// The lifecycle's spans a scenario without reads on every path still has.
fn check_lifecycle_spans_only(checked: &Checked) {
    for name in ["capture", "prepare", "warmup", "window", "seal", "replay"] {
        assert!(!checked.named(name).is_empty(), "no {name} span");
    }
}

#[test]
fn timeline_svg_draws_a_real_timeline() {
    let (_, _) = timeline("svg-input", &["trace", "two_streams_capture_at_once"]);
    let input = scratch("svg-input.json");
    let output = scratch("svg-output.svg");
    let out = capture(&[
        "timeline-svg",
        input.to_str().expect("UTF-8"),
        output.to_str().expect("UTF-8"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let svg = std::fs::read_to_string(&output).expect("the picture was written");
    for expected in [
        "<svg xmlns=\"http://www.w3.org/2000/svg\"",
        ">pooled streams<",
        ">pooled#0 (stream#0, stream#2)<",
        ">thread 2 (worker)<",
        "<title>refuse launch stream#2: at ",
    ] {
        assert!(svg.contains(expected), "{expected} missing");
    }
    let bad = capture(&["timeline-svg", output.to_str().expect("UTF-8"), "/dev/null"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        text(&bad.stderr).contains("is not JSON"),
        "{}",
        text(&bad.stderr)
    );
}

#[test]
fn every_listed_scenario_runs_and_writes_its_timeline() {
    for scenario in capture_scenarios::Scenario::ALL {
        let name = scenario.name();
        let (out, json) = timeline(name, &["trace", name]);
        let stdout = text(&out.stdout);
        assert!(stdout.starts_with("0 stream#"), "{name}: {stdout}");
        assert!(
            text(&out.stderr).is_empty(),
            "{name}: {}",
            text(&out.stderr)
        );
        check(&json);
    }
}

#[test]
fn trace_lists_its_scenarios_and_refuses_unknown_ones() {
    let out = capture(&["trace", "--list"]);
    assert_eq!(out.status.code(), Some(0));
    let listed = text(&out.stdout);
    let names: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let all: Vec<&str> = capture_scenarios::Scenario::ALL
        .iter()
        .map(|s| s.name())
        .collect();
    assert_eq!(names, all);
    for scenario in capture_scenarios::Scenario::ALL {
        assert!(listed.contains(scenario.about()), "{}", scenario.name());
    }
    // The names the program's own scenarios had before they joined the suite.
    let out = capture(&["trace", "two-streams"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("unknown scenario \"two-streams\" (`capture trace --list` names them)"),
        "{stderr}"
    );
    let out = capture(&["trace"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("capture trace --list"));
}
