//! `Inner`: the state a [`Device`](super::Device) shares with its pooled streams (the
//! streams themselves, the device-wide capture status, taint ledger, graph and kernel
//! registries, trace and launch limits), and the helpers every operation uses: neighbour
//! refusal, dooming a window, claims, asynchronous faults, flushes and drains, device
//! reservations, staging, and the hand-over to another pooled stream.

use std::sync::{Arc, Mutex};

use super::branch_table::{BranchEntry, Branches};
use super::buffer::Buffer;
use super::cell::StreamCell;
use super::config::DeviceConfig;
use super::fault_counts::FaultCounts;
use super::graph_registry::GraphRegistry;
use super::imports::Imports;
use super::order::{Order, Tracks};
use super::pending::{ReleasedGraphs, Suspects};
use super::pooled::PooledStream;
use super::registry::KernelRegistry;
use crate::branch_refusal::{BranchReason, BranchRefused};
use crate::capture::{DeviceCaptures, Lane};
use crate::driver::{Backend, DeviceResource, DeviceStream};
use crate::drop_queue::Fence;
use crate::error::ServerError;
use crate::ids::{FailureId, StreamId};
use crate::kernel::LaunchLimits;
use crate::label::Labels;
use crate::lock_order::{Level, Ordered};
use crate::memory::{ClaimKey, ManagedMemoryHandle};
use crate::op::Op;
use crate::range::ByteRange;
use crate::report::{GraphLedger, GraphPoolLedger};
use crate::subject::Subject;
use crate::taint::TaintLedger;
use crate::trace::{Event, Trace};

/// The calls that open, close or replay a window: the origin's, never a branch's.
const LIFECYCLE: [&str; 5] = ["prepare", "begin", "end", "abort", "replay"];

pub(crate) struct Inner<B: Backend> {
    pub(crate) backend: Arc<B>,
    pub(crate) serial: u64,
    pub(crate) cells: Vec<StreamCell<B>>,
    pub(crate) captures: DeviceCaptures,
    pub(crate) taint: Mutex<TaintLedger>,
    pub(crate) graphs: Mutex<GraphRegistry>,
    pub(crate) kernels: Mutex<KernelRegistry<B>>,
    pub(crate) trace: Trace,
    pub(crate) config: DeviceConfig,
    /// What the backend said this device can bind and run, asked once.
    pub(crate) limits: LaunchLimits,
    /// Each pooled stream's signal, so any thread can record a fence on it.
    pub(crate) signals: Vec<<B::Stream as DeviceStream>::Signal>,
    /// Cross-stream order and the ranges written since each stream's last good fence,
    /// with the version a uses memo reads.
    pub(crate) tracks: Order,
    /// Per pooled stream, how many asynchronous errors its fences reported: work lost
    /// with one may have held info-word uploads, which the stream then uploads again
    /// (`forget_lost_uploads`).
    pub(crate) faults: FaultCounts,
    /// The labels of the user's buffers and graphs, beside their ids in errors.
    pub(crate) labels: Labels,
    /// Graphs whose handles were dropped while this thread held one of the device's
    /// locks (a handle inside a user's work or kept object, released as a stream
    /// drains): released by the next call that holds none (`reap`).
    pub(crate) released: ReleasedGraphs,
    /// The streams forked into a window now, and the pooled streams lent to one (rule
    /// 28). A leaf lock.
    pub(crate) branches: Branches,
    /// The live imports of the caller's memory, by where each lies: a second import of
    /// bytes one covers is refused. A leaf lock.
    pub(crate) imports: Mutex<Imports>,
    /// Pooled streams whose work an asynchronous error may have come from, met through
    /// another stream's device-side wait on it (rule 15): each is asked, by a host wait
    /// on its own fence, once the call that met the error holds nothing
    /// (`settle_suspects`). A leaf lock.
    pub(crate) suspects: Suspects,
}

