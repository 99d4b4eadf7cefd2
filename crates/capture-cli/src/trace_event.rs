//! A [`Recording`] as Chrome trace-event JSON (the JSON object format, which Perfetto
//! and `chrome://tracing` open): `{"traceEvents": [...], "displayTimeUnit": "ms"}`.
//!
//! Two processes of tracks. Process 1, "pooled streams", has a track per pooled stream,
//! named with the logical streams seen on it (`pooled#0 (stream#0, stream#2)`);
//! process 2, "threads", a track per calling thread (`thread 1 (main)`). Every span is
//! a complete event (`"ph": "X"`, `ts` and `dur` in microseconds) on both its pooled
//! stream's track and its thread's; every instant (`"ph": "i"`, `"s": "t"`, named with
//! its logical ids: `taint buf#3`, `refuse launch stream#2`) on its thread's track and,
//! where its stream (or the span around it) says which, on its pooled stream's. Spans
//! carry their logical ids in `args`; instants also the trace line.
//!
//! A track's complete events must nest: a child inside its parent, never a partial
//! overlap. On a thread that holds by construction; on a pooled stream, two threads'
//! calls may overlap partly (a call's span opens before it takes the stream's lock).
//! Such a span goes to an extra lane of its track (`pooled#0 (...), lane 2`), so every
//! track still nests.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use crate::timeline::{Fields, Recording};

/// The process of the pooled-stream tracks.
pub(crate) const POOLED_PID: u64 = 1;
/// The process of the thread tracks.
pub(crate) const THREADS_PID: u64 = 2;
/// Where the extra lanes' track ids start.
const LANE_TIDS: u64 = 1000;

/// A track before lanes: a pooled stream or a thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Track {
    Pooled(u64),
    Thread(u64),
}

/// The trace-event JSON of `recording`.
pub(crate) fn chrome(recording: &Recording) -> Value {
    let pooled_of = pooled_of_streams(recording);
    let mut streams: BTreeMap<u64, BTreeSet<(u64, String)>> = BTreeMap::new();
    for (stream, pooled) in &pooled_of {
        streams
            .entry(*pooled)
            .or_default()
            .insert((stream_number(stream), stream.clone()));
    }

    // Every span on each of its tracks, placed in lanes that nest.
    let mut placed: Vec<(Track, usize, usize)> = Vec::new();
    let mut by_track: BTreeMap<Track, Vec<usize>> = BTreeMap::new();
    for (i, span) in recording.spans.iter().enumerate() {
        if let Some(p) = span.fields.get("pooled").and_then(Value::as_u64) {
            by_track.entry(Track::Pooled(p)).or_default().push(i);
            streams.entry(p).or_default();
        }
        by_track
            .entry(Track::Thread(span.thread as u64))
            .or_default()
            .push(i);
    }
    let mut lanes_of: BTreeMap<Track, usize> = BTreeMap::new();
    for (track, spans) in &by_track {
        let intervals: Vec<(u64, u64)> = spans
            .iter()
            .map(|&i| (recording.spans[i].start, recording.spans[i].end))
            .collect();
        let lanes = pack(&intervals);
        lanes_of.insert(*track, lanes.iter().max().map_or(1, |m| m + 1));
        placed.extend(spans.iter().zip(lanes).map(|(&i, lane)| (*track, i, lane)));
    }
    for thread in 1..=recording.threads.len() as u64 {
        lanes_of.entry(Track::Thread(thread)).or_insert(1);
    }
    for p in streams.keys() {
        lanes_of.entry(Track::Pooled(*p)).or_insert(1);
    }

    // Track ids: lane 0 is the pooled index or the thread number; extra lanes follow
    // from LANE_TIDS on.
    let mut tids: BTreeMap<(Track, usize), (u64, u64)> = BTreeMap::new();
    let mut next_lane_tid = LANE_TIDS;
    for (track, lanes) in &lanes_of {
        for lane in 0..*lanes {
            let (pid, base) = match track {
                Track::Pooled(p) => (POOLED_PID, *p),
                Track::Thread(t) => (THREADS_PID, *t),
            };
            let tid = if lane == 0 {
                base
            } else {
                next_lane_tid += 1;
                next_lane_tid - 1
            };
            tids.insert((*track, lane), (pid, tid));
        }
    }

    let mut events = Vec::new();
    let mut process = |pid: u64, name: &str| {
        events.push(
            json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
            "args": {"name": name}}),
        );
        events.push(
            json!({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
            "args": {"sort_index": pid}}),
        );
    };
    if !streams.is_empty() {
        process(POOLED_PID, "pooled streams");
    }
    process(THREADS_PID, "threads");
    for ((track, lane), (pid, tid)) in &tids {
        let mut name = match track {
            Track::Pooled(p) => {
                let names: Vec<&str> = streams
                    .get(p)
                    .into_iter()
                    .flatten()
                    .map(|(_, s)| s.as_str())
                    .collect();
                if names.is_empty() {
                    format!("pooled#{p}")
                } else {
                    format!("pooled#{p} ({})", names.join(", "))
                }
            }
            Track::Thread(t) => {
                let name = recording
                    .threads
                    .get(*t as usize - 1)
                    .map_or("unnamed", String::as_str);
                format!("thread {t} ({name})")
            }
        };
        if *lane > 0 {
            name.push_str(&format!(", lane {}", lane + 1));
        }
        let sort = match track {
            Track::Pooled(p) | Track::Thread(p) => p * 100 + *lane as u64,
        };
        events.push(
            json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
            "args": {"name": name}}),
        );
        events.push(
            json!({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
            "args": {"sort_index": sort}}),
        );
    }

    let mut timed: Vec<(u64, Value)> = Vec::new();
    for (track, i, lane) in placed {
        let span = &recording.spans[i];
        let (pid, tid) = tids[&(track, lane)];
        timed.push((
            span.start,
            json!({"ph": "X", "name": span.name, "cat": "capture", "ts": micros(span.start),
                "dur": micros(span.end.saturating_sub(span.start)), "pid": pid, "tid": tid,
                "args": args(&span.fields)}),
        ));
    }
    for instant in &recording.instants {
        let name = instant_name(&instant.kind, &instant.fields);
        let pooled = instant
            .fields
            .get("stream")
            .and_then(Value::as_str)
            .and_then(|s| pooled_of.get(s).copied())
            .or(instant.pooled);
        let mut on = vec![tids[&(Track::Thread(instant.thread as u64), 0)]];
        if let Some(p) = pooled {
            on.insert(0, tids[&(Track::Pooled(p), 0)]);
        }
        for (pid, tid) in on {
            let mut args = args(&instant.fields);
            if let Some(p) = pooled {
                args.entry("pooled").or_insert(Value::from(p));
            }
            timed.push((
                instant.at,
                json!({"ph": "i", "s": "t", "name": name, "cat": instant.kind,
                    "ts": micros(instant.at), "pid": pid, "tid": tid, "args": args}),
            ));
        }
    }
    timed.sort_by_key(|(at, _)| *at);
    events.extend(timed.into_iter().map(|(_, e)| e));
    json!({"traceEvents": events, "displayTimeUnit": "ms"})
}

