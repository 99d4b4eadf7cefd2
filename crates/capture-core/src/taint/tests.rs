//! Unit tests of the taint ledger: a read of bytes nothing successfully wrote fails with
//! the real cause, and only those reads.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Mutex;

use rstest::rstest;

use super::*;
use crate::subject::Subject;

const A: MemoryId = MemoryId::new(0);
const B: MemoryId = MemoryId::new(1);
const C: MemoryId = MemoryId::new(2);
const D: MemoryId = MemoryId::new(3);
const UNKNOWN: MemoryId = MemoryId::new(99);
const S: StreamId = StreamId::new(0);

fn key(memory: MemoryId, start: u64, end: u64) -> ClaimKey {
    ClaimKey {
        memory,
        range: ByteRange::from_bounds(start, end),
    }
}

fn range(start: u64, end: u64) -> ByteRange {
    ByteRange::from_bounds(start, end)
}

/// A ledger tracking `memories`, each 1024 bytes and written whole by the host.
fn written(memories: &[MemoryId]) -> TaintLedger {
    let mut ledger = TaintLedger::new();
    for &memory in memories {
        ledger.fresh(memory, 1024).expect("fresh");
        ledger.host_write(key(memory, 0, 1024)).expect("host write");
    }
    ledger
}

fn claims(ledger: &mut TaintLedger, memory: MemoryId) -> Vec<(ByteRange, FailureId)> {
    ledger.claims(memory).expect("tracked").collect()
}

/// The refusal a read must give.
fn unwritten(result: Result<(), ServerError>) -> Box<Unwritten> {
    match result {
        Err(ServerError::Unwritten(refused)) => refused,
        other => panic!("expected Unwritten, got {other:?}"),
    }
}

fn device_lost() -> ServerError {
    ServerError::graph_state("matmul", "device lost")
}

#[test]
fn the_ledger_is_send_and_sync_and_starts_empty() {
    fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<TaintLedger>();
    let mut ledger = TaintLedger::default();
    assert_eq!(ledger.failure_count(), 0);
    assert!(ledger.cause(FailureId::new(0)).is_none());
}

#[test]
fn two_ranges_of_one_allocation_are_two_claims() {
    let mut ledger = written(&[A]);
    let (first, second) = (key(A, 0, 256), key(A, 256, 512));
    let scope = ledger
        .enter(Op::Call("split"), [first, second])
        .expect("enter");
    let failure = scope.failure();
    assert_eq!(
        claims(&mut ledger, A),
        [(range(0, 256), failure), (range(256, 512), failure)]
    );

    ledger.host_write(second).expect("host write");
    ledger.fail(scope, device_lost());

    assert_eq!(claims(&mut ledger, A), [(range(0, 256), failure)]);
    assert!(ledger.check_read(first).is_err());
    ledger
        .check_read(second)
        .expect("the other claim stays clean");
}

#[rstest]
#[case::exact(100, 200, false)]
#[case::sub_range(120, 150, false)]
#[case::overlapping_start(50, 150, false)]
#[case::overlapping_end(150, 250, false)]
#[case::containing(0, 300, false)]
#[case::last_byte_before(0, 101, false)]
#[case::first_byte_after(199, 300, false)]
#[case::adjacent_before(0, 100, true)]
#[case::adjacent_after(200, 300, true)]
#[case::far_away(500, 600, true)]
fn reads_against_a_claim(#[case] start: u64, #[case] end: u64, #[case] passes: bool) {
    let mut ledger = written(&[A]);
    let failure = ledger
        .taint([key(A, 100, 200)], device_lost())
        .expect("taint");
    let read = key(A, start, end);

    assert_eq!(ledger.is_clear(read).expect("known"), passes);
    match ledger.check_read(read) {
        Ok(()) => assert!(passes, "read of {read} passed"),
        Err(error) => {
            assert!(!passes, "read of {read} refused: {error}");
            let refused = unwritten(Err(error));
            assert_eq!(refused.memory, A);
            assert_eq!(refused.read, read.range);
            assert_eq!(refused.claimed, range(100, 200));
            assert_eq!(refused.failure, failure);
            assert!(matches!(refused.cause, FailureCause::Failed(_)));
        }
    }
}