impl<B: Backend> Drop for Inner<B> {
    fn drop(&mut self) {
        // Every stream finishes before any is dropped (and with it its memory): queued
        // work on one stream may read another's pages (rule 19).
        for cell in &self.cells {
            cell.run_capture_call(PooledStream::finish);
        }
        // Its pages (in the streams' storages) and modules (in the kernel registry) go
        // only while no window of the driver context records: the domain keeps them
        // until its last window closes otherwise (rule 25).
        let cells = std::mem::take(&mut self.cells);
        let kernels = std::mem::replace(
            &mut *self.kernels.lock().unwrap_or_else(|p| p.into_inner()),
            KernelRegistry::new(),
        );
        self.captures.status().leave_domain();
        let domain = self.captures.status().domain().clone();
        if !domain.release_at_rest(Box::new((cells, kernels))) {
            tracing::debug!(
                target: "capture",
                kind = "teardown deferred",
                "a device dropped while a window of its driver context records keeps its \
                 pages and modules until the last window closes"
            );
        }
    }
}

/// A fence on pooled stream `stream`, covering its work up to `epoch`.
pub(crate) struct Stamped<F> {
    pub(crate) stream: usize,
    pub(crate) epoch: u64,
    pub(crate) fence: F,
}

impl<B: Backend> Inner<B> {
    /// The pooled stream `stream`'s work goes to: its own, or, while it is a branch of
    /// a window (rule 28), the window's.
    #[inline]
    pub(crate) fn pooled(&self, stream: StreamId) -> usize {
        match self.branches.entry(stream) {
            Some(entry) => entry.pooled,
            None => self.home(stream),
        }
    }

    /// The pooled stream `stream` folds onto, whatever window it is a branch of.
    pub(crate) fn home(&self, stream: StreamId) -> usize {
        (stream.index() % self.cells.len() as u64) as usize
    }

    /// The entry of `stream`, while it is a branch of a window.
    pub(crate) fn entry(&self, stream: StreamId) -> Option<BranchEntry> {
        self.branches.entry(stream)
    }

    /// The origin of the window pooled stream `home` is lent to as a branch's.
    pub(crate) fn lent(&self, home: usize) -> Option<StreamId> {
        self.branches.lent(home)
    }

    /// Rule 22 for `op` on `stream`: refused while this thread runs the capture closure
    /// of another stream of the device, unless `stream` is a branch of its window.
    #[inline]
    pub(crate) fn closure_check(
        &self,
        stream: StreamId,
        op: &'static str,
    ) -> Result<(), ServerError> {
        super::closure::ClosureScope::check(self.serial, stream, None, op).or_else(|error| {
            let origin = self.entry(stream).map(|r| r.origin);
            match origin {
                Some(_) => super::closure::ClosureScope::check(self.serial, stream, origin, op),
                None => Err(error),
            }
        })
    }

    /// Releases the branches of `ps`'s window once it has none (ended, aborted,
    /// refused): their streams go back to their own pooled streams.
    pub(crate) fn release_branches(&self, ps: &mut PooledStream<B>) {
        if !ps.stream.capturing().is_active() {
            self.branches.release(ps.index);
        }
    }

    /// Runs `f` on `stream`'s pooled stream, under its lock, on the caller's thread.
    pub(crate) fn on_stream<R>(
        &self,
        stream: StreamId,
        f: impl FnOnce(&mut PooledStream<B>) -> R,
    ) -> R {
        self.reap();
        let result = self.cells[self.pooled(stream)].run(f);
        self.settle_suspects(stream);
        result
    }

    /// Asks each stream an asynchronous error may have come from through a device-side
    /// wait (rule 15): a host wait on its fence claims what it wrote since its last good
    /// fence when the error was its own (the driver reports it there too: CUDA's errors
    /// are sticky, a lost Vulkan device is lost for every queue, the mock keeps it for
    /// the failed stream's next wait), and settles its work otherwise. Only while this
    /// thread holds none of the device's locks; `stream` is the caller, named in the
    /// trace.
    pub(crate) fn settle_suspects(&self, stream: StreamId) {
        if !self.suspects.pending() || crate::lock_order::holds_any() {
            return;
        }
        while let Some(q) = self.suspects.next() {
            if let Some(stamped) = self.fence_of(q) {
                // An error here claims q's writes (and names the streams q waited on in
                // turn); the caller already has the error it met.
                let _ = self.wait_stamped(stamped, stream);
            }
        }
    }

