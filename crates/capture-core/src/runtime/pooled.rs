//! `PooledStream`: one backend stream and the runtime's bookkeeping beside it.

use std::borrow::Cow;
use std::sync::Arc;

use crate::id_hash::{IdMap, IdSet};

use super::membership::PoolMember;
use super::scratch::LaunchScratch;
use super::stream_graphs::StreamGraphs;
use super::use_memo::UseMemo;

use crate::capture::{Lane, Window};
use crate::driver::{Backend, DeviceResource, DeviceStream};
use crate::drop_queue::{FlushingPolicy, PendingDropQueue};
use crate::ids::{GraphId, KernelId, MemoryId};
use crate::memory::{ClaimKey, ManagedMemoryHandle};

/// One pooled backend stream, the graphs captured on it, and the runtime's scratch.
pub(crate) struct PooledStream<B: Backend> {
    /// Frees deferred until the device is known to be done with them, behind the fences
    /// this stream records. Declared first: it is emptied, then dropped, before the
    /// backend stream it waits on.
    pub(crate) drops: PendingDropQueue<<B::Stream as DeviceStream>::Fence>,
    /// The stream's epoch when the drop queue's current fence was recorded: a flush that
    /// waits for it successfully settles what the stream wrote up to there (rule 15).
    pub(crate) drops_epoch: u64,
    /// The asynchronous errors of this stream its info cache has accounted for
    /// (`Inner::forget_lost_uploads`).
    pub(crate) faults_seen: u64,
    pub(crate) stream: B::Stream,
    pub(crate) index: usize,
    /// Memory whose binding this stream's drop queue holds since its last flush: queued
    /// work uses it, so it stays allocated until a fence after that work (rule 19).
    pub(crate) held: IdSet<MemoryId>,
    /// The uses its eager launches stamped in the order tracks since they last changed,
    /// all of them held (`use_memo.rs`).
    pub(crate) memo: UseMemo,
    /// Scratch: the other streams an operation must follow.
    pub(crate) deps: Vec<(usize, u64)>,
    /// Graphs captured on this stream, which replay only here, with their slots and
    /// loops and what the open window recorded of those.
    pub(crate) graphs: StreamGraphs<B>,
    /// Which of them are members of a graph pool, and what their replays take from the
    /// other members (rule 23).
    pub(crate) members: IdMap<GraphId, PoolMember>,
    /// Replay scratch: the other members' bytes a replay overwrites.
    pub(crate) taken: Vec<ClaimKey>,
    /// Ids the memory managers took back, for the taint ledger to forget.
    pub(crate) freed: Vec<MemoryId>,
    /// The kernel this stream's last launch loaded, with its name (`loaded_kernel`).
    pub(crate) last_kernel: Option<(KernelId, Arc<B::Kernel>, Cow<'static, str>)>,
    /// The launch path's scratch, reused so a launch allocates nothing.
    /// Boxed, so a launch takes it out and puts it back as one pointer.
    pub(crate) scratch: Option<Box<LaunchScratch<DeviceResource<B::Stream>>>>,
}

impl<B: Backend> Drop for PooledStream<B> {
    fn drop(&mut self) {
        // What the queue holds is freed once the device is done with it, while the
        // stream still exists to wait on (a recording stream records no fence: its
        // queue is dropped as it is, before the backend stream tears down).
        if !self.stream.capturing().is_recording() {
            let signal = self.stream.signal();
            let _ = self
                .drops
                .drain(|| <B::Stream as DeviceStream>::fence(signal));
        }
    }
}

impl<B: Backend> PooledStream<B> {
    /// Brings the stream to rest before any stream of the device is torn down: a window
    /// still open is closed (the driver capture ended, its recording discarded), then
    /// everything queued is waited for and the drop queue freed. Another stream's
    /// queued work may use this stream's memory, so a device finishes every stream
    /// before it drops any (rule 19).
    pub(crate) fn finish(&mut self) {
        if let Some(owner) = self.stream.capturing().owner() {
            let mut window = Window::<B>::on(&mut self.stream, &mut self.drops);
            // No graph is registered: a window closed at teardown seals nothing.
            let _ = window.instantiate(owner, GraphId::new(u64::MAX));
        }
        if let Err(error) = B::sync(&mut self.stream) {
            tracing::warn!(target: "capture", index = self.index, %error, "a stream failed to finish at teardown");
        }
        let signal = self.stream.signal();
        if let Err(error) = self
            .drops
            .drain(|| <B::Stream as DeviceStream>::fence(signal))
        {
            tracing::warn!(target: "capture", index = self.index, %error, "a stream's last fence failed at teardown");
        }
        self.clear_held();
    }

    /// The lane of the window the next operation records on (rule 28), as the core's
    /// admission of the call chose it: what the backend's recording calls are handed.
    /// [`Lane::ORIGIN`] while no window records.
    pub(crate) fn lane(&mut self) -> Lane {
        let capture = self.stream.capturing();
        if capture.is_recording() {
            capture.lane()
        } else {
            Lane::ORIGIN
        }
    }

    /// The launch path's scratch (there whenever no launch has it out).
    pub(crate) fn scratch_mut(&mut self) -> &mut LaunchScratch<DeviceResource<B::Stream>> {
        self.scratch.get_or_insert_with(Box::default)
    }

    /// Forgets what the drop queue holds for queued work (it was just flushed or
    /// drained), and with it the uses memo, whose buffers it held.
    pub(crate) fn clear_held(&mut self) {
        self.held.clear();
        self.memo.forget();
    }

    pub(crate) fn new(stream: B::Stream, index: usize, drop_policy: FlushingPolicy) -> Self {
        Self {
            stream,
            index,
            drops: PendingDropQueue::new(drop_policy),
            drops_epoch: 0,
            faults_seen: 0,
            held: IdSet::default(),
            memo: UseMemo::default(),
            deps: Vec::new(),
            graphs: StreamGraphs::default(),
            members: IdMap::default(),
            taken: Vec::new(),
            freed: Vec::new(),
            last_kernel: None,
            scratch: Some(Box::default()),
        }
    }

    /// Keeps `handle`'s memory allocated until a fence after the work just enqueued
    /// here: its drop queue holds a binding of it (once per flush).
    pub(crate) fn hold(&mut self, handle: &ManagedMemoryHandle) {
        if self.held.insert(handle.id()) {
            self.drops.push(handle.binding());
        }
    }

    /// Moves the ids both memory managers took back into `freed`.
    pub(crate) fn collect_freed(&mut self) {
        self.stream.device_memory().take_freed(&mut self.freed);
        self.stream.host_memory().take_freed(&mut self.freed);
    }
}
