//! The picture of small hand-made timelines: lanes, nesting, labels, ticks, escaping,
//! and the files it refuses.

use serde_json::json;

use super::*;

fn timeline() -> Value {
    json!({"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "pooled streams"}},
        {"ph": "M", "name": "process_sort_index", "pid": 1, "tid": 0, "args": {"sort_index": 1}},
        {"ph": "M", "name": "process_name", "pid": 2, "tid": 0, "args": {"name": "threads"}},
        {"ph": "M", "name": "process_sort_index", "pid": 2, "tid": 0, "args": {"sort_index": 2}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 0, "args": {"name": "pooled#0 (stream#0)"}},
        {"ph": "M", "name": "thread_name", "pid": 2, "tid": 1, "args": {"name": "thread 1 (main)"}},
        {"ph": "X", "name": "capture", "ts": 0.0, "dur": 1000.0, "pid": 1, "tid": 0,
            "args": {"graph": "graph#0"}},
        {"ph": "X", "name": "warmup", "ts": 10.0, "dur": 400.0, "pid": 1, "tid": 0, "args": {}},
        {"ph": "X", "name": "replay", "ts": 1100.0, "dur": 1.0, "pid": 1, "tid": 0, "args": {}},
        {"ph": "X", "name": "capture", "ts": 0.0, "dur": 1000.0, "pid": 2, "tid": 1, "args": {}},
        {"ph": "i", "s": "t", "name": "taint buf#3", "ts": 500.0, "pid": 1, "tid": 0,
            "args": {"event": "taint buf#3[0..64) <failure#1>"}},
        {"ph": "i", "s": "t", "name": "taint buf#4", "ts": 501.0, "pid": 1, "tid": 0, "args": {}}
    ], "displayTimeUnit": "ms"})
}

#[test]
fn every_track_is_a_lane_under_its_process_in_sort_order() {
    let svg = render(&timeline()).expect("drawn");
    assert!(
        svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""),
        "{svg}"
    );
    assert!(svg.trim_end().ends_with("</svg>"));
    let at = |text: &str| svg.find(text).unwrap_or_else(|| panic!("{text} missing"));
    assert!(at(">pooled streams<") < at(">pooled#0 (stream#0)<"));
    assert!(at(">pooled#0 (stream#0)<") < at(">threads<"));
    assert!(at(">threads<") < at(">thread 1 (main)<"));
}

#[test]
fn spans_are_boxes_a_child_a_row_below_its_parent_labelled_where_they_fit() {
    let svg = render(&timeline()).expect("drawn");
    assert_eq!(svg.matches("class=\"span\"").count(), 4);
    assert!(svg.contains("class=\"label\">capture graph#0<"), "{svg}");
    assert!(svg.contains("class=\"label\">warmup<"));
    // One microsecond of 1,100 is too narrow for its name: the tooltip has it.
    assert!(!svg.contains("class=\"label\">replay<"));
    assert!(svg.contains("<title>replay: 1100.0 µs + 1.0 µs</title>"));
    let mut spans = vec![
        Span {
            name: "a".into(),
            label: "a".into(),
            ts: 0.0,
            dur: 10.0,
            tip: String::new(),
            depth: 9,
        },
        Span {
            name: "b".into(),
            label: "b".into(),
            ts: 2.0,
            dur: 3.0,
            tip: String::new(),
            depth: 9,
        },
        Span {
            name: "c".into(),
            label: "c".into(),
            ts: 3.0,
            dur: 1.0,
            tip: String::new(),
            depth: 9,
        },
        Span {
            name: "d".into(),
            label: "d".into(),
            ts: 10.0,
            dur: 1.0,
            tip: String::new(),
            depth: 9,
        },
    ];
    depths(&mut spans);
    let depths: Vec<_> = spans.iter().map(|s| (s.name.as_str(), s.depth)).collect();
    assert_eq!(depths, [("a", 0), ("b", 1), ("c", 2), ("d", 0)]);
}

#[test]
fn instants_are_ticks_whose_labels_never_run_into_each_other() {
    let svg = render(&timeline()).expect("drawn");
    assert_eq!(svg.matches("class=\"tick\"").count(), 2);
    // Two ticks a microsecond apart: the first is labelled, the second only has a tooltip.
    assert!(svg.contains(">taint buf#3<"));
    assert!(!svg.contains(">taint buf#4<"));
    assert!(
        svg.contains("event: taint buf#3[0..64) &lt;failure#1&gt;"),
        "{svg}"
    );
}

#[test]
fn the_legend_names_each_span_and_instant_kind_once() {
    let svg = render(&timeline()).expect("drawn");
    assert_eq!(
        svg.matches("class=\"key\"").count(),
        3,
        "capture, warmup, replay"
    );
    assert_eq!(svg.matches("class=\"key-tick\"").count(), 1, "taint");
    for name in ["capture", "warmup", "replay", "taint"] {
        let key = format!("class=\"key-label\">{name}</text>");
        assert_eq!(svg.matches(&key).count(), 1, "{name}");
    }
    assert_eq!(kind("not sealed stream#0"), "not sealed");
    assert_eq!(kind("refuse launch stream#2"), "refuse");
}

#[test]
fn what_is_not_a_timeline_is_refused_naming_why() {
    assert_eq!(
        render(&json!({"events": []})),
        Err(Unreadable("no \"traceEvents\" array".into()))
    );
    let no_dur =
        json!({"traceEvents": [{"ph": "X", "name": "seal", "ts": 1.0, "pid": 1, "tid": 0}]});
    assert_eq!(
        render(&no_dur),
        Err(Unreadable("event 0 has no \"dur\"".into()))
    );
    assert!(render(&json!({"traceEvents": []})).is_ok());
}

#[test]
fn axis_steps_are_one_two_or_five_times_a_power_of_ten() {
    assert_eq!(nice_step(0.7), 1.0);
    assert_eq!(nice_step(1.5), 2.0);
    assert_eq!(nice_step(3.0), 5.0);
    assert_eq!(nice_step(120.0), 200.0);
    assert_eq!(trim(2.500), "2.5");
    assert_eq!(trim(3.0), "3");
}
