//! The process-wide capture state the mock models on CUDA's global capture mode: while
//! any mock stream in the process records, an allocation, a free or a kernel load from
//! any stream invalidates every recording (instantiate then fails as CUDA reports it).
//!
//! Also the registry that lets a copyable stream signal find its queue.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::queue::Queue;

static NEXT_STREAM: AtomicU64 = AtomicU64::new(0);
static RECORDING: Mutex<BTreeMap<u64, Option<String>>> = Mutex::new(BTreeMap::new());
static QUEUES: Mutex<Vec<Weak<Queue>>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A process-unique number for a new mock stream.
pub(crate) fn next_stream_key() -> u64 {
    NEXT_STREAM.fetch_add(1, Ordering::Relaxed)
}

/// `key` starts recording.
pub(crate) fn start_recording(key: u64) {
    lock(&RECORDING).insert(key, None);
}

/// `key` stops recording; why its recording was invalidated, if it was.
pub(crate) fn stop_recording(key: u64) -> Option<String> {
    lock(&RECORDING).remove(&key).flatten()
}

/// An unsafe call (in CUDA's global-mode sense) happened: every recording in the
/// process is invalidated, keeping the first reason.
pub(crate) fn unsafe_call(what: &str) {
    for reason in lock(&RECORDING).values_mut() {
        reason.get_or_insert_with(|| format!("{what} during stream capture"));
    }
}

/// Registers a queue and returns the signal that finds it.
pub(crate) fn register(queue: &Arc<Queue>) -> usize {
    let mut queues = lock(&QUEUES);
    match queues.iter().position(|q| q.strong_count() == 0) {
        Some(free) => {
            queues[free] = Arc::downgrade(queue);
            free
        }
        None => {
            queues.push(Arc::downgrade(queue));
            queues.len() - 1
        }
    }
}

/// The queue a signal names, while it lives.
pub(crate) fn queue(signal: usize) -> Option<Arc<Queue>> {
    lock(&QUEUES).get(signal).and_then(Weak::upgrade)
}
