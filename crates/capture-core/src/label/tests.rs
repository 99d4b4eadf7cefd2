//! Unit tests of labels: what is accepted, and where a label is shown.

use std::borrow::Cow;

use super::*;
use crate::range::ByteRange;

fn table(memory: &[(u64, &str)], graphs: &[(u64, &str)]) -> Table {
    Table {
        memory: memory
            .iter()
            .map(|(i, l)| (MemoryId::new(*i), Arc::from(*l)))
            .collect(),
        graphs: graphs
            .iter()
            .map(|(i, l)| (GraphId::new(*i), Arc::from(*l)))
            .collect(),
    }
}

fn annotated(t: &Table, text: &str) -> String {
    annotate(text, |kind, index| t.of(kind, index).map(|l| &**l)).unwrap_or_else(|| text.into())
}

#[test]
fn a_label_is_one_to_64_bytes_without_quotes_or_control_characters() {
    assert_eq!(&*checked("kv_cache layer 3").unwrap(), "kv_cache layer 3");
    assert_eq!(checked(&"x".repeat(64)).unwrap().len(), 64);
    for bad in ["", "a\"b", "tab\there", "new\nline", &"x".repeat(65)] {
        let err = checked(bad).unwrap_err();
        assert!(
            matches!(err, ServerError::InvalidArgument { what: "label", .. }),
            "{bad:?}: {err:?}"
        );
    }
}

#[test]
fn every_labelled_id_in_a_text_gets_its_label_and_no_other_does() {
    let t = table(&[(6, "kv"), (1, "x")], &[(0, "decode")]);
    assert_eq!(
        annotated(
            &t,
            "read of buf#6[0..8) refused; buf#60 and buf#61; graph#0 replay"
        ),
        "read of buf#6 \"kv\"[0..8) refused; buf#60 and buf#61; graph#0 \"decode\" replay"
    );
    assert_eq!(annotated(&t, "buf#1"), "buf#1 \"x\"", "at the very end");
    // Not an id: part of a longer word, or no digits.
    assert_eq!(annotated(&t, "mybuf#1 buf# buf#x"), "mybuf#1 buf# buf#x");
    // An id already labelled is left alone: naming twice changes nothing.
    let once = annotated(&t, "buf#6[0..8)");
    assert_eq!(annotated(&t, &once), once);
    // Nothing to do: no allocation of a new text.
    assert!(annotate("stream#0 sync", |_, _| Some("never")).is_none());
}

#[test]
fn an_error_is_named_in_its_fields_and_nested_causes() {
    let t = table(&[(2, "weights"), (3, "act")], &[(1, "step")]);
    let unwritten = ServerError::Unwritten(Box::new(crate::error::Unwritten {
        memory: MemoryId::new(2),
        label: None,
        read: ByteRange::from_bounds(0, 4),
        claimed: ByteRange::from_bounds(0, 4),
        failure: crate::ids::FailureId::new(0),
        cause: FailureCause::Unfinished {
            op: Cow::Borrowed("replay graph#1"),
        },
        chain: vec![crate::error::Skipped {
            op: Cow::Borrowed("add_one"),
            stream: crate::ids::StreamId::new(0),
            input: MemoryId::new(3),
            input_label: None,
            range: ByteRange::from_bounds(0, 4),
        }],
        by: None,
    }));
    let doomed = ServerError::doomed(
        crate::ids::StreamId::new(0),
        "write buf#3",
        crate::ids::StreamId::new(0),
        2,
        ServerError::Several(vec![
            unwritten,
            ServerError::InvalidBinding {
                binding: "buf#2[0+8] (4 B)".into(),
                reason: Cow::Borrowed("past the end of buf#2"),
            },
        ]),
    );
    let text = crate::error::Chain(&name_error(&t, doomed)).to_string();
    for expected in [
        "doomed by write buf#3 \"act\"",
        "read of buf#2 \"weights\"[0..4)",
        "replay graph#1 \"step\" never finished",
        "(input buf#3 \"act\"[0..4))",
        "invalid binding buf#2 \"weights\"[0+8] (4 B): past the end of buf#2 \"weights\"",
    ] {
        assert!(text.contains(expected), "{expected:?} in {text}");
    }
}

#[test]
fn naming_is_free_until_a_label_is_given_and_forgotten_labels_are_not_shown() {
    let labels = Labels::default();
    let error = ServerError::UnknownMemory(MemoryId::new(1));
    assert!(matches!(labels.name(error), ServerError::UnknownMemory(_)));
    labels.set_memory(MemoryId::new(4), Arc::from("tmp"));
    let refused = || ServerError::graph_state("write", "buf#4 is busy");
    assert_eq!(
        labels.name(refused()).to_string(),
        "write: buf#4 \"tmp\" is busy"
    );
    labels.forget_memory(&[MemoryId::new(4)]);
    assert_eq!(labels.name(refused()).to_string(), "write: buf#4 is busy");
    assert!(labels.memory(MemoryId::new(4)).is_none());
}

#[test]
fn the_trace_shows_a_label_from_its_event_on() {
    let mut seen = RenderLabels::default();
    assert_eq!(
        seen.apply("0 stream#0 read buf#1[0..4)".into()),
        "0 stream#0 read buf#1[0..4)"
    );
    seen.memory(MemoryId::new(1), &Arc::from("out"));
    seen.graph(GraphId::new(0), &Arc::from("b8"));
    assert_eq!(
        seen.apply("2 stream#0 replay graph#0 x1; read buf#1[0..4)".into()),
        "2 stream#0 replay graph#0 \"b8\" x1; read buf#1 \"out\"[0..4)"
    );
}
