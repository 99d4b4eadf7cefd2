//! `PendingDropQueue`: frees what the device may still read or write only once a fence
//! says the device is past it.
//!
//! Anything a launch or a copy names (host staging bytes, slices, a graph's executable
//! and pins) must outlive the device work that uses it, not just the host call that
//! enqueued that work. Such values are pushed here instead of being dropped.
//!
//! The queue is double buffered:
//! - [`push`](PendingDropQueue::push) *stages* a value.
//! - [`flush`](PendingDropQueue::flush) waits on the fence recorded by the previous
//!   flush and frees what that flush moved to *pending*, then moves the staged values to
//!   pending behind a freshly recorded fence.
//!
//! So a value is held for at most two flush cycles, and the hot path never waits on the
//! fence it has just recorded: by the time the next flush waits on it, the device has
//! usually long passed it.
//!
//! The queue is not internally synchronised; it is [`Send`] when its fence is.

use std::any::Any;
use std::fmt;

use bytes::Bytes;

use crate::error::ServerError;
use crate::memory::{ManagedMemoryBinding, ManagedMemoryHandle};

/// A point on a stream, recorded after the work that uses the values it guards.
pub trait Fence {
    /// Blocks until the device has passed this point.
    ///
    /// # Errors
    ///
    /// The asynchronous device error the stream reported, if any. The work behind the
    /// fence is over either way (a faulted stream reads and writes nothing more), so the
    /// queue frees what the fence guards and hands the error to its caller.
    fn wait(self) -> Result<(), ServerError>;
}

/// One value the device may still read or write, held until a fence says it is done.
///
/// Host bytes, bindings and handles are held as they are, so pushing one allocates
/// nothing; anything else is boxed.
pub enum Pending {
    /// Host bytes a copy reads from (staging for an upload).
    Host(Bytes),
    /// A non-owning binding keeping a slice out of its pool.
    Binding(ManagedMemoryBinding),
    /// An owning handle to a slice.
    Handle(ManagedMemoryHandle),
    /// Any other value: a graph's executable, its pins, a backend resource.
    Other {
        /// The value, dropped when the fence is passed.
        value: Box<dyn Any + Send>,
        /// The bytes it accounts for in [`PendingDropQueue::bytes`].
        bytes: u64,
    },
}

impl Pending {
    /// Any other value, accounting for `bytes` bytes.
    pub fn other(value: impl Any + Send, bytes: u64) -> Self {
        Self::Other {
            value: Box::new(value),
            bytes,
        }
    }

    /// The bytes this value holds: the length of host bytes, the size of a slice, or
    /// what was given for any other value.
    pub fn bytes(&self) -> u64 {
        match self {
            Self::Host(b) => u64::try_from(b.len()).unwrap_or(u64::MAX),
            Self::Binding(b) => b.size(),
            Self::Handle(h) => h.size(),
            Self::Other { bytes, .. } => *bytes,
        }
    }
}

impl fmt::Debug for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Host(b) => write!(f, "Host({} B)", b.len()),
            Self::Binding(b) => write!(f, "{b:?}"),
            Self::Handle(h) => write!(f, "{h:?}"),
            Self::Other { bytes, .. } => write!(f, "Other({bytes} B)"),
        }
    }
}

impl From<Bytes> for Pending {
    fn from(value: Bytes) -> Self {
        Self::Host(value)
    }
}

impl From<ManagedMemoryBinding> for Pending {
    fn from(value: ManagedMemoryBinding) -> Self {
        Self::Binding(value)
    }
}

impl From<ManagedMemoryHandle> for Pending {
    fn from(value: ManagedMemoryHandle) -> Self {
        Self::Handle(value)
    }
}

impl From<Box<dyn Any + Send>> for Pending {
    /// A boxed value accounting for no bytes.
    fn from(value: Box<dyn Any + Send>) -> Self {
        Self::Other { value, bytes: 0 }
    }
}

/// When [`PendingDropQueue::push`] asks for a flush: once the staged values reach either
/// limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushingPolicy {
    max_items: usize,
    max_bytes: u64,
}

impl FlushingPolicy {
    /// Staged values that ask for a flush by default.
    pub const DEFAULT_MAX_ITEMS: usize = 64;
    /// Staged bytes that ask for a flush by default (64 MiB).
    pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;

