//! Hot-path allocation checks: drop_queue. Every upload's staging bytes and every
//! released slice are pushed, and the queue is flushed whenever the policy asks.

use bytes::Bytes;
use capture_core::ServerError;
use capture_core::drop_queue::{Fence, PendingDropQueue};

use crate::{allocations_during, assert_amortised};

pub(crate) const CHECKS: &[crate::Check] = &[
    ("drop_queue::push_static_bytes", push_static_bytes),
    ("drop_queue::push_shared_bytes", push_shared_bytes),
];

/// A fence the device has always passed.
struct Passed;

impl Fence for Passed {
    fn wait(self) -> Result<(), ServerError> {
        Ok(())
    }
}

/// Pushes `make()` `calls` times, flushing whenever the policy asks.
fn push_and_flush(q: &mut PendingDropQueue<Passed>, calls: usize, make: &impl Fn() -> Bytes) {
    for _ in 0..calls {
        if q.push(make()) {
            q.flush(|| Passed).unwrap();
        }
    }
}

fn check(what: &str, make: impl Fn() -> Bytes) {
    let mut q = PendingDropQueue::<Passed>::default();
    // Warmup: both buffers grow to the policy's 64 values.
    push_and_flush(&mut q, 200, &make);
    let n = allocations_during(|| push_and_flush(&mut q, 1_000, &make));
    assert_amortised(what, 1_000, n);
    q.drain(|| Passed).unwrap();
    assert!(q.is_empty());
}

fn push_static_bytes() {
    check("PendingDropQueue::push(Bytes::from_static)", || {
        Bytes::from_static(b"staging bytes of one upload")
    });
}

fn push_shared_bytes() {
    let shared = Bytes::from(vec![7_u8; 4096]);
    check("PendingDropQueue::push(Bytes::clone)", move || {
        shared.clone()
    });
}
