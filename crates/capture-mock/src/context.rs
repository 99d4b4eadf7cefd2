//! The driver context the mock models on CUDA's relaxed capture mode.
//!
//! A [`Context`] is what one mock backend value (and its clones) shares: every device
//! built on it sits on the same context, as devices on one CUDA context do. Its
//! recordings follow relaxed mode's rules:
//! - an allocation is tolerated (relaxed mode does not check "potentially unsafe" calls,
//!   and `cuMemAlloc` enqueues nothing);
//! - a free or a module load invalidates every recording of the context: `cuMemFree`
//!   synchronises the context and a load may, which a capture cannot contain; relaxed
//!   mode only stops the driver from checking, so the mock checks that the core never
//!   makes them;
//! - a sync, a read or a host wait on a capturing stream, or an event recorded on one,
//!   invalidates that stream's capture (calls that necessarily conflict with capture);
//! - another context's calls touch nothing here, and a capture may end on any thread.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::lock::lock;

/// One driver context: which of its streams record, and why a recording was
/// invalidated.
#[derive(Debug, Default)]
pub(crate) struct Context {
    recording: Mutex<BTreeMap<u64, Option<String>>>,
}

impl Context {
    /// A context of its own.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Stream `key` starts recording.
    pub(crate) fn start_recording(&self, key: u64) {
        lock(&self.recording).insert(key, None);
    }

    /// Stream `key` stops recording; why its recording was invalidated, if it was.
    pub(crate) fn stop_recording(&self, key: u64) -> Option<String> {
        lock(&self.recording).remove(&key).flatten()
    }

    /// A call that no capture of the context may overlap (a free, a module load)
    /// happened: every recording of the context is invalidated, keeping the first reason.
    pub(crate) fn conflicts_with_all(&self, what: &str) {
        for reason in lock(&self.recording).values_mut() {
            reason.get_or_insert_with(|| format!("{what} during stream capture"));
        }
    }

    /// A call that conflicts with stream `key`'s capture happened (a sync, read or host
    /// wait of the capturing stream, an event recorded on it): that capture is
    /// invalidated, keeping the first reason.
    pub(crate) fn conflicts_with(&self, key: u64, what: &str) {
        if let Some(reason) = lock(&self.recording).get_mut(&key) {
            reason.get_or_insert_with(|| format!("{what} during stream capture"));
        }
    }
}