/// Nanoseconds as the format's microseconds.
fn micros(nanos: u64) -> f64 {
    nanos as f64 / 1000.0
}

/// `json` as text, one trace event per line.
pub(crate) fn to_text(json: &Value) -> String {
    let events = json
        .get("traceEvents")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let mut out = String::from("{\"traceEvents\": [\n");
    for (i, event) in events.iter().enumerate() {
        out.push_str(&event.to_string());
        out.push_str(if i + 1 < events.len() { ",\n" } else { "\n" });
    }
    let unit = json.get("displayTimeUnit").unwrap_or(&Value::Null);
    out.push_str(&format!("], \"displayTimeUnit\": {unit}}}\n"));
    out
}

/// The pooled stream of every logical stream a span named.
fn pooled_of_streams(recording: &Recording) -> BTreeMap<String, u64> {
    recording
        .spans
        .iter()
        .filter_map(|s| {
            let stream = s.fields.get("stream")?.as_str()?;
            let pooled = s.fields.get("pooled")?.as_u64()?;
            Some((stream.to_owned(), pooled))
        })
        .collect()
}

/// The number of a logical id (`stream#12` is 12), for ordering; unnumbered last.
fn stream_number(id: &str) -> u64 {
    id.rsplit_once('#')
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or(u64::MAX)
}

/// An instant's name: its kind, the refused or dooming call, and its subject (the
/// memory, else the graph, else the stream): `refuse launch stream#2`, `taint buf#3`.
pub(crate) fn instant_name(kind: &str, fields: &Fields) -> String {
    let mut name = kind.to_owned();
    let text = |key: &str| fields.get(key).and_then(Value::as_str);
    if let Some(op) = text("op") {
        name.push(' ');
        name.push_str(op);
    }
    if let Some(subject) = text("memory").or(text("graph")).or(text("stream")) {
        name.push(' ');
        name.push_str(subject);
    }
    name
}

fn args(fields: &Fields) -> Map<String, Value> {
    fields
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

/// Lanes for `intervals` (start, end) such that in each lane any two intervals nest or
/// are disjoint; lane 0 first, a new lane only where an interval overlaps partly with
/// one in every lane so far. Returns each interval's lane, in input order.
pub(crate) fn pack(intervals: &[(u64, u64)]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..intervals.len()).collect();
    // By start; of two that start together, the longer (the parent) first.
    order.sort_by_key(|&i| (intervals[i].0, std::cmp::Reverse(intervals[i].1)));
    // Per lane, the ends of the intervals open at the current start, outermost first.
    let mut lanes: Vec<Vec<u64>> = Vec::new();
    let mut placed = vec![0; intervals.len()];
    for i in order {
        let (start, end) = intervals[i];
        let fits = |open: &mut Vec<u64>| {
            while open.last().is_some_and(|&e| e <= start) {
                open.pop();
            }
            open.last().is_none_or(|&e| e >= end)
        };
        let lane = match lanes.iter_mut().position(fits) {
            Some(lane) => lane,
            None => {
                lanes.push(Vec::new());
                lanes.len() - 1
            }
        };
        lanes[lane].push(end);
        placed[i] = lane;
    }
    placed
}

#[cfg(test)]
mod tests;
