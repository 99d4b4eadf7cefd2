//! Hot-path allocation checks: taint. Every launch enters and settles a scope on the
//! ranges it writes and propagates through its inputs, and every host read and write
//! checks or clears its range, so none of these may allocate per call once warm.
//!
//! Each ledger also tracks a never-written allocation and a partly claimed one, so the
//! checks run against claim lists and failure nodes that are not empty.

use capture_core::ServerError;
use capture_core::ids::{MemoryId, StreamId};
use capture_core::memory::ClaimKey;
use capture_core::range::ByteRange;
use capture_core::taint::TaintLedger;

use crate::{allocations_during, assert_amortised};

pub(crate) const CHECKS: &[crate::Check] = &[
    ("taint::enter_settle_two_keys", enter_settle_two_keys),
    ("taint::check_read_clean", check_read_clean),
    ("taint::host_write", host_write),
    ("taint::enter_fail_recover", enter_fail_recover),
    ("taint::propagate_clean_inputs", propagate_clean_inputs),
];

const CALLS: usize = 1_000;
const WARMUP: usize = 10;
const WRITTEN: MemoryId = MemoryId::new(0);
const PARTLY: MemoryId = MemoryId::new(1);
const NEVER: MemoryId = MemoryId::new(2);

fn key(memory: MemoryId, offset: u64, len: u64) -> ClaimKey {
    ClaimKey {
        memory,
        range: ByteRange::new(offset, len).unwrap(),
    }
}

/// `WRITTEN` clean, `PARTLY` never written but for its first half, `NEVER` never written.
fn ledger() -> TaintLedger {
    let mut ledger = TaintLedger::new();
    for memory in [WRITTEN, PARTLY, NEVER] {
        ledger.fresh(memory, 4096).unwrap();
    }
    ledger.host_write(key(WRITTEN, 0, 4096)).unwrap();
    ledger.host_write(key(PARTLY, 0, 2048)).unwrap();
    ledger
}

/// Counts 1,000 × (enter a scope writing two ranges of one allocation, settle it).
fn enter_settle_two_keys() {
    let mut ledger = ledger();
    let writes = [key(PARTLY, 0, 256), key(PARTLY, 1024, 1024)];
    let cycle = |ledger: &mut TaintLedger| {
        let scope = ledger.enter("matmul", writes).unwrap();
        ledger.settle(scope);
    };
    for _ in 0..WARMUP {
        cycle(&mut ledger);
    }
    let n = allocations_during(|| {
        for _ in 0..CALLS {
            cycle(&mut ledger);
        }
    });
    assert!(ledger.check_reads(writes).is_ok());
    assert_amortised("TaintLedger::enter + settle", CALLS, n);
}

/// Counts 1,000 × check_read of a clean range of an allocation claimed elsewhere.
fn check_read_clean() {
    let ledger = ledger();
    let read = key(PARTLY, 1024, 1024);
    let n = allocations_during(|| {
        for _ in 0..CALLS {
            assert!(ledger.check_read(read).is_ok());
        }
    });
    assert_amortised("TaintLedger::check_read (clean)", CALLS, n);
}

/// Counts 1,000 × host_write of a clean range of an allocation claimed elsewhere.
fn host_write() {
    let mut ledger = ledger();
    let write = key(PARTLY, 512, 1024);
    for _ in 0..WARMUP {
        ledger.host_write(write).unwrap();
    }
    let n = allocations_during(|| {
        for _ in 0..CALLS {
            ledger.host_write(write).unwrap();
        }
    });
    assert_amortised("TaintLedger::host_write", CALLS, n);
}

/// Counts the whole of 1,000 × (enter a scope, fail it, recover its bytes with a host
/// write), including building the error: `ServerError::graph_state` with two static
/// strings allocates nothing, so the count is the ledger's own (a failure node created
/// with its cause, its claim split out of and cleared from the claim list, the node
/// freed and its vectors recycled).
fn enter_fail_recover() {
    let mut ledger = ledger();
    let write = key(NEVER, 1024, 512);
    let cycle = |ledger: &mut TaintLedger| {
        let scope = ledger.enter("matmul", [write]).unwrap();
        ledger.fail(scope, ServerError::graph_state("matmul", "device lost"));
        ledger.host_write(write).unwrap();
    };
    for _ in 0..WARMUP {
        cycle(&mut ledger);
    }
    let n = allocations_during(|| {
        for _ in 0..CALLS {
            cycle(&mut ledger);
        }
    });
    assert!(ledger.check_read(write).is_ok());
    assert_eq!(ledger.failure_count(), 2, "only the never-written claims");
    assert_amortised("TaintLedger::enter + fail + host_write", CALLS, n);
}

/// Counts 1,000 × propagate through a launch whose inputs are clean (it runs).
fn propagate_clean_inputs() {
    let mut ledger = ledger();
    let (inputs, outputs) = (
        [key(WRITTEN, 0, 1024), key(PARTLY, 0, 1024)],
        [key(WRITTEN, 2048, 1024)],
    );
    let n = allocations_during(|| {
        for _ in 0..CALLS {
            assert!(
                ledger
                    .propagate("relu", StreamId::new(0), inputs, outputs)
                    .is_ok()
            );
        }
    });
    assert_amortised("TaintLedger::propagate (clean inputs)", CALLS, n);
}
