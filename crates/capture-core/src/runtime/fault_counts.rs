//! `FaultCounts`: per pooled stream, how many asynchronous errors its fences reported
//! (rule 15), counted by any thread that waits on them. Work lost with one may have held
//! info-word uploads, so a stream that sees its count moved since it last looked uploads
//! them again (`Inner::forget_lost_uploads`).

use std::sync::atomic::{AtomicU64, Ordering};

/// The device's asynchronous error counts, one per pooled stream.
#[derive(Debug)]
pub(crate) struct FaultCounts(Vec<AtomicU64>);

impl FaultCounts {
    /// Counts for `streams` pooled streams, all zero.
    pub(crate) fn new(streams: usize) -> Self {
        Self((0..streams).map(|_| AtomicU64::new(0)).collect())
    }

    /// Notes an asynchronous error reported for pooled stream `q`.
    pub(crate) fn note(&self, q: usize) {
        self.0[q].fetch_add(1, Ordering::Relaxed);
    }

    /// Whether pooled stream `q` reported an error since `seen` was updated, which it
    /// is now.
    pub(crate) fn moved_since(&self, q: usize, seen: &mut u64) -> bool {
        let now = self.0[q].load(Ordering::Relaxed);
        let moved = now != *seen;
        *seen = now;
        moved
    }
}
