//! Unit tests of labels: what is accepted, and where a label is shown.

use super::*;
use crate::op::{Op, ReadBy};
use crate::range::ByteRange;
use crate::subject::Subject;

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
fn an_error_is_named_by_its_typed_ids_in_its_subject_and_nested_causes() {
    let t = table(&[(2, "weights"), (3, "act")], &[(1, "step")]);
    let unwritten = ServerError::Unwritten(Box::new(crate::error::Unwritten {
        memory: MemoryId::new(2),
        label: None,
        read: ByteRange::from_bounds(0, 4),
        claimed: ByteRange::from_bounds(0, 4),
        failure: crate::ids::FailureId::new(0),
        cause: FailureCause::Failed(ServerError::invalid_of(
            "replay stream",
            Subject::graph(GraphId::new(1)),
            "wrong stream",
        )),
        chain: vec![crate::error::Skipped {
            op: Op::replay(GraphId::new(1)),
            stream: crate::ids::StreamId::new(0),
            input: MemoryId::new(3),
            input_label: None,
            range: ByteRange::from_bounds(0, 4),
        }],
        by: None,
    }));
    let doomed = ServerError::doomed(
        crate::ids::StreamId::new(0),
        Op::Call("write"),
        crate::ids::StreamId::new(0),
        2,
        ServerError::Several(vec![
            unwritten,
            ServerError::invalid_binding(
                Subject::bytes(MemoryId::new(2), 0, 8, 4),
                "past the end of the buffer",
            ),
            // A reason is prose: an id spelled in it is not an id, and gets no label.
            ServerError::graph_state_of("write", Subject::buffer(MemoryId::new(3)), "buf#2 busy"),
        ]),
    );
    let named = name_error(&t, doomed);
    let text = crate::error::Chain(&named).to_string();
    for expected in [
        "read of buf#2 \"weights\"[0..4)",
        "invalid replay stream graph#1 \"step\": wrong stream",
        "; then replay graph#1 \"step\" on stream#0 skipped (input buf#3 \"act\"[0..4))",
        "invalid binding buf#2 \"weights\"[0+8] (4 B): past the end of the buffer",
        "write buf#3 \"act\": buf#2 busy",
    ] {
        assert!(text.contains(expected), "{expected:?} in {text}");
    }
    // The labels are fields a caller can read, not text.
    let ServerError::Doomed(pm) = &named else {
        panic!("{named:?}")
    };
    let ServerError::Several(all) = &pm.cause else {
        panic!("{pm:?}")
    };
    assert_eq!(all[1].subject().and_then(Subject::label), Some("weights"));
    assert_eq!(
        all[1].subject().and_then(Subject::memory),
        Some(MemoryId::new(2))
    );
    assert_eq!(all[2].subject().and_then(Subject::label), Some("act"));
    let ServerError::Unwritten(u) = &all[0] else {
        panic!("{all:?}")
    };
    assert!(
        matches!(&u.chain[0].op, Op::Replay { graph, label: Some(l) } if graph.index() == 1 && &**l == "step"),
        "{u:?}"
    );
}

#[test]
fn what_read_claimed_bytes_and_what_never_finished_are_named_by_their_graph() {
    let t = table(&[], &[(4, "decode")]);
    let unwritten = ServerError::Unwritten(Box::new(crate::error::Unwritten {
        memory: MemoryId::new(0),
        label: None,
        read: ByteRange::from_bounds(0, 4),
        claimed: ByteRange::from_bounds(0, 4),
        failure: crate::ids::FailureId::new(0),
        cause: FailureCause::Unfinished {
            op: Op::replay(GraphId::new(4)),
        },
        chain: Vec::new(),
        by: Some(ReadBy {
            op: Op::replay(GraphId::new(4)),
            stream: crate::ids::StreamId::new(1),
            recorded: false,
        }),
    }));
    assert_eq!(
        name_error(&t, unwritten).to_string(),
        "replay of graph#4 \"decode\" on stream#1 skipped: its input buf#0[0..4) overlaps \
         [0..4), which carries failure#0: replay graph#4 \"decode\" never finished"
    );
}

#[test]
fn naming_is_free_until_a_label_is_given_and_forgotten_labels_are_not_shown() {
    let labels = Labels::default();
    let error = ServerError::UnknownMemory(MemoryId::new(1));
    assert!(matches!(labels.name(error), ServerError::UnknownMemory(_)));
    labels.set_memory(MemoryId::new(4), Arc::from("tmp"));
    let refused =
        || ServerError::graph_state_of("write", Subject::buffer(MemoryId::new(4)), "busy");
    assert_eq!(
        labels.name(refused()).to_string(),
        "write buf#4 \"tmp\": busy"
    );
    labels.forget_memory(&[MemoryId::new(4)]);
    assert_eq!(labels.name(refused()).to_string(), "write buf#4: busy");
    assert!(labels.memory(MemoryId::new(4)).is_none());
}

#[test]
fn the_trace_shows_a_label_from_its_event_on() {
    let mut seen = RenderLabels::default();
    let key = ClaimKey {
        memory: MemoryId::new(1),
        range: ByteRange::from_bounds(0, 4),
    };
    assert_eq!(seen.of_key(key).to_string(), "buf#1[0..4)");
    seen.memory(MemoryId::new(1), &Arc::from("out"));
    seen.graph(GraphId::new(0), &Arc::from("b8"));
    assert_eq!(seen.of_key(key).to_string(), "buf#1 \"out\"[0..4)");
    assert_eq!(seen.of_graph(GraphId::new(0)).to_string(), "graph#0 \"b8\"");
    assert_eq!(seen.of_memory(MemoryId::new(2)).to_string(), "buf#2");
}