#[test]
fn a_read_names_the_first_claim_it_overlaps_as_stored() {
    let mut ledger = written(&[A]);
    let second = ledger.taint([key(A, 300, 400)], device_lost()).expect("t");
    let first = ledger.taint([key(A, 100, 200)], device_lost()).expect("t");
    let refused = unwritten(ledger.check_read(key(A, 150, 350)));
    assert_eq!((refused.claimed, refused.failure), (range(100, 200), first));
    assert_ne!(first, second);
}

#[test]
fn partial_host_write_splits_a_claim() {
    let mut ledger = TaintLedger::new();
    let failure = ledger.fresh(A, 300).expect("fresh");

    ledger.host_write(key(A, 100, 200)).expect("host write");

    assert_eq!(
        claims(&mut ledger, A),
        [(range(0, 100), failure), (range(200, 300), failure)]
    );
    ledger.check_read(key(A, 100, 200)).expect("written part");
    for refused in [
        key(A, 0, 100),
        key(A, 200, 300),
        key(A, 99, 101),
        key(A, 199, 201),
    ] {
        let refused = unwritten(ledger.check_read(refused));
        assert_eq!(refused.failure, failure);
        assert!(matches!(refused.cause, FailureCause::NeverWritten));
    }
    assert_eq!(ledger.failure_count(), 1, "both pieces carry one failure");
}

#[rstest]
#[case::prefix(0, 100, &[(100, 300)])]
#[case::suffix(200, 300, &[(100, 200)])]
#[case::middle(150, 250, &[(100, 150), (250, 300)])]
#[case::exact(100, 300, &[])]
#[case::containing(50, 400, &[])]
#[case::adjacent(300, 400, &[(100, 300)])]
fn host_write_clears_exactly_the_bytes_it_covers(
    #[case] start: u64,
    #[case] end: u64,
    #[case] left: &[(u64, u64)],
) {
    let mut ledger = written(&[A]);
    let failure = ledger
        .taint([key(A, 100, 300)], device_lost())
        .expect("taint");

    ledger.host_write(key(A, start, end)).expect("host write");

    let expected: Vec<_> = left.iter().map(|&(s, e)| (range(s, e), failure)).collect();
    assert_eq!(claims(&mut ledger, A), expected);
    assert_eq!(ledger.failure_count(), usize::from(!left.is_empty()));
}

#[test]
fn host_write_across_several_claims_keeps_the_pieces_outside_it() {
    let mut ledger = written(&[A]);
    let first = ledger.taint([key(A, 0, 100)], device_lost()).expect("t");
    let middle = ledger.taint([key(A, 200, 300)], device_lost()).expect("t");
    let last = ledger.taint([key(A, 400, 500)], device_lost()).expect("t");

    ledger.host_write(key(A, 50, 450)).expect("host write");

    assert_eq!(
        claims(&mut ledger, A),
        [(range(0, 50), first), (range(450, 500), last)]
    );
    assert!(ledger.cause(middle).is_none(), "its last claim was cleared");
    assert_eq!(ledger.failure_count(), 2);
}

#[test]
fn a_never_written_read_fails_with_cause_never_written() {
    let mut ledger = TaintLedger::new();
    let failure = ledger.fresh(A, 1024).expect("fresh");

    let refused = unwritten(ledger.check_read(key(A, 0, 4)));

    assert_eq!(refused.failure, failure);
    assert_eq!(refused.claimed, range(0, 1024));
    assert!(matches!(refused.cause, FailureCause::NeverWritten));
    assert!(refused.chain.is_empty());
    assert_eq!(
        refused.to_string(),
        "read of buf#0[0..4) refused: [0..1024) carries failure#0: never written"
    );
}

#[test]
fn settle_after_success_clears_the_written_bytes() {
    let mut ledger = TaintLedger::new();
    let never = ledger.fresh(A, 1024).expect("fresh");
    let written = key(A, 256, 512);

    let scope = ledger.enter(Op::Call("fill"), [written]).expect("enter");
    assert!(!ledger.is_clear(written).expect("known"));
    ledger.settle(scope);

    ledger.check_read(written).expect("written by the scope");
    assert_eq!(
        claims(&mut ledger, A),
        [(range(0, 256), never), (range(512, 1024), never)],
        "the bytes the scope did not write are still never written"
    );
    assert_eq!(ledger.failure_count(), 1);
}