    /// Flush once `max_items` values or `max_bytes` bytes are staged.
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] naming the value when either limit is zero.
    pub fn new(max_items: usize, max_bytes: u64) -> Result<Self, ServerError> {
        if max_items == 0 {
            return Err(ServerError::invalid(
                "drop queue max_items",
                max_items,
                "a flush must be allowed to hold at least one value",
            ));
        }
        if max_bytes == 0 {
            return Err(ServerError::invalid(
                "drop queue max_bytes",
                max_bytes,
                "a flush must be allowed to hold at least one byte",
            ));
        }
        Ok(Self {
            max_items,
            max_bytes,
        })
    }

    /// Staged values that ask for a flush.
    pub const fn max_items(self) -> usize {
        self.max_items
    }

    /// Staged bytes that ask for a flush.
    pub const fn max_bytes(self) -> u64 {
        self.max_bytes
    }
}

impl Default for FlushingPolicy {
    fn default() -> Self {
        Self {
            max_items: Self::DEFAULT_MAX_ITEMS,
            max_bytes: Self::DEFAULT_MAX_BYTES,
        }
    }
}

/// Values the device may still use, freed only behind a fence (see the module docs).
///
/// Drop the queue only after [`drain`](Self::drain): dropping it waits for the fence it
/// holds (which covers the pending values), but staged values have no fence yet and are
/// freed at once.
pub struct PendingDropQueue<F: Fence> {
    policy: FlushingPolicy,
    staged: Vec<Pending>,
    staged_bytes: u64,
    pending: Vec<Pending>,
    pending_bytes: u64,
    /// Recorded when `staged` moved to `pending`; `None` with pending values only if
    /// recording it panicked.
    fence: Option<F>,
}

impl<F: Fence> PendingDropQueue<F> {
    /// An empty queue that asks for a flush as `policy` says.
    pub fn new(policy: FlushingPolicy) -> Self {
        Self {
            policy,
            staged: Vec::new(),
            staged_bytes: 0,
            pending: Vec::new(),
            pending_bytes: 0,
            fence: None,
        }
    }

    /// The policy [`push`](Self::push) and [`should_flush`](Self::should_flush) follow.
    pub fn policy(&self) -> FlushingPolicy {
        self.policy
    }

    /// Stages `item` until the next flush. Returns whether the policy asks for a flush
    /// now (as [`should_flush`](Self::should_flush)).
    ///
    /// Allocates nothing for host bytes, bindings and handles beyond amortised growth.
    pub fn push(&mut self, item: impl Into<Pending>) -> bool {
        let item = item.into();
        self.staged_bytes = self.staged_bytes.saturating_add(item.bytes());
        self.staged.push(item);
        self.should_flush()
    }

    /// Whether a fence recorded by the last flush waits for the next one.
    pub fn has_fence(&self) -> bool {
        self.fence.is_some()
    }

    /// Whether the staged values reach the policy's item or byte limit.
    pub fn should_flush(&self) -> bool {
        self.staged.len() >= self.policy.max_items || self.staged_bytes >= self.policy.max_bytes
    }

    /// Frees the values the previous flush moved to pending, once the fence it recorded
    /// is passed, then moves the staged values to pending behind a fence recorded now by
    /// `fence` (called only when something was staged).
    ///
    /// Never waits on the fence it records. Should pending values have no fence (its
    /// recording panicked, or its wait failed), one is recorded and waited on at once; it
    /// covers the staged values too, so those are freed as well.
    ///
    /// # Errors
    ///
    /// The error of the fence waited on. The device may not be done with the values it
    /// guarded (a refused wait ran nothing), so they are kept, with the staged values,
    /// behind a fence recorded now, for a later wait to free (rule 19); the caller taints
    /// what the stream wrote.
    pub fn flush(&mut self, fence: impl FnOnce() -> F) -> Result<(), ServerError> {
        if let Some(previous) = self.fence.take() {
            match previous.wait() {
                Ok(()) => {
                    self.free_pending();
                    self.stage_behind(fence);
                    Ok(())
                }
                Err(error) => {
                    self.keep_all();
                    self.fence = Some(fence());
                    Err(error)
                }
            }
        } else if !self.pending.is_empty() {
            tracing::warn!(
                pending = self.pending.len(),
                "pending drops without a fence: recording one and waiting on it"
            );
            let waited = fence().wait();
            if waited.is_ok() {
                self.free_pending();
                self.free_staged();
            } else {
                self.keep_all();
            }
            waited
        } else {
            self.stage_behind(fence);
            Ok(())
        }
    }

