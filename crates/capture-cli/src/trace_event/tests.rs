//! The converter on hand-made recordings: tracks and their names, each span on both of
//! its tracks, instants placed by stream or by the span around them, lanes for spans
//! that overlap partly.

use serde_json::Value;

use super::*;
use crate::timeline::{InstantRecord, SpanRecord};

fn fields(pairs: &[(&'static str, Value)]) -> Fields {
    pairs.iter().cloned().collect()
}

fn span(
    name: &'static str,
    stream: &str,
    pooled: u64,
    thread: usize,
    at: (u64, u64),
) -> SpanRecord {
    SpanRecord {
        name,
        fields: fields(&[("stream", stream.into()), ("pooled", pooled.into())]),
        thread,
        start: at.0,
        end: at.1,
    }
}

/// Two pooled streams; the main thread captures on stream#0 and replays; a worker
/// thread syncs stream#1 and is refused on stream#2 (pooled 0); a taint inside the seal.
fn recording() -> Recording {
    let mut capture = span("capture", "stream#0", 0, 1, (0, 100_000));
    capture.fields.insert("graph", "graph#0".into());
    let mut replay = span("replay", "stream#0", 0, 1, (120_000, 130_000));
    replay.fields.insert("graph", "graph#0".into());
    Recording {
        spans: vec![
            span("prepare", "stream#0", 0, 1, (1_000, 5_000)),
            span("warmup", "stream#0", 0, 1, (5_000, 40_000)),
            span("seal", "stream#0", 0, 1, (80_000, 99_000)),
            span("window", "stream#0", 0, 1, (40_000, 99_500)),
            capture,
            span("sync", "stream#1", 1, 2, (10_000, 20_000)),
            span("sync", "stream#2", 0, 2, (110_000, 115_000)),
            replay,
        ],
        instants: vec![
            InstantRecord {
                kind: "refuse".into(),
                fields: fields(&[("stream", "stream#2".into()), ("op", "launch".into())]),
                thread: 2,
                at: 50_000,
                pooled: None,
            },
            InstantRecord {
                kind: "taint".into(),
                fields: fields(&[("memory", "buf#3".into())]),
                thread: 1,
                at: 90_000,
                pooled: Some(0),
            },
        ],
        threads: vec!["main".into(), "worker".into()],
    }
}

fn events(json: &Value) -> &[Value] {
    json["traceEvents"].as_array().expect("an array")
}

/// `(pid, tid)` → the track's name.
fn names(json: &Value) -> BTreeMap<(u64, u64), String> {
    events(json)
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| {
            let key = (
                e["pid"].as_u64().expect("pid"),
                e["tid"].as_u64().expect("tid"),
            );
            (key, e["args"]["name"].as_str().expect("name").to_owned())
        })
        .collect()
}

fn on(json: &Value, ph: &str, name: &str) -> Vec<(u64, u64)> {
    events(json)
        .iter()
        .filter(|e| e["ph"] == ph && e["name"] == name)
        .map(|e| {
            (
                e["pid"].as_u64().expect("pid"),
                e["tid"].as_u64().expect("tid"),
            )
        })
        .collect()
}

#[test]
fn tracks_are_named_after_their_pooled_stream_and_its_logical_streams_or_their_thread() {
    let json = chrome(&recording());
    assert_eq!(json["displayTimeUnit"], "ms");
    let want: BTreeMap<(u64, u64), String> = [
        ((1, 0), "pooled#0 (stream#0, stream#2)"),
        ((1, 1), "pooled#1 (stream#1)"),
        ((2, 1), "thread 1 (main)"),
        ((2, 2), "thread 2 (worker)"),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.to_owned()))
    .collect();
    assert_eq!(names(&json), want);
    let processes: Vec<_> = events(&json)
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| (e["pid"].as_u64(), e["args"]["name"].as_str()))
        .collect();
    assert_eq!(
        processes,
        [
            (Some(1), Some("pooled streams")),
            (Some(2), Some("threads"))
        ]
    );
}