#[test]
fn enter_replaces_the_claims_of_the_bytes_it_writes() {
    let mut ledger = TaintLedger::new();
    let never = ledger.fresh(A, 1024).expect("fresh");

    let scope = ledger
        .enter(Op::Call("fill"), [key(A, 256, 512)])
        .expect("enter");

    let refused = unwritten(ledger.check_read(key(A, 300, 301)));
    assert_eq!(refused.failure, scope.failure());
    assert!(
        matches!(&refused.cause, FailureCause::Unfinished { op } if *op == Op::Call("fill")),
        "{refused}"
    );
    assert_eq!(
        claims(&mut ledger, A),
        [
            (range(0, 256), never),
            (range(256, 512), scope.failure()),
            (range(512, 1024), never),
        ]
    );
    ledger.settle(scope);
}

#[test]
fn settle_leaves_bytes_claimed_since_by_other_work() {
    let mut ledger = written(&[A]);
    let scope = ledger
        .enter(Op::Call("first"), [key(A, 0, 512)])
        .expect("enter");
    let later = ledger
        .taint([key(A, 100, 200)], device_lost())
        .expect("taint");

    ledger.settle(scope);

    assert_eq!(claims(&mut ledger, A), [(range(100, 200), later)]);
    assert_eq!(ledger.failure_count(), 1);
}

#[test]
fn settle_after_a_partial_host_write_clears_the_rest() {
    let mut ledger = written(&[A]);
    let scope = ledger
        .enter(Op::Call("fill"), [key(A, 0, 512)])
        .expect("enter");
    ledger.host_write(key(A, 100, 200)).expect("host write");
    assert_eq!(claims(&mut ledger, A).len(), 2);

    ledger.settle(scope);

    assert_eq!(claims(&mut ledger, A), []);
    assert_eq!(ledger.failure_count(), 0);
}

#[test]
fn a_scope_whose_bytes_were_all_rewritten_ends_quietly() {
    let mut ledger = written(&[A]);
    let scope = ledger
        .enter(Op::Call("fill"), [key(A, 0, 512)])
        .expect("enter");
    ledger.host_write(key(A, 0, 1024)).expect("host write");
    assert_eq!(ledger.failure_count(), 0);

    ledger.fail(scope, device_lost());

    assert_eq!(ledger.failure_count(), 0);
    ledger.check_read(key(A, 0, 1024)).expect("host written");
}

#[test]
fn a_scope_that_writes_nothing_claims_nothing() {
    let mut ledger = written(&[A]);
    let scope = ledger.enter(Op::Call("noop"), []).expect("enter");
    assert_eq!(ledger.failure_count(), 0);
    ledger.fail(scope, device_lost());
    assert_eq!(ledger.failure_count(), 0);
}

#[test]
fn one_scope_writing_a_range_twice_holds_it_once() {
    let mut ledger = written(&[A]);
    let k = key(A, 0, 64);
    let scope = ledger
        .enter(Op::Call("twice"), [k, k, key(A, 32, 96)])
        .expect("enter");
    let failure = scope.failure();
    assert_eq!(
        claims(&mut ledger, A),
        [(range(0, 32), failure), (range(32, 96), failure)]
    );
    ledger.settle(scope);
    assert_eq!(claims(&mut ledger, A), []);
    assert_eq!(ledger.failure_count(), 0);
}

#[test]
fn fail_stores_the_real_error_as_cause() {
    let mut ledger = written(&[A]);
    let k = key(A, 0, 256);
    let scope = ledger.enter(Op::Call("matmul"), [k]).expect("enter");
    let failure = scope.failure();

    ledger.fail(scope, device_lost());

    let refused = unwritten(ledger.check_read(k));
    assert_eq!(refused.failure, failure);
    assert!(
        matches!(
            &refused.cause,
            FailureCause::Failed(ServerError::GraphState { op: "matmul", .. })
        ),
        "{:?}",
        refused.cause
    );
    assert!(refused.to_string().contains("device lost"), "{refused}");
    assert!(matches!(
        ledger.cause(failure),
        Some(FailureCause::Failed(_))
    ));
}