    /// Frees everything now: waits on the previous fence and frees pending values, then
    /// records one fence with `fence` (only when something else is held), waits on it
    /// and frees the rest. Afterwards the queue holds nothing, unless a wait failed.
    ///
    /// # Errors
    ///
    /// The first error of the fences waited on. Values no successful wait covered are
    /// kept, pending with no fence, so the next flush or drain waits for them again.
    pub fn drain(&mut self, fence: impl FnOnce() -> F) -> Result<(), ServerError> {
        let mut first = Ok(());
        if let Some(previous) = self.fence.take() {
            first = previous.wait();
            if first.is_ok() {
                self.free_pending();
            }
        }
        // Staged values, and pending ones whose fence was never recorded or failed: the
        // fence recorded now covers them all.
        if !self.is_empty() {
            let waited = fence().wait();
            if waited.is_ok() {
                self.free_pending();
                self.free_staged();
            } else {
                self.keep_all();
            }
            first = keep_first(first, waited);
        }
        first
    }

    /// Frees everything held without waiting on a fence: the caller has just waited for
    /// everything enqueued on the stream (a read or a sync that succeeded), so no fence
    /// could tell it more. The previous fence, already passed, is dropped unwaited.
    pub fn retire_waited(&mut self) {
        self.fence = None;
        self.free_pending();
        self.free_staged();
    }

    /// Keeps every value held, pending with no fence: a wait failed, so the device may
    /// still use them.
    fn keep_all(&mut self) {
        self.pending.append(&mut self.staged);
        self.pending_bytes = self
            .pending_bytes
            .saturating_add(std::mem::take(&mut self.staged_bytes));
    }

    /// Values held, staged and pending.
    pub fn len(&self) -> usize {
        self.staged.len() + self.pending.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.staged.is_empty() && self.pending.is_empty()
    }

    /// Values staged for the next flush.
    pub fn staged_len(&self) -> usize {
        self.staged.len()
    }

    /// Values waiting behind the fence the last flush recorded.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Bytes held, staged and pending.
    pub fn bytes(&self) -> u64 {
        self.staged_bytes.saturating_add(self.pending_bytes)
    }

    /// Bytes staged for the next flush.
    pub fn staged_bytes(&self) -> u64 {
        self.staged_bytes
    }

    /// Moves the staged values (if any) to pending, which must be empty, and records the
    /// fence that guards them.
    fn stage_behind(&mut self, fence: impl FnOnce() -> F) {
        debug_assert!(self.pending.is_empty() && self.fence.is_none());
        if self.staged.is_empty() {
            return;
        }
        // Swapping keeps both buffers' capacity: the steady state allocates nothing.
        std::mem::swap(&mut self.staged, &mut self.pending);
        self.pending_bytes = std::mem::take(&mut self.staged_bytes);
        // Recorded after the move: should recording panic, the next flush finds pending
        // values without a fence and waits before freeing them.
        self.fence = Some(fence());
    }

    fn free_pending(&mut self) {
        self.pending.clear();
        self.pending_bytes = 0;
    }

    fn free_staged(&mut self) {
        self.staged.clear();
        self.staged_bytes = 0;
    }
}

fn keep_first(
    first: Result<(), ServerError>,
    then: Result<(), ServerError>,
) -> Result<(), ServerError> {
    match (first, then) {
        (Err(e), Err(later)) => {
            tracing::warn!(error = %later, "a further fence error while draining");
            Err(e)
        }
        (Err(e), Ok(())) | (Ok(()), Err(e)) => Err(e),
        (Ok(()), Ok(())) => Ok(()),
    }
}

impl<F: Fence> Default for PendingDropQueue<F> {
    fn default() -> Self {
        Self::new(FlushingPolicy::default())
    }
}

impl<F: Fence> fmt::Debug for PendingDropQueue<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingDropQueue")
            .field("policy", &self.policy)
            .field("staged", &self.staged.len())
            .field("staged_bytes", &self.staged_bytes)
            .field("pending", &self.pending.len())
            .field("pending_bytes", &self.pending_bytes)
            .field("fenced", &self.fence.is_some())
            .finish()
    }
}

impl<F: Fence> Drop for PendingDropQueue<F> {
    fn drop(&mut self) {
        if let Some(fence) = self.fence.take()
            && let Err(e) = fence.wait()
        {
            tracing::warn!(error = %e, "fence error while dropping the drop queue");
        }
        if !self.staged.is_empty() {
            tracing::warn!(
                staged = self.staged.len(),
                "drop queue dropped with staged values and no fence: drain it first"
            );
        }
    }
}

#[cfg(test)]
mod tests;
