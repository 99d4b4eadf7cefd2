//! The crate-private bookkeeping the microbenchmarks (`benches/bookkeeping.rs`) drive
//! directly, behind the non-default `bench-internals` feature. Not an API: nothing here is
//! stable, and a normal build does not compile this file.
//!
//! What the crate already exports ([`StreamCapture`](crate::backend::StreamCapture),
//! [`MetadataInfoCache`](crate::backend::MetadataInfoCache),
//! [`PendingDropQueue`](crate::backend::PendingDropQueue), bindings and claim keys) the
//! benchmarks take from [`backend`](crate::backend). This module adds only what is
//! `pub(crate)`: thin wrappers that forward to the taint ledger and the order tracks
//! without changing their visibility, and a way to make an allocation's handle without a
//! memory manager.

use crate::error::ServerError;
use crate::ids::{FailureId, MemoryId};
use crate::memory::{ClaimKey, ManagedMemoryHandle};
use crate::op::Op;

/// An owning handle to a fresh allocation `id` of `size` bytes, held by no manager.
pub fn handle(id: MemoryId, size: u64) -> ManagedMemoryHandle {
    ManagedMemoryHandle::fresh(id, size)
}

/// The device-wide taint ledger (`taint.rs`), forwarded.
#[derive(Debug, Default)]
pub struct TaintLedger(crate::taint::TaintLedger);

/// A work scope [`TaintLedger::enter`] opened, for [`TaintLedger::settle`].
#[derive(Debug)]
pub struct Scope(crate::taint::Scope);

impl TaintLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self(crate::taint::TaintLedger::new())
    }

    /// Tracks a fresh allocation, claimed whole as never written.
    ///
    /// # Errors
    ///
    /// As the ledger's `fresh`: a zero size, or an allocation tracked already.
    #[inline]
    pub fn fresh(&mut self, memory: MemoryId, size: u64) -> Result<FailureId, ServerError> {
        self.0.fresh(memory, size)
    }

    /// The host wrote exactly `key`: its bytes become clean.
    ///
    /// # Errors
    ///
    /// As the ledger's `host_write`: unknown memory, or a key past its allocation.
    #[inline]
    pub fn host_write(&mut self, key: ClaimKey) -> Result<(), ServerError> {
        self.0.host_write(key)
    }

    /// Opens a work scope claiming `writes` provisionally (what a replay does on entry).
    ///
    /// # Errors
    ///
    /// As the ledger's `enter`: unknown memory, or a key past its allocation.
    #[inline]
    pub fn enter(
        &mut self,
        op: Op,
        writes: impl IntoIterator<Item = ClaimKey>,
    ) -> Result<Scope, ServerError> {
        self.0.enter(op, writes).map(Scope)
    }

    /// Settles a scope whose work succeeded (what a replay does once enqueued).
    #[inline]
    pub fn settle(&mut self, scope: Scope) {
        self.0.settle(scope.0);
    }

    /// Checks that nothing claims a byte of `key` (what a host read does first).
    ///
    /// # Errors
    ///
    /// As the ledger's `check_read`: claimed bytes, unknown memory, a key past its
    /// allocation.
    #[inline]
    pub fn check_read(&mut self, key: ClaimKey) -> Result<(), ServerError> {
        self.0.check_read(key)
    }
}

/// The device-wide cross-stream order tracks (`runtime/order.rs`), forwarded.
#[derive(Debug)]
pub struct Tracks(crate::runtime::Tracks);

impl Tracks {
    /// Tracks for `streams` pooled streams.
    pub fn new(streams: usize) -> Self {
        Self(crate::runtime::Tracks::new(streams))
    }

    /// Pooled stream `on` enqueued one operation reading `reads` and writing `writes`.
    #[inline]
    pub fn used(
        &mut self,
        on: usize,
        reads: impl IntoIterator<Item = MemoryId>,
        writes: impl IntoIterator<Item = MemoryId>,
    ) {
        self.0.used(on, reads, writes);
    }

    /// A good fence of `q` stamped `epoch` was waited for on the host.
    #[inline]
    pub fn good(&mut self, q: usize, epoch: u64) {
        self.0.good(q, epoch);
    }

    /// The ordering check a launch, a replay or a read makes: into `out`, the other
    /// streams `on` must follow before it reads `reads` and writes `writes`.
    #[inline]
    pub fn deps(
        &self,
        on: usize,
        reads: impl IntoIterator<Item = MemoryId>,
        writes: impl IntoIterator<Item = MemoryId>,
        out: &mut Vec<(usize, u64)>,
    ) {
        self.0.deps(on, reads, writes, out);
    }
}