/// Kernel work that panics: it unwinds like `panic!`, without printing through the hook.
fn panicking_kernel() -> Result<(), ServerError> {
    resume_unwind(Box::new("kernel panicked"))
}

#[test]
fn a_provisional_claim_survives_a_panic_inside_the_scope() {
    let ledger = Mutex::new(written(&[A]));
    let k = key(A, 0, 256);

    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let scope = ledger
            .lock()
            .expect("unpoisoned")
            .enter(Op::Call("softmax"), [k])
            .expect("enter");
        let result = panicking_kernel();
        let mut ledger = ledger.lock().expect("unpoisoned");
        match result {
            Ok(()) => ledger.settle(scope),
            Err(error) => ledger.fail(scope, error),
        }
    }));

    assert!(outcome.is_err(), "the work panicked");
    let mut ledger = ledger
        .lock()
        .expect("the lock was not held across the work");
    let refused = unwritten(ledger.check_read(k));
    assert!(
        matches!(&refused.cause, FailureCause::Unfinished { op } if *op == Op::Call("softmax")),
        "{:?}",
        refused.cause
    );
    assert!(
        refused.to_string().contains("softmax never finished"),
        "{refused}"
    );
}

#[test]
fn propagation_through_three_skipped_launches_shows_each_in_order() {
    let mut ledger = written(&[A, B, C, D]);
    let scope = ledger
        .enter(Op::Call("matmul"), [key(A, 0, 256)])
        .expect("enter");
    let failure = scope.failure();
    ledger.fail(scope, device_lost());

    let steps = [("relu", A, B), ("add", B, C), ("softmax", C, D)];
    for (op, input, output) in steps {
        let refused = unwritten(ledger.propagate(
            Op::Call(op),
            S,
            [key(input, 0, 128)],
            [key(output, 64, 512)],
        ));
        assert_eq!(refused.failure, failure, "{op} names the original failure");
        assert_eq!(refused.memory, input);
    }

    let refused = unwritten(ledger.check_read(key(D, 0, 1024)));
    assert_eq!(refused.failure, failure);
    assert_eq!(refused.claimed, range(64, 512));
    assert!(refused.to_string().contains("device lost"), "{refused}");
    let expected = [
        ("relu", A, range(0, 128)),
        ("add", B, range(64, 128)),
        ("softmax", C, range(64, 128)),
    ];
    let chain: Vec<_> = refused
        .chain
        .iter()
        .map(|s| (s.op.name().unwrap_or_default(), s.input, s.range))
        .collect();
    assert_eq!(chain, expected);
    assert!(refused.chain.iter().all(|s| s.stream == S));
    assert_eq!(
        refused.to_string(),
        "read of buf#3[0..1024) refused: [64..512) carries failure#4: \
         matmul: device lost; \
         then relu on stream#0 skipped (input buf#0[0..128)); \
         then add on stream#0 skipped (input buf#1[64..128)); \
         then softmax on stream#0 skipped (input buf#2[64..128))"
    );
    assert_eq!(ledger.chain(failure).map(<[_]>::len), Some(3));
    assert_eq!(
        ledger.failure_count(),
        1,
        "one failure carried by four claims"
    );
}

#[test]
fn the_error_of_a_skip_describes_the_input_before_the_skip() {
    let mut ledger = written(&[A, B]);
    let failure = ledger.taint([key(A, 0, 64)], device_lost()).expect("t");

    let refused =
        unwritten(ledger.propagate(Op::Call("relu"), S, [key(A, 0, 64)], [key(B, 0, 64)]));

    assert!(refused.chain.is_empty(), "{refused}");
    assert_eq!(ledger.chain(failure).map(<[_]>::len), Some(1));
}

#[test]
fn propagation_with_clean_inputs_changes_nothing() {
    let mut ledger = written(&[A, B]);
    let failure = ledger
        .taint([key(A, 512, 1024)], device_lost())
        .expect("taint");

    ledger
        .propagate(Op::Call("relu"), S, [key(A, 0, 512)], [key(B, 0, 1024)])
        .expect("clean inputs run");

    assert_eq!(claims(&mut ledger, B), []);
    assert_eq!(claims(&mut ledger, A), [(range(512, 1024), failure)]);
    assert_eq!(ledger.chain(failure).map(<[_]>::len), Some(0));
}