#[test]
fn every_span_is_a_complete_event_on_its_pooled_stream_and_on_its_thread() {
    let json = chrome(&recording());
    assert_eq!(on(&json, "X", "replay"), [(1, 0), (2, 1)]);
    assert_eq!(on(&json, "X", "sync"), [(1, 1), (2, 2), (1, 0), (2, 2)]);
    let replay = events(&json)
        .iter()
        .find(|e| e["name"] == "replay")
        .expect("a replay");
    assert_eq!(replay["ts"], 120.0);
    assert_eq!(replay["dur"], 10.0);
    assert_eq!(replay["cat"], "capture");
    assert_eq!(replay["args"]["graph"], "graph#0");
    assert_eq!(replay["args"]["pooled"], 0);
    let ts: Vec<f64> = events(&json)
        .iter()
        .filter(|e| e["ph"] != "M")
        .map(|e| e["ts"].as_f64().expect("ts"))
        .collect();
    assert!(ts.windows(2).all(|w| w[0] <= w[1]), "in time order: {ts:?}");
}

#[test]
fn instants_go_to_their_streams_pooled_track_or_the_spans_and_to_their_thread() {
    let json = chrome(&recording());
    // The refusal names stream#2, whose spans put it on pooled stream 0.
    assert_eq!(on(&json, "i", "refuse launch stream#2"), [(1, 0), (2, 2)]);
    assert_eq!(on(&json, "i", "taint buf#3"), [(1, 0), (2, 1)]);
    for e in events(&json).iter().filter(|e| e["ph"] == "i") {
        assert_eq!(e["s"], "t");
        assert_eq!(e["args"]["pooled"], 0);
    }
}

#[test]
fn a_span_that_overlaps_another_partly_on_a_pooled_stream_gets_a_lane_of_its_own() {
    let mut rec = recording();
    // The worker's sync on stream#2 straddles the end of the main thread's capture.
    rec.spans
        .push(span("sync", "stream#2", 0, 2, (95_000, 105_000)));
    let json = chrome(&rec);
    let names = names(&json);
    assert_eq!(names[&(1, 1_000)], "pooled#0 (stream#0, stream#2), lane 2");
    assert!(on(&json, "X", "sync").contains(&(1, 1_000)));
    // The threads' tracks need no extra lane.
    assert_eq!(names.keys().filter(|(pid, _)| *pid == 2).count(), 2);
}

#[test]
fn lanes_keep_nested_and_disjoint_intervals_together_and_split_partial_overlaps() {
    assert_eq!(pack(&[]), Vec::<usize>::new());
    // Nested, touching, disjoint, and a child sharing its parent's start and end.
    assert_eq!(
        pack(&[(0, 10), (2, 4), (4, 6), (10, 12), (0, 10)]),
        [0, 0, 0, 0, 0]
    );
    // (5, 15) overlaps (0, 10) partly; (6, 7) nests in both, so stays in lane 0.
    assert_eq!(pack(&[(0, 10), (5, 15), (6, 7)]), [0, 1, 0]);
    assert_eq!(pack(&[(0, 10), (5, 15), (8, 20)]), [0, 1, 2]);
}

#[test]
fn the_text_form_is_the_same_json_one_event_per_line() {
    let json = chrome(&recording());
    let text = to_text(&json);
    let back: Value = serde_json::from_str(&text).expect("valid JSON");
    assert_eq!(back, json);
    assert_eq!(text.lines().count(), events(&json).len() + 2);
}

#[test]
fn instant_names_carry_the_call_and_the_subject() {
    let f = fields(&[
        ("stream", "stream#0".into()),
        ("graph", "graph#1".into()),
        ("op", "copy".into()),
    ]);
    assert_eq!(instant_name("doom", &f), "doom copy graph#1");
    assert_eq!(
        instant_name("fault", &fields(&[("stream", "stream#1".into())])),
        "fault stream#1"
    );
    assert_eq!(instant_name("pin", &Fields::new()), "pin");
}
