//! Work a call leaves for the next call that holds none of the device's locks, each
//! list owned with the flag that says it may hold something (kept true exactly while it
//! does), so the common call reads one atomic and takes no lock:
//!
//! - [`Suspects`]: pooled streams an asynchronous error may have come from, met through
//!   another stream's device-side wait (rule 15), each asked by a host wait on its own
//!   fence (`Inner::settle_suspects`);
//! - [`ReleasedGraphs`]: graphs whose handles were dropped while this thread held one
//!   of the device's locks (rule 24), released by `Inner::reap`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::ids::GraphId;
use crate::lock_order::{Level, Ordered};

/// Pooled streams to ask about an error met through a wait on their work (rule 15). A
/// leaf lock.
#[derive(Debug, Default)]
pub(crate) struct Suspects {
    streams: Mutex<Vec<usize>>,
    pending: AtomicBool,
}

impl Suspects {
    /// Whether a stream may be waiting to be asked (no lock taken).
    pub(crate) fn pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// Adds each of `streams` not already there.
    pub(crate) fn add(&self, streams: impl IntoIterator<Item = usize>) {
        let mut suspects = Ordered::lock(&self.streams, Level::Suspects);
        for p in streams {
            if !suspects.contains(&p) {
                suspects.push(p);
            }
        }
        self.pending.store(!suspects.is_empty(), Ordering::Release);
    }

    /// The next stream to ask, taken off the list.
    pub(crate) fn next(&self) -> Option<usize> {
        let mut suspects = Ordered::lock(&self.streams, Level::Suspects);
        let next = suspects.pop();
        self.pending.store(!suspects.is_empty(), Ordering::Release);
        next
    }
}

/// Graphs whose handles were dropped inside the library's own work (rule 24). Locked
/// without an order level: it is pushed to while any of the device's locks is held,
/// and nothing is taken under it.
#[derive(Debug, Default)]
pub(crate) struct ReleasedGraphs {
    graphs: Mutex<Vec<GraphId>>,
    pending: AtomicBool,
}

impl ReleasedGraphs {
    /// Whether a graph may be waiting to be released (no lock taken).
    pub(crate) fn pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// Notes `graph` for the next call that holds no lock.
    pub(crate) fn push(&self, graph: GraphId) {
        let mut graphs = self.graphs.lock().unwrap_or_else(|p| p.into_inner());
        graphs.push(graph);
        self.pending.store(true, Ordering::Release);
    }

    /// Every graph noted, taken off the list.
    pub(crate) fn take(&self) -> Vec<GraphId> {
        let mut graphs = self.graphs.lock().unwrap_or_else(|p| p.into_inner());
        self.pending.store(false, Ordering::Release);
        std::mem::take(&mut *graphs)
    }
}