#[test]
fn the_first_claimed_input_decides_a_skip() {
    let mut ledger = written(&[A, B, C]);
    let first = ledger.taint([key(B, 0, 64)], device_lost()).expect("t");
    let second = ledger.taint([key(A, 0, 64)], device_lost()).expect("t");

    let refused = unwritten(ledger.propagate(
        Op::Call("add"),
        S,
        [key(A, 512, 1024), key(B, 0, 1024), key(A, 0, 1024)],
        [key(C, 0, 64)],
    ));

    assert_eq!((refused.memory, refused.failure), (B, first));
    assert_eq!(claims(&mut ledger, C), [(range(0, 64), first)]);
    assert_eq!(ledger.chain(second).map(<[_]>::len), Some(0));
}

#[test]
fn an_in_place_skip_keeps_its_failure_alive() {
    let mut ledger = written(&[A]);
    let k = key(A, 0, 64);
    let failure = ledger.taint([k], device_lost()).expect("taint");

    assert!(ledger.propagate(Op::Call("scale_"), S, [k], [k]).is_err());

    assert_eq!(claims(&mut ledger, A), [(range(0, 64), failure)]);
    assert_eq!(ledger.failure_count(), 1);
    assert!(ledger.cause(failure).is_some());
}

#[test]
fn check_reads_returns_the_first_refusal() {
    let mut ledger = written(&[A, B]);
    let failure = ledger.taint([key(B, 0, 64)], device_lost()).expect("t");

    ledger
        .check_reads([key(A, 0, 64), key(B, 64, 128)])
        .expect("clean reads");
    let refused = unwritten(ledger.check_reads([key(A, 0, 64), key(B, 0, 8), key(UNKNOWN, 0, 8)]));
    assert_eq!((refused.memory, refused.failure), (B, failure));
}

#[test]
fn a_failure_node_is_freed_when_its_last_claim_is_cleared() {
    let mut ledger = TaintLedger::new();
    let failure = ledger.fresh(A, 1024).expect("fresh");
    assert_eq!(ledger.failure_count(), 1);

    ledger.host_write(key(A, 0, 512)).expect("host write");
    assert_eq!(ledger.failure_count(), 1);
    assert!(ledger.cause(failure).is_some());

    ledger.host_write(key(A, 512, 1024)).expect("host write");
    assert_eq!(ledger.failure_count(), 0);
    assert!(ledger.cause(failure).is_none());
    assert!(ledger.chain(failure).is_none());
}

#[test]
fn forget_drops_the_claims_and_the_failures_only_they_carry() {
    let mut ledger = TaintLedger::new();
    ledger.fresh(A, 1024).expect("fresh");
    ledger.fresh(B, 1024).expect("fresh");
    ledger.host_write(key(B, 0, 1024)).expect("host write");
    let shared = ledger
        .taint([key(A, 0, 64), key(B, 0, 64)], device_lost())
        .expect("taint");
    assert_eq!(ledger.failure_count(), 2);

    ledger.forget(A).expect("forget");

    assert_eq!(
        ledger.failure_count(),
        1,
        "A's never-written failure is freed"
    );
    assert!(ledger.cause(shared).is_some(), "B still carries it");
    assert!(matches!(
        ledger.check_read(key(A, 0, 8)),
        Err(ServerError::UnknownMemory(A))
    ));

    ledger.forget(B).expect("forget");
    assert_eq!(ledger.failure_count(), 0);
}

#[test]
fn a_forgotten_allocation_can_be_tracked_afresh() {
    let mut ledger = written(&[A]);
    let scope = ledger
        .enter(Op::Call("fill"), [key(A, 0, 64)])
        .expect("enter");
    ledger.forget(A).expect("forget");
    let never = ledger.fresh(A, 128).expect("fresh again");

    ledger.settle(scope);

    assert_eq!(claims(&mut ledger, A), [(range(0, 128), never)]);
}

