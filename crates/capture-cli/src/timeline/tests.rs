//! The recorder under a subscriber of its own: what it keeps of spans, threads and
//! events, and what it leaves out.

use tracing_subscriber::Layer;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::SubscriberExt;

use super::*;

/// What a recorder saw of `f`, run under a subscriber made of it alone (behind its
/// per-layer filter, as the program installs it).
fn recorded(f: impl FnOnce()) -> Recording {
    let recorder = Recorder::new();
    let subscriber = tracing_subscriber::registry()
        .with(recorder.clone().with_filter(filter_fn(Recorder::wants)));
    tracing::subscriber::with_default(subscriber, f);
    recorder.recording()
}

#[test]
fn a_span_is_recorded_at_exit_with_its_fields_and_a_child_inside_it() {
    let rec = recorded(|| {
        let outer = tracing::debug_span!(
            target: "capture", "capture", stream = "stream#0", pooled = 0u64,
            graph = tracing::field::Empty
        )
        .entered();
        tracing::debug_span!(target: "capture", "warmup", stream = "stream#0", pooled = 0u64)
            .in_scope(|| std::thread::sleep(std::time::Duration::from_millis(1)));
        outer.record("graph", tracing::field::display("graph#0"));
    });
    let names: Vec<_> = rec.spans.iter().map(|s| s.name).collect();
    assert_eq!(names, ["warmup", "capture"]);
    let (warmup, capture) = (&rec.spans[0], &rec.spans[1]);
    assert_eq!(capture.fields["graph"], "graph#0");
    assert_eq!(capture.fields["pooled"], 0);
    assert_eq!(warmup.fields["stream"], "stream#0");
    assert!(capture.start <= warmup.start && warmup.end <= capture.end);
    assert!(warmup.end - warmup.start >= 1_000_000, "{warmup:?}");
    assert_eq!((capture.thread, warmup.thread), (1, 1));
    assert_eq!(rec.threads.len(), 1);
}

#[test]
fn each_entry_of_a_span_is_one_record() {
    let rec = recorded(|| {
        let span = tracing::debug_span!(target: "capture", "replay", graph = "graph#0");
        span.in_scope(|| {});
        span.in_scope(|| {});
    });
    assert_eq!(rec.spans.len(), 2);
    assert!(rec.spans[0].end <= rec.spans[1].start);
}

#[test]
fn only_events_with_a_kind_are_instants_with_the_pooled_stream_around_them() {
    let rec = recorded(|| {
        tracing::info!(target: "capture", kind = "refuse", stream = "stream#2", op = "launch",
            event = "stream#2 refuse launch");
        tracing::debug_span!(target: "capture", "seal", stream = "stream#0", pooled = 1u64)
            .in_scope(|| {
                tracing::info!(target: "capture", kind = "taint", memory = "buf#3",
                    event = "taint buf#3[0..64) failure#1");
                tracing::debug!(target: "capture", event = "stream#0 end -> graph#0");
            });
        tracing::info!(target: "elsewhere", kind = "taint", memory = "buf#9");
        tracing::debug_span!(target: "elsewhere", "other").in_scope(|| {});
    });
    assert_eq!(rec.spans.len(), 1, "{:?}", rec.spans);
    let kinds: Vec<_> = rec.instants.iter().map(|i| i.kind.as_str()).collect();
    assert_eq!(kinds, ["refuse", "taint"]);
    let (refuse, taint) = (&rec.instants[0], &rec.instants[1]);
    assert_eq!(refuse.pooled, None);
    assert_eq!(refuse.fields["op"], "launch");
    assert!(!refuse.fields.contains_key("kind"));
    assert_eq!(taint.pooled, Some(1));
    assert_eq!(taint.fields["memory"], "buf#3");
    assert!(refuse.at <= taint.at);
}

#[test]
fn threads_are_numbered_in_the_order_they_show_up_with_their_names() {
    let rec = recorded(|| {
        tracing::debug_span!(target: "capture", "sync", pooled = 0u64).in_scope(|| {});
        let dispatch = tracing::dispatcher::get_default(Clone::clone);
        std::thread::Builder::new()
            .name("helper".into())
            .spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    tracing::debug_span!(target: "capture", "read", pooled = 0u64).in_scope(|| {});
                });
            })
            .expect("spawned")
            .join()
            .expect("joined");
    });
    assert_eq!(rec.threads.len(), 2);
    assert_eq!(rec.threads[1], "helper");
    let threads: Vec<_> = rec.spans.iter().map(|s| (s.name, s.thread)).collect();
    assert_eq!(threads, [("sync", 1), ("read", 2)]);
}