    /// Releases the graphs whose handles were dropped while a lock was held, unless this
    /// thread holds one now (rule 24: a handle's drop never takes a lock in the middle of
    /// the library's own work).
    pub(crate) fn reap(&self) {
        if !self.released.pending() || crate::lock_order::holds_any() {
            return;
        }
        for graph in self.released.take() {
            let _ = self.drop_graph(graph);
        }
    }

    /// Runs `f`, which may open or close the driver capture, on `stream`'s pooled stream:
    /// on its worker for a thread-affine backend, else on the caller's thread.
    pub(crate) fn on_capture_stream<R: Send + 'static>(
        &self,
        stream: StreamId,
        f: impl FnOnce(&mut PooledStream<B>) -> R + Send + 'static,
    ) -> R {
        self.reap();
        let result = self.cells[self.pooled(stream)].run_capture_call(f);
        self.settle_suspects(stream);
        result
    }

    pub(crate) fn taint(&self) -> Ordered<'_, TaintLedger> {
        Ordered::lock(&self.taint, Level::Taint)
    }

    pub(crate) fn check_buffer(&self, buffer: &Buffer) -> Result<(), ServerError> {
        if buffer.device != self.serial {
            return Err(ServerError::InvalidBinding {
                buffer: Box::new(Subject::buffer(buffer.id())),
                reason: "the buffer belongs to another device".into(),
            });
        }
        Ok(())
    }

    /// Every live graph's ledger, each one's marginal bytes counted against the others,
    /// and the bytes held for graphs alone that several of them pin (each once).
    pub(crate) fn ledgers(&self) -> (Vec<GraphLedger>, u64) {
        let (ledgers, shared, _) = self.ledgers_and_pools();
        (ledgers, shared)
    }

    /// [`ledgers`](Self::ledgers), and each graph pool's ledger (rule 23).
    pub(crate) fn ledgers_and_pools(&self) -> (Vec<GraphLedger>, u64, Vec<GraphPoolLedger>) {
        self.registry().ledgers()
    }

    /// Admits `stream`'s call `op` onto its pooled stream `ps`: refuses a neighbour of
    /// an active window there (rule 13) and a neighbour of a branch (rule 28), and
    /// returns the lane of the window the call records on (the origin's, or the lane of
    /// a branch's work), which the window's clocks are then on and which
    /// [`PooledStream::lane`] hands to the backend's recording calls.
    #[inline]
    pub(crate) fn admit(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        op: &'static str,
    ) -> Result<Lane, ServerError> {
        // No window holds the pooled stream and none was forked: nothing to refuse.
        if ps.stream.capturing().owner().is_none() && !self.branches.any() {
            return Ok(Lane::ORIGIN);
        }
        self.admit_held(ps, stream, op)
    }

    /// [`admit`](Self::admit) where a window holds the pooled stream or one may be lent.
    fn admit_held(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        op: &'static str,
    ) -> Result<Lane, ServerError> {
        let owner = ps.stream.capturing().owner();
        let error = match owner {
            Some(owner) if owner == stream => {
                ps.stream.capturing().lanes().enter(Lane::ORIGIN);
                return Ok(Lane::ORIGIN);
            }
            None => match self.lent(ps.index) {
                // A neighbour of a branch: its pooled stream is lent to a window.
                Some(origin) => ServerError::NeighbourRefused {
                    op,
                    neighbour: stream,
                    owner: origin,
                },
                None => return Ok(Lane::ORIGIN),
            },
            Some(owner) => match self.entry(stream) {
                // A branch of this window (rule 28): its work goes to its lane; the
                // window's lifecycle stays the origin's.
                Some(entry) if entry.pooled == ps.index => {
                    let lane = ps.stream.capturing().lanes_ref().lane_of(stream, owner);
                    match lane {
                        Some(_) if LIFECYCLE.contains(&op) => BranchRefused {
                            op,
                            branch: stream,
                            parent: owner,
                            reason: BranchReason::Lifecycle { origin: owner },
                        }
                        .into(),
                        Some(lane) => {
                            ps.stream.capturing().lanes().enter(lane);
                            return Ok(lane);
                        }
                        None => BranchRefused {
                            op,
                            branch: stream,
                            parent: owner,
                            reason: BranchReason::Joined,
                        }
                        .into(),
                    }
                }
                _ => ServerError::NeighbourRefused {
                    op,
                    neighbour: stream,
                    owner,
                },
            },
        };
        self.refused(stream, op, &error);
        Err(error)
    }

    /// Whether `stream` is a branch of the window on pooled stream `ps` now.
    pub(crate) fn is_branch_of(&self, ps: &PooledStream<B>, stream: StreamId) -> bool {
        self.entry(stream).is_some_and(|r| r.pooled == ps.index)
    }

    pub(crate) fn refused(&self, stream: StreamId, op: &'static str, error: &ServerError) {
        self.trace.push(Event::Refused {
            stream,
            op,
            error: error.clone(),
        });
    }

    /// Dooms the window on `ps` with a post-mortem naming `op` on `stream`, and returns
    /// the error to hand back (rule 11).
    pub(crate) fn doom(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        op: Op,
        cause: ServerError,
    ) -> ServerError {
        let capture = ps.stream.capturing();
        let owner = capture.owner().unwrap_or(stream);
        let launches = capture.launches();
        let error = ServerError::doomed(owner, op.clone(), stream, launches, cause);
        if capture.is_recording() && !capture.is_doomed() {
            capture.fail(error.clone());
            self.trace.push(Event::Doomed {
                stream: owner,
                op,
                launches,
            });
        }
        error
    }

    /// After an asynchronous error on `ps`'s stream (reported wherever its fence was
    /// waited for), its info-cache entries count as not uploaded: the lost work may have
    /// held their uploads (a failed submission drops its whole batch), so each is
    /// uploaded again, or its upload recorded, before its next use.
    pub(crate) fn forget_lost_uploads(&self, ps: &mut PooledStream<B>) {
        if self.faults.moved_since(ps.index, &mut ps.faults_seen) {
            ps.stream.info_cache().forget_uploads();
        }
    }

    /// Claims `keys` with `error` in the ledger and traces each claim.
    pub(crate) fn claim(&self, keys: &[ClaimKey], error: &ServerError) -> Option<FailureId> {
        if keys.is_empty() {
            return None;
        }
        let failure = self
            .taint()
            .taint(keys.iter().copied(), error.clone())
            .ok()?;
        for key in keys {
            self.trace.push(Event::Taint { key: *key, failure });
        }
        Some(failure)
    }

    /// Fails a scope with `error` (its claims now carry it) and traces each claim.
    pub(crate) fn fail_scope(
        &self,
        scope: crate::taint::Scope,
        keys: &[ClaimKey],
        error: &ServerError,
    ) {
        let failure = scope.failure();
        self.taint().fail(scope, error.clone());
        for key in keys {
            self.trace.push(Event::Taint { key: *key, failure });
        }
    }

    /// An asynchronous error on `ps` (a failed submit, a lost device, a fence wait):
    /// every range written there since its last good fence is claimed (rule 15).
    pub(crate) fn fault(&self, ps: &mut PooledStream<B>, stream: StreamId, error: &ServerError) {
        self.fault_on(ps.index, stream, error);
    }

    /// An asynchronous error reported by a fence of pooled stream `q`, wherever it was
    /// waited for: every range written on `q` since its last good fence is claimed, the
    /// ones whose memory is gone skipped (rule 15), and every stream whose unconfirmed
    /// work `q` waited for on the device becomes a suspect (`settle_suspects`).
    pub(crate) fn fault_on(&self, q: usize, stream: StreamId, error: &ServerError) {
        self.faults.note(q);
        let mut keys = Vec::new();
        let mut followed = Vec::new();
        {
            let mut order = self.order();
            order.take_since_fence(q, &mut keys);
            // The error may be another stream's, met through q's device-side wait on
            // its work: each such stream is asked once this call holds nothing.
            order.followed_unconfirmed(q, &mut followed);
        }
        if !followed.is_empty() {
            self.suspects.add(followed);
        }
        keys.sort_unstable();
        keys.dedup();
        if keys.is_empty() {
            return;
        }
        // Freed memory is skipped; the rest is claimed, under one hold of the ledger.
        let failure = {
            let mut taint = self.taint();
            keys.retain(|key| taint.is_tracked(key.memory));
            taint.taint_live(keys.iter().copied(), error.clone())
        };
        if let Some(failure) = failure {
            for key in &keys {
                self.trace.push(Event::Taint { key: *key, failure });
            }
            self.trace.push(Event::Fault {
                stream,
                ranges: keys.len(),
                failure,
            });
        }
    }

    /// The order tracks, locked: whatever the caller does with them, every pooled
    /// stream's uses memo is stale after it.
    pub(crate) fn order(&self) -> Ordered<'_, Tracks> {
        self.tracks.lock()
    }

    /// Whether `ps`'s uses memo covers a launch reading `reads` and writing `writes`:
    /// its ordering and stamps are done already (`use_memo.rs`). When it does not, the
    /// launch's full pass begins.
    pub(crate) fn memo_covers(
        &self,
        ps: &mut PooledStream<B>,
        reads: &[ClaimKey],
        writes: &[ClaimKey],
    ) -> bool {
        let version = self.tracks.version();
        if ps.memo.covers(version, reads, writes) {
            return true;
        }
        ps.memo.begin_pass();
        false
    }

    /// The live imports, locked (innermost).
    pub(crate) fn imports(&self) -> Ordered<'_, Imports> {
        Ordered::lock(&self.imports, Level::Imports)
    }

    pub(crate) fn registry(&self) -> Ordered<'_, GraphRegistry> {
        Ordered::lock(&self.graphs, Level::Graphs)
    }

    pub(crate) fn kernel_registry(&self) -> Ordered<'_, KernelRegistry<B>> {
        Ordered::lock(&self.kernels, Level::Kernels)
    }

    /// A fence on pooled stream `q` covering everything it enqueued so far, unless it
    /// records: then its eager work finished before its window opened (`begin` waits
    /// for it), and there is nothing to wait for. Decided under the capture state, which
    /// `begin` takes to start recording, so no fence is ever recorded on a capturing
    /// stream.
    pub(crate) fn fence_of(&self, q: usize) -> Option<Stamped<<B::Stream as DeviceStream>::Fence>> {
        let signal = self.signals[q];
        self.captures.status().unless_recording(q, || {
            let epoch = self.order().seal(q);
            Stamped {
                stream: q,
                epoch,
                fence: <B::Stream as DeviceStream>::fence(signal),
            }
        })
    }

    /// Waits on the host for a stamped fence, and settles or taints what it covers.
    pub(crate) fn wait_stamped(
        &self,
        stamped: Stamped<<B::Stream as DeviceStream>::Fence>,
        stream: StreamId,
    ) -> Result<(), ServerError> {
        let Stamped {
            stream: q,
            epoch,
            fence,
        } = stamped;
        match fence.wait() {
            Ok(()) => {
                self.order().good(q, epoch);
                Ok(())
            }
            Err(error) => {
                self.fault_on(q, stream, &error);
                Err(error)
            }
        }
    }

    /// Orders `ps`'s next operation, which reads `reads` and writes `writes`, after the
    /// other streams' uses of that memory: a device-side wait for each stream to follow
    /// (rule 18). The host does not block. Never called while `ps` records.
    pub(crate) fn order_device(
        &self,
        ps: &mut PooledStream<B>,
        reads: &[ClaimKey],
        writes: &[ClaimKey],
    ) -> Result<(), ServerError> {
        let on = ps.index;
        self.tracks.lock_for(&mut ps.memo).deps(
            on,
            reads.iter().map(|k| k.memory),
            writes.iter().map(|k| k.memory),
            &mut ps.deps,
        );
        for i in 0..ps.deps.len() {
            let q = ps.deps[i].0;
            let Some(stamped) = self.fence_of(q) else {
                // Nothing to wait for now, but the use stays unfollowed: the next
                // launch asks again.
                ps.memo.spoil();
                continue;
            };
            B::wait_for(&mut ps.stream, &stamped.fence)?;
            self.tracks
                .lock_for(&mut ps.memo)
                .ordered(on, q, stamped.epoch);
        }
        Ok(())
    }

    /// Before the host reads `key` from pooled stream `on`: waits, on the host, for the
    /// other streams that wrote it, settling or tainting their work (the host itself
    /// reads, so it blocks; rule 18). Holds no pooled stream.
    pub(crate) fn order_host(
        &self,
        on: usize,
        stream: StreamId,
        key: ClaimKey,
    ) -> Result<(), ServerError> {
        let mut deps = Vec::new();
        self.order().deps(on, [key.memory], [], &mut deps);
        for (q, _) in deps {
            if let Some(stamped) = self.fence_of(q) {
                self.wait_stamped(stamped, stream)?;
            }
        }
        Ok(())
    }

    /// Notes that `ps` enqueued an operation reading `reads` and writing `writes`, and
    /// keeps their memory allocated until a fence of `ps` after it has passed (rule 19).
    pub(crate) fn used<'a>(
        &self,
        ps: &mut PooledStream<B>,
        reads: &[ClaimKey],
        writes: &[ClaimKey],
        buffers: impl IntoIterator<Item = &'a ManagedMemoryHandle>,
    ) {
        {
            let mut order = self.tracks.lock_for(&mut ps.memo);
            order.used(
                ps.index,
                reads.iter().map(|k| k.memory),
                writes.iter().map(|k| k.memory),
            );
            order.wrote(ps.index, writes);
        }
        for handle in buffers {
            ps.hold(handle);
        }
    }

    /// Forgets, in the ledger, allocations the pools took back.
    pub(crate) fn forget_freed(&self, ps: &mut PooledStream<B>) {
        ps.collect_freed();
        if ps.freed.is_empty() {
            return;
        }
        {
            let mut imports = self.imports();
            if !imports.is_empty() {
                imports.forget(&ps.freed);
            }
        }
        let mut taint = self.taint();
        for &id in &ps.freed {
            // Host staging and info buffers were never tracked: unknown is expected.
            let _ = taint.forget(id);
        }
        drop(taint);
        let mut order = self.order();
        for &id in &ps.freed {
            order.forget(id);
        }
        drop(order);
        self.labels.forget_memory(&ps.freed);
        ps.freed.clear();
    }

    /// Flushes the drop queue when its policy asks, except while recording (rule 9).
    #[inline]
    pub(crate) fn maybe_flush(&self, ps: &mut PooledStream<B>, stream: StreamId) {
        if ps.stream.capturing().is_recording() || !ps.drops.should_flush() {
            return;
        }
        self.flush(ps, stream);
    }

    /// The flush [`maybe_flush`](Self::maybe_flush) decided on.
    fn flush(&self, ps: &mut PooledStream<B>, stream: StreamId) {
        let signal = ps.stream.signal();
        ps.clear_held();
        let waits_for = ps.drops.has_fence().then_some(ps.drops_epoch);
        let now = self.order().seal(ps.index);
        match ps
            .drops
            .flush(|| <B::Stream as DeviceStream>::fence(signal))
        {
            // The fence it waited for was good: what the stream wrote up to it is
            // settled, wherever else nobody looks (rule 15).
            Ok(()) => {
                if let Some(epoch) = waits_for {
                    self.order().good(ps.index, epoch);
                }
            }
            Err(e) => self.fault(ps, stream, &e),
        }
        if ps.drops.has_fence() {
            ps.drops_epoch = now;
        }
    }

    /// Frees everything the drop queue holds, after waiting for the device (never while
    /// recording). An asynchronous error its fence reports claims what the stream wrote
    /// since its last good fence (rule 15), and is returned for a caller that reports it.
    pub(crate) fn drain(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
    ) -> Result<(), ServerError> {
        if ps.stream.capturing().is_recording() {
            return Ok(());
        }
        let signal = ps.stream.signal();
        ps.clear_held();
        // The fences a drain waits for: the last flush's, if it recorded one, and one
        // recorded now when values wait without a fence.
        let previous = ps.drops.has_fence().then_some(ps.drops_epoch);
        let fresh =
            ps.drops.staged_len() > 0 || (ps.drops.pending_len() > 0 && !ps.drops.has_fence());
        let now = self.order().seal(ps.index);
        match ps
            .drops
            .drain(|| <B::Stream as DeviceStream>::fence(signal))
        {
            Ok(()) => {
                let settled = if fresh { Some(now) } else { previous };
                if let Some(epoch) = settled {
                    self.order().good(ps.index, epoch);
                }
                Ok(())
            }
            Err(e) => {
                self.fault(ps, stream, &e);
                Err(e)
            }
        }
    }

    /// Frees everything the drop queue holds right after this call waited for the whole
    /// stream and the wait succeeded (`B::read`, `B::sync`: "waits for everything
    /// enqueued", and reports an asynchronous error itself): no fresh fence is recorded
    /// and waited for, and what the stream wrote until now is settled, as a drain's
    /// fence would settle it.
    pub(crate) fn retire_waited(&self, ps: &mut PooledStream<B>) {
        if ps.stream.capturing().is_recording() {
            return;
        }
        ps.clear_held();
        let now = self.order().seal(ps.index);
        ps.drops.retire_waited();
        self.order().good(ps.index, now);
    }

    /// Reserves device memory under the device's capture state.
    pub(crate) fn reserve_device(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        size: u64,
    ) -> Result<ManagedMemoryHandle, ServerError> {
        self.reserve_placed(ps, stream, size, true)
    }

    /// [`reserve_device`](Self::reserve_device), kept out of an armed graph pool's
    /// memory unless `arena` allows it (the info cache's entries).
    pub(crate) fn reserve_placed(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        size: u64,
        arena: bool,
    ) -> Result<ManagedMemoryHandle, ServerError> {
        let memory = ps.stream.device_memory();
        let result = self.captures.status().with_pages(ps.index, |update| {
            memory.reserve_placed(size, stream, update, arena)
        });
        if result.is_ok() {
            self.claim_displaced(ps, stream);
        }
        result.map_err(|e| self.with_ledgers(e))
    }

    /// Stages `bytes` through a pinned host slice and enqueues (or records) the copy to
    /// `destination`. The staging slice is returned for its holder to keep.
    pub(crate) fn stage(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        bytes: &[u8],
        destination: &DeviceResource<B::Stream>,
    ) -> Result<ManagedMemoryHandle, ServerError> {
        let host = ps.stream.host_memory();
        let staging = self
            .captures
            .status()
            .with_pages(ps.index, |update| {
                host.reserve(bytes.len() as u64, stream, update)
            })
            .map_err(|e| self.with_ledgers(e))?;
        let key = ClaimKey {
            memory: staging.id(),
            range: ByteRange::from_bounds(0, bytes.len() as u64),
        };
        let source = ps.stream.host_memory().resource(key)?;
        if ps.stream.capturing().is_recording() {
            let location = ps.stream.host_memory().bind(staging.id())?;
            ps.stream.capturing().touch(stream, location);
            ps.stream.capturing().hold(&staging.binding());
        }
        ps.stream.capturing().prime(&staging.binding());
        let lane = ps.lane();
        B::write(&mut ps.stream, lane, &source, destination, bytes)?;
        Ok(staging)
    }

    /// Adds every live graph's ledger to an out-of-memory error.
    pub(crate) fn with_ledgers(&self, error: ServerError) -> ServerError {
        match error {
            ServerError::OutOfMemory(mut oom) => {
                oom.graphs = self.ledgers().0;
                ServerError::OutOfMemory(oom)
            }
            other => other,
        }
    }

    /// Before `stream` writes or reads a buffer of another pooled stream: refused when
    /// `stream`'s own window records (the copy would run on the buffer's stream, outside
    /// the window). The order itself is kept by the buffer's stream (rule 18).
    pub(crate) fn hand_over(
        &self,
        stream: StreamId,
        op: &'static str,
        buffer: &Buffer,
    ) -> Result<(), ServerError> {
        let id = buffer.id();
        let q = self.pooled(stream);
        let owner = self.captures.status().recording_owner(q);
        let own_window = owner.is_some()
            && (owner == Some(stream) || self.entry(stream).is_some_and(|r| r.pooled == q));
        if own_window {
            return Err(ServerError::graph_state_in(
                op,
                Some(Subject::buffer(id)),
                stream,
                "cannot record it: it lives on another pooled stream",
            ));
        }
        Ok(())
    }
}