#[test]
fn failure_ids_count_up_in_creation_order_and_are_never_reused() {
    let mut ledger = TaintLedger::new();
    assert_eq!(ledger.fresh(A, 64).expect("fresh"), FailureId::new(0));
    ledger.host_write(key(A, 0, 64)).expect("host write");
    let scope = ledger
        .enter(Op::Call("fill"), [key(A, 0, 64)])
        .expect("enter");
    assert_eq!(scope.failure(), FailureId::new(1));
    ledger.settle(scope);
    let refused = ledger.taint([key(A, 0, 8)], device_lost()).expect("taint");
    assert_eq!(refused, FailureId::new(2));
    assert_eq!(ledger.fresh(B, 64).expect("fresh"), FailureId::new(3));
}

#[rstest]
#[case::unknown_memory_last(key(UNKNOWN, 0, 8), ServerError::UnknownMemory(UNKNOWN).to_string())]
#[case::range_past_end_last(
    key(A, 1000, 1025),
    "invalid claim key [1000..1025) of buf#0: runs past the end of the allocation (1024 B)".to_owned()
)]
fn a_refused_call_changes_nothing(#[case] bad: ClaimKey, #[case] message: String) {
    let mut ledger = written(&[A, B]);
    let before = ledger.taint([key(A, 0, 64)], device_lost()).expect("t");
    let good = key(B, 0, 64);

    let error = ledger
        .enter(Op::Call("fill"), [good, bad])
        .expect_err("refused");
    assert_eq!(error.to_string(), message);
    let error = ledger
        .taint([good, bad], device_lost())
        .expect_err("refused");
    assert_eq!(error.to_string(), message);
    let error = ledger
        .propagate(Op::Call("add"), S, [key(A, 0, 64)], [good, bad])
        .expect_err("refused");
    assert_eq!(error.to_string(), message);

    assert_eq!(claims(&mut ledger, A), [(range(0, 64), before)]);
    assert_eq!(claims(&mut ledger, B), [], "the good key was not claimed");
    assert_eq!(ledger.failure_count(), 1);
    assert_eq!(ledger.chain(before).map(<[_]>::len), Some(0));
}

/// What a refused call must say.
#[derive(Debug)]
enum Refusal {
    Unknown(MemoryId),
    Invalid {
        what: &'static str,
        value: &'static str,
    },
}

type Call = fn(&mut TaintLedger) -> Result<(), ServerError>;

#[rstest]
#[case::fresh_size_zero(
    |l: &mut TaintLedger| l.fresh(B, 0).map(drop),
    Refusal::Invalid { what: "allocation size", value: "0 B of buf#1" }
)]
#[case::fresh_twice(
    |l: &mut TaintLedger| l.fresh(A, 64).map(drop),
    Refusal::Invalid { what: "memory", value: "buf#0" }
)]
#[case::forget_unknown(|l: &mut TaintLedger| l.forget(UNKNOWN), Refusal::Unknown(UNKNOWN))]
#[case::enter_unknown_memory(
    |l: &mut TaintLedger| l.enter(Op::Call("fill"), [key(UNKNOWN, 0, 8)]).map(drop),
    Refusal::Unknown(UNKNOWN)
)]
#[case::enter_range_past_end(
    |l: &mut TaintLedger| l.enter(Op::Call("fill"), [key(A, 1000, 1025)]).map(drop),
    Refusal::Invalid { what: "claim key", value: "[1000..1025) of buf#0" }
)]
#[case::check_read_unknown(|l: &mut TaintLedger| l.check_read(key(UNKNOWN, 0, 8)), Refusal::Unknown(UNKNOWN))]
#[case::check_read_past_end(
    |l: &mut TaintLedger| l.check_read(key(A, 0, 1025)),
    Refusal::Invalid { what: "claim key", value: "[0..1025) of buf#0" }
)]
#[case::check_reads_unknown(
    |l: &mut TaintLedger| l.check_reads([key(UNKNOWN, 0, 8)]),
    Refusal::Unknown(UNKNOWN)
)]
#[case::host_write_unknown(|l: &mut TaintLedger| l.host_write(key(UNKNOWN, 0, 8)), Refusal::Unknown(UNKNOWN))]
#[case::host_write_past_end(
    |l: &mut TaintLedger| l.host_write(key(A, 1024, 1025)),
    Refusal::Invalid { what: "claim key", value: "[1024..1025) of buf#0" }
)]
#[case::taint_unknown(
    |l: &mut TaintLedger| l.taint([key(UNKNOWN, 0, 8)], device_lost()).map(drop),
    Refusal::Unknown(UNKNOWN)
)]
#[case::propagate_unknown_input(
    |l: &mut TaintLedger| l.propagate(Op::Call("add"), S, [key(UNKNOWN, 0, 8)], [key(A, 0, 8)]),
    Refusal::Unknown(UNKNOWN)
)]
#[case::propagate_unknown_output(
    |l: &mut TaintLedger| l.propagate(Op::Call("add"), S, [key(A, 0, 8)], [key(UNKNOWN, 0, 8)]),
    Refusal::Unknown(UNKNOWN)
)]
#[case::claims_unknown(|l: &mut TaintLedger| l.claims(UNKNOWN).map(drop), Refusal::Unknown(UNKNOWN))]
#[case::is_clear_unknown(|l: &mut TaintLedger| l.is_clear(key(UNKNOWN, 0, 8)).map(drop), Refusal::Unknown(UNKNOWN))]
#[case::is_clear_past_end(
    |l: &mut TaintLedger| l.is_clear(key(A, 512, 2048)).map(drop),
    Refusal::Invalid { what: "claim key", value: "[512..2048) of buf#0" }
)]
fn a_refusal_names_the_bad_value(#[case] call: Call, #[case] expected: Refusal) {
    let mut ledger = written(&[A]);
    let error = call(&mut ledger).expect_err("refused");
    match (&error, &expected) {
        (ServerError::UnknownMemory(memory), Refusal::Unknown(bad)) => {
            assert_eq!(memory, bad);
            assert_eq!(error.to_string(), format!("unknown memory {bad}"));
        }
        (ServerError::InvalidArgument { what, .. }, Refusal::Invalid { what: w, value: v }) => {
            assert_eq!(what, w);
            assert!(
                error.to_string().starts_with(&format!("invalid {w} {v}: ")),
                "{error}"
            );
            // The allocation is a typed field, not only text.
            assert!(
                error.subject().and_then(Subject::memory).is_some(),
                "{error:?}"
            );
        }
        _ => panic!("expected {expected:?}, got {error:?}"),
    }
    assert_eq!(claims(&mut ledger, A), [], "nothing was claimed");
    assert_eq!(ledger.failure_count(), 0);
}

#[test]
fn settle_leaves_the_outputs_of_launches_skipped_while_the_scope_was_open() {
    let mut ledger = written(&[A, B]);
    let scope = ledger
        .enter(Op::Call("fill"), [key(A, 0, 64)])
        .expect("enter");
    let failure = scope.failure();
    assert!(
        ledger
            .propagate(Op::Call("relu"), S, [key(A, 0, 64)], [key(B, 0, 64)])
            .is_err()
    );

    ledger.settle(scope);

    ledger
        .check_read(key(A, 0, 64))
        .expect("written by the scope");
    let refused = unwritten(ledger.check_read(key(B, 0, 64)));
    assert_eq!(refused.failure, failure, "relu did not run");
    assert!(
        matches!(&refused.cause, FailureCause::Unfinished { op } if *op == Op::Call("fill")),
        "relu read the bytes while fill was unfinished"
    );
    assert_eq!(refused.chain.len(), 1);
}

#[test]
fn the_scope_protocol_as_a_caller_drives_it() -> Result<(), ServerError> {
    let mut ledger = TaintLedger::new();
    let out = MemoryId::new(0);
    ledger.fresh(out, 1024)?;
    let key = ClaimKey {
        memory: out,
        range: ByteRange::new(0, 256)?,
    };

    // A kernel that writes `key` and succeeds: its bytes become readable.
    let scope = ledger.enter(Op::Call("fill"), [key])?;
    ledger.settle(scope);
    ledger.check_read(key)?;

    // A kernel that writes `key` and fails: a later read names the real error.
    let scope = ledger.enter(Op::Call("fill"), [key])?;
    ledger.fail(scope, ServerError::graph_state("fill", "device lost"));
    let Err(ServerError::Unwritten(refused)) = ledger.check_read(key) else {
        panic!("the read should have been refused");
    };
    assert!(matches!(refused.cause, FailureCause::Failed(_)));
    assert!(refused.to_string().contains("device lost"));

    // A host write makes the bytes readable again.
    ledger.host_write(key)?;
    ledger.check_read(key)?;
    Ok(())
}

/// Deferred claims: a scope `admit` opened over bytes nobody claimed makes no claim,
/// yet every other call sees the claims it would have made, failure numbers included.
#[test]
fn a_deferred_scope_is_seen_by_every_other_call_as_if_its_claims_were_made() {
    let mut ledger = written(&[A, B]);
    let scope = ledger
        .admit(Op::Call("k"), S, &[key(A, 0, 64)], &[key(B, 0, 64)])
        .expect("clean");
    assert!(
        ledger.deferred.is_some(),
        "nothing claimed B's bytes: deferred"
    );
    assert_eq!(ledger.failure_count(), 1, "the other call made its claim");
    assert!(ledger.deferred.is_none());
    assert_eq!(
        claims(&mut ledger, B),
        vec![(range(0, 64), scope.failure())]
    );
    let refused = unwritten(ledger.check_read(key(B, 0, 4)));
    assert!(
        matches!(&refused.cause, FailureCause::Unfinished { op } if *op == Op::Call("k")),
        "{refused:?}"
    );
    ledger.settle(scope);
    assert!(ledger.check_read(key(B, 0, 64)).is_ok());
    assert_eq!(ledger.failure_count(), 0);

    // Settled while deferred: nothing was claimed and nothing is left.
    let scope = ledger
        .admit(Op::Call("k"), S, &[key(A, 0, 64)], &[key(B, 0, 64)])
        .expect("clean");
    let id = scope.failure();
    ledger.settle(scope);
    assert!(ledger.deferred.is_none());
    assert_eq!(ledger.failure_count(), 0);
    assert!(ledger.check_read(key(B, 0, 1024)).is_ok());

    // Failed while deferred: its bytes carry the real error under its own number.
    let scope = ledger
        .admit(Op::Call("k"), S, &[], &[key(B, 64, 128)])
        .expect("clean");
    assert!(scope.failure() > id, "numbers are taken in turn");
    let failure = scope.failure();
    ledger.fail(scope, device_lost());
    assert_eq!(claims(&mut ledger, B), vec![(range(64, 128), failure)]);
    let refused = unwritten(ledger.check_read(key(B, 100, 101)));
    assert!(
        matches!(refused.cause, FailureCause::Failed(_)),
        "{refused:?}"
    );

    // Outputs over claimed bytes claim at once, as a scope always did.
    let scope = ledger
        .admit(Op::Call("k"), S, &[], &[key(B, 0, 128)])
        .expect("clean inputs");
    assert!(ledger.deferred.is_none(), "B's bytes 64..128 were claimed");
    ledger.settle(scope);
    assert_eq!(claims(&mut ledger, B), vec![]);

    // A deferred scope never ended (its work panicked) reads as unfinished.
    let scope = ledger
        .admit(Op::Call("p"), S, &[], &[key(A, 0, 8)])
        .expect("clean");
    drop(scope);
    let refused = unwritten(ledger.check_read(key(A, 0, 8)));
    assert!(
        matches!(&refused.cause, FailureCause::Unfinished { op } if *op == Op::Call("p")),
        "{refused:?}"
    );
}

/// A second `admit` makes the deferred scope's claims before it checks its own inputs:
/// a launch reading what another thread's launch is writing is skipped.
#[test]
fn an_admit_after_a_deferred_scope_sees_its_claims() {
    let mut ledger = written(&[A, B, C]);
    let writer = ledger
        .admit(Op::Call("w"), S, &[key(A, 0, 4)], &[key(B, 0, 4)])
        .expect("clean");
    let reader = ledger.admit(
        Op::Call("r"),
        StreamId::new(1),
        &[key(B, 0, 4)],
        &[key(C, 0, 4)],
    );
    let refused = unwritten(reader.map(|_| ()));
    assert_eq!(refused.failure, writer.failure());
    ledger.settle(writer);
    assert!(ledger.check_read(key(B, 0, 4)).is_ok());
    assert!(
        ledger.check_read(key(C, 0, 4)).is_err(),
        "the skipped launch's output stays claimed"
    );
}
