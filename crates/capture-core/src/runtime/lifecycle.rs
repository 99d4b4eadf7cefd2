//! The capture lifecycle as users drive it: `prepare`, `begin`, `end`, `abort`, the
//! `capture` closure form, replays and graph drops.
//!
//! Each call runs in a `debug` span (target `capture`) named after its step, with the
//! logical ids as fields (`stream`, `pooled` the pooled stream's index, `graph`):
//! `prepare`, `begin`, `seal` (`end`), `abort`, `replay`; `capture` wraps a whole
//! `Device::capture`, with `warmup` (the first call of its closure) and `window`
//! (`begin`, the recorded call and the seal) inside. With no subscriber a span is a
//! disabled handle: no allocation, no field evaluated.

use std::sync::Arc;

use super::buffer::Buffer;
use super::capturing::{CapturePhase, Capturing};
use super::closure::ClosureScope;
use super::device::Device;
use super::graph_handle::GraphHandle;
use super::graph_owner::GraphOwner;
use super::graph_pool::GraphPool;
use super::graph_slots::SlotUpdate;
use super::inner::Inner;
use super::loops;
use super::pooled::PooledStream;
use crate::branch_refusal::{BranchReason, BranchRefused};
use crate::capture::{Refused, Window};
use crate::driver::{Backend, DeviceStream};
use crate::drop_queue::{Fence, Pending};
use crate::error::ServerError;
use crate::ids::{GraphId, GraphPoolId, StreamId};
use crate::memory::BufferBinding;
use crate::op::{Op, ReadBy};
use crate::slot_table::{SlotInfo, SlotName};
use crate::stop_flag::LoopMismatch;
use crate::subject::Subject;
use crate::trace::Event;

/// The most replays one [`Device::replay`] call makes (they go out in one submission).
pub const MAX_REPLAYS_PER_CALL: u32 = 1 << 16;

impl<B: Backend> Device<B> {
    /// Starts the warmup run of a capture on `stream`: arms its pools and info cache.
    ///
    /// # Errors
    ///
    /// [`ServerError::NeighbourRefused`] while another stream's window holds the pooled
    /// stream; [`ServerError::GraphState`] when this stream already prepared or records;
    /// [`ServerError::OtherStreamInCapture`] inside the capture closure of another
    /// stream (a nested capture, rule 22). Nothing is changed.
    pub fn prepare(&self, stream: StreamId) -> Result<(), ServerError> {
        self.prepare_with(stream, None)
    }

    /// Starts the warmup run of a capture on `stream` into graph pool `pool`: as
    /// [`prepare`](Self::prepare), and every allocation of the window is placed in the
    /// pool's memory, from its start again, over what the pool's other members placed
    /// there (rule 23). What the warmup and the recording overwrite of theirs is claimed,
    /// so a read of it, or their replay that needs it, fails naming this graph.
    ///
    /// # Errors
    ///
    /// As [`prepare`](Self::prepare); [`ServerError::InvalidArgument`] for a pool of
    /// another device, or one whose members live on another pooled stream. Nothing is
    /// changed.
    pub fn prepare_in(&self, stream: StreamId, pool: &GraphPool) -> Result<(), ServerError> {
        let pool = self.pool_for(stream, pool)?;
        self.prepare_with(stream, Some(pool))
    }

    fn prepare_with(&self, stream: StreamId, pool: Option<GraphPoolId>) -> Result<(), ServerError> {
        // Rule 22: a capture of another stream nested in a capture closure.
        self.inner.closure_check(stream, "prepare")?;
        let inner = &self.inner;
        let _span = tracing::debug_span!(
            target: "capture", "prepare", %stream, pooled = inner.pooled(stream)
        )
        .entered();
        let prepared = inner.on_stream(stream, |ps| {
            inner.admit(ps, stream, "prepare")?;
            match Window::<B>::on(&mut ps.stream, &mut ps.drops).prepare(stream) {
                Ok(()) => {
                    if let Some(pool) = pool {
                        ps.stream.device_memory().arm_arena(pool);
                    }
                    inner.lifecycle(stream, "prepare");
                    Ok(())
                }
                Err(error) => {
                    let error = naming(stream, error);
                    inner.refused(stream, "prepare", &error);
                    Err(error)
                }
            }
        });
        inner.labels.named(prepared)
    }

    /// Opens the window on `stream`: from here its launches and writes are recorded.
    /// The stream's own queued work (warmup's) is waited for first, on the host, and the
    /// work other streams queued so far on the device, so inputs they wrote are settled
    /// (rule 18). Nothing runs inside the window: an input another stream writes after
    /// `begin` is ordered at each replay, which waits on the device for the other
    /// streams' uses of the memory the graph reads and writes.
    ///
    /// # Errors
    ///
    /// [`ServerError::NeighbourRefused`]; [`ServerError::GraphState`] when nothing is
    /// prepared or the stream already records (nothing changed); the driver's refusal to
    /// begin, after which the stream is back to no capture, its pools disarmed, and
    /// prepare → begin can be retried.
    pub fn begin(&self, stream: StreamId) -> Result<(), ServerError> {
        self.inner.closure_check(stream, "begin")?;
        let _span = tracing::debug_span!(
            target: "capture", "begin", %stream, pooled = self.inner.pooled(stream)
        )
        .entered();
        let inner = Arc::clone(&self.inner);
        let begun = self.inner.on_capture_stream(stream, move |ps| {
            inner.admit(ps, stream, "begin")?;
            // The stream's own work queued before the window (warmup's) is waited for
            // here, while it still may be: other streams that use what it wrote then need
            // no fence of a recording stream (rule 18).
            if !ps.stream.capturing().is_recording()
                && ps.stream.capturing().owner() == Some(stream)
            {
                let epoch = inner.order().seal(ps.index);
                match <B::Stream as DeviceStream>::fence(ps.stream.signal()).wait() {
                    Ok(()) => inner.order().good(ps.index, epoch),
                    Err(error) => {
                        // An asynchronous error the stream reports now lost what it
                        // wrote since its last good fence, warmup's work included (its
                        // info-word uploads too): the window is not opened on lost
                        // ground. It unwinds to no capture (rule 17) and says why;
                        // prepare → begin can be retried.
                        inner.fault(ps, stream, &error);
                        let error = naming(stream, error);
                        inner.refused(stream, "begin", &error);
                        let _ = inner.abort_on(ps, stream);
                        return Err(error);
                    }
                }
                // Inputs other streams wrote are settled before the window opens: the
                // stream waits for their queued work on the device (rule 18). A wait
                // the driver refuses unwinds the prepared window, so prepare → begin can
                // be retried (rule 17).
                if let Err(error) = inner.settle_others(ps) {
                    let error = naming(stream, error);
                    inner.refused(stream, "begin", &error);
                    let _ = inner.abort_on(ps, stream);
                    return Err(error);
                }
            }
            // Rule 28: warmup's branches are joined before the window opens, as every
            // window's are before it ends.
            if ps.stream.capturing().owner() == Some(stream)
                && !ps.stream.capturing().is_recording()
                && let Some(branch) = ps.stream.capturing().lanes_ref().first_open()
            {
                let error = ServerError::UnjoinedBranch {
                    window: stream,
                    branch,
                };
                inner.refused(stream, "begin", &error);
                let _ = inner.abort_on(ps, stream);
                return Err(error);
            }
            let mut window = Window::<B>::on(&mut ps.stream, &mut ps.drops);
            let result = window.begin();
            let fence_error = window.take_fence_error();
            ps.clear_held();
            ps.graphs.open_window();
            if let Some(error) = fence_error {
                inner.fault(ps, stream, &error);
            }
            match result {
                Ok(()) => {
                    inner.lifecycle(stream, "begin");
                    Ok(())
                }
                Err(error) => {
                    let error = naming(stream, error);
                    inner.refused(stream, "begin", &error);
                    inner.release_branches(ps);
                    Err(error)
                }
            }
        });
        self.inner.labels.named(begun)
    }

    /// Closes the window on `stream` and seals what it recorded into a graph. Ended by a
    /// stream that did not open it, the window is abandoned: closed, with no graph.
    ///
    /// ```
    /// # use capture_graphs::{Arg, Builtin, Device, DeviceConfig, StreamId};
    /// # use capture_graphs::mock::MockBackend;
    /// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// # let s = StreamId::new(0);
    /// let y = dev.alloc(s, 16)?;
    /// let fill = dev.builtin(Builtin::Fill);
    /// let step = |d: &Device<MockBackend>| {
    ///     d.launch(s, &fill, [1, 1, 1], &[Arg::write(&y)], &Builtin::Fill.info(4, 7.0))
    /// };
    /// // By hand, what `capture` does: prepare, warmup, begin, record, end.
    /// dev.prepare(s)?;
    /// step(&dev)?;
    /// dev.begin(s)?;
    /// step(&dev)?;
    /// let graph = dev.end(s)?;
    /// dev.replay(s, &graph, 1)?;
    /// // An end with nothing open is refused and changes nothing.
    /// assert!(dev.end(s).is_err());
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// No graph comes out of a window that never opened (a prepared one is disarmed),
    /// was doomed (the post-mortem names the call), was refused by the driver, or was
    /// abandoned ([`ServerError::Abandoned`] naming both streams, also to the owner's
    /// later `end`). The ranges the recording would have written are claimed with the
    /// error, so a later read fails rather than see bytes nothing wrote.
    pub fn end(&self, stream: StreamId) -> Result<GraphHandle, ServerError> {
        self.inner.closure_check(stream, "end")?;
        let _span = tracing::debug_span!(
            target: "capture", "seal", %stream, pooled = self.inner.pooled(stream)
        )
        .entered();
        let inner = Arc::clone(&self.inner);
        let ended = self
            .inner
            .on_capture_stream(stream, move |ps| inner.end_on(ps, stream));
        self.inner
            .labels
            .named(ended)
            .map(|id| self.graph_handle(id))
    }

    /// The handle of graph `id`, just sealed on this device.
    fn graph_handle(&self, id: GraphId) -> GraphHandle {
        let inner: Arc<dyn GraphOwner> = Arc::clone(&self.inner) as Arc<dyn GraphOwner>;
        GraphHandle::new(id, self.inner.serial, Arc::downgrade(&inner))
    }

    /// Gives up `stream`'s window. From capture: closes the driver capture, drops the
    /// recording, claims its written ranges and disarms; from prepare: disarms;
    /// otherwise does nothing.
    ///
    /// # Errors
    ///
    /// [`ServerError::NeighbourRefused`] when another stream owns the window.
    pub fn abort(&self, stream: StreamId) -> Result<(), ServerError> {
        let _span = tracing::debug_span!(
            target: "capture", "abort", %stream, pooled = self.inner.pooled(stream)
        )
        .entered();
        let inner = Arc::clone(&self.inner);
        let aborted = self
            .inner
            .on_capture_stream(stream, move |ps| inner.abort_on(ps, stream));
        self.inner.labels.named(aborted)
    }

    /// Captures what `record` does on `stream` into a graph.
    ///
    /// `record` is called exactly twice: once as warmup (executed, with the pools armed
    /// so the recording finds everything warm), then inside the window (recorded); the
    /// [`Capturing`] it is handed derefs to this device and says which call it is in
    /// ([`Capturing::phase`]). After
    /// `Ok`, the outputs hold warmup's results. No stream lock is held while `record`
    /// runs. If `record` panics, a guard aborts the window (its written ranges claimed)
    /// and the panic continues.
    ///
    /// ```
    /// # use capture_graphs::{Arg, Builtin, Device, DeviceConfig, StreamId};
    /// # use capture_graphs::mock::MockBackend;
    /// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// # let s = StreamId::new(0);
    /// use capture_graphs::CapturePhase;
    ///
    /// let (x, y) = (dev.alloc(s, 16)?, dev.alloc(s, 16)?);
    /// dev.write(s, &x, 0, [1.0f32; 4].map(f32::to_le_bytes).concat())?;
    /// let add = dev.builtin(Builtin::AddScalar);
    /// let mut phases = Vec::new();
    /// let graph = dev.capture(s, |d| {
    ///     phases.push(d.phase());
    ///     let args = [Arg::read(&x), Arg::write(&y)];
    ///     d.launch(s, &add, [1, 1, 1], &args, &Builtin::AddScalar.info(4, 1.0))
    /// })?;
    /// assert_eq!(phases, [CapturePhase::Warmup, CapturePhase::Record]);
    /// // After `Ok`, the outputs hold warmup's results.
    /// assert_eq!(dev.read(s, &y)?, [2.0f32; 4].map(f32::to_le_bytes).concat());
    /// assert_eq!(dev.graph(&graph).map(|l| l.launches), Some(1));
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// `record` may fail with any error type that a [`ServerError`] converts into (your
    /// engine's own, `anyhow::Error`): `?` on a device call inside it converts, and the
    /// device's own refusals come back converted. A closure that ends in `Ok(())` names
    /// its error type (`Ok::<(), MyError>(())`, or `-> Result<(), MyError>` on the
    /// closure).
    ///
    /// ```
    /// # use capture_graphs::{Arg, Builtin, Device, DeviceConfig, ServerError, StreamId};
    /// # use capture_graphs::mock::MockBackend;
    /// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// # let s = StreamId::new(0);
    /// #[derive(Debug)]
    /// enum EngineError {
    ///     Device(ServerError),
    ///     Sampler(String),
    /// }
    /// impl From<ServerError> for EngineError {
    ///     fn from(e: ServerError) -> Self {
    ///         Self::Device(e)
    ///     }
    /// }
    /// let y = dev.alloc(s, 16)?;
    /// let fill = dev.builtin(Builtin::Fill);
    /// let result = dev.capture(s, |d| -> Result<(), EngineError> {
    ///     d.launch(s, &fill, [1, 1, 1], &[Arg::write(&y)], &Builtin::Fill.info(4, 1.0))?;
    ///     Err(EngineError::Sampler("no logits yet".into())) // the window is aborted
    /// });
    /// assert!(matches!(result, Err(EngineError::Sampler(_))));
    /// assert!(dev.captures().active().is_empty());
    /// # Ok::<(), ServerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// `record`'s own error (the window is aborted), or any error of
    /// [`prepare`](Self::prepare), [`begin`](Self::begin) or [`end`](Self::end),
    /// converted into `E`.
    pub fn capture<E: From<ServerError>>(
        &self,
        stream: StreamId,
        record: impl FnMut(&Capturing<'_, B>) -> Result<(), E>,
    ) -> Result<GraphHandle, E> {
        self.capture_with(stream, None, record)
    }

    /// Captures what `record` does on `stream` into a graph of graph pool `pool`: as
    /// [`capture`](Self::capture), with the window's allocations (warmup's working set,
    /// intermediates allocated inside `record`) placed in the pool's memory, which its
    /// members share under check (rule 23): a ladder of graphs costs its largest member,
    /// not the sum. Capture the members on one pooled stream; replay any of them in any
    /// order. A member's replay (or warmup) that overwrites bytes another member needs
    /// from its own earlier replay makes that member's next replay, and any read of those
    /// bytes, fail with [`ServerError::Overwritten`] as the cause.
    ///
    /// # Errors
    ///
    /// As [`capture`](Self::capture) and [`prepare_in`](Self::prepare_in).
    pub fn capture_in<E: From<ServerError>>(
        &self,
        stream: StreamId,
        pool: &GraphPool,
        record: impl FnMut(&Capturing<'_, B>) -> Result<(), E>,
    ) -> Result<GraphHandle, E> {
        let pool = self.pool_for(stream, pool)?;
        self.capture_with(stream, Some(pool), record)
    }

    fn capture_with<E: From<ServerError>>(
        &self,
        stream: StreamId,
        pool: Option<GraphPoolId>,
        mut record: impl FnMut(&Capturing<'_, B>) -> Result<(), E>,
    ) -> Result<GraphHandle, E> {
        let pooled = self.inner.pooled(stream);
        let span = tracing::debug_span!(
            target: "capture", "capture", %stream, pooled, graph = tracing::field::Empty
        )
        .entered();
        self.prepare_with(stream, pool)?;
        let guard = AbortOnPanic {
            device: self,
            stream,
            armed: true,
        };
        let warmup = tracing::debug_span!(target: "capture", "warmup", %stream, pooled).entered();
        let scope = ClosureScope::enter(self.inner.serial, stream);
        let warmed = record(&Capturing::new(self, CapturePhase::Warmup));
        drop(scope);
        if let Err(error) = warmed {
            guard.defuse();
            let _ = self.abort(stream);
            return Err(error);
        }
        drop(warmup);
        let _window = tracing::debug_span!(target: "capture", "window", %stream, pooled).entered();
        if let Err(error) = self.begin(stream) {
            guard.defuse();
            let _ = self.abort(stream);
            return Err(error.into());
        }
        let scope = ClosureScope::enter(self.inner.serial, stream);
        let recorded = record(&Capturing::new(self, CapturePhase::Record));
        drop(scope);
        if let Err(error) = recorded {
            guard.defuse();
            let _ = self.abort(stream);
            return Err(error);
        }
        guard.defuse();
        let graph = self.end(stream)?;
        span.record("graph", tracing::field::display(graph.id()));
        Ok(graph)
    }

    /// Replays `graph` `times` times, in one submission, on the stream that captured it.
    ///
    /// Its inputs are checked first: if one carries a failure the replay is skipped and
    /// passes it on to everything the graph writes. A replay that fails to enqueue claims
    /// what the graph writes; a later successful replay settles it.
    ///
    /// ```
    /// # use capture_graphs::{Arg, Builtin, Device, DeviceConfig, StreamId};
    /// # use capture_graphs::mock::MockBackend;
    /// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// # let s = StreamId::new(0);
    /// let y = dev.alloc(s, 16)?;
    /// dev.write(s, &y, 0, vec![0u8; 16])?;
    /// let axpy = dev.builtin(Builtin::Axpy);
    /// let (x, info) = (dev.alloc(s, 16)?, Builtin::Axpy.info(4, 1.0));
    /// dev.write(s, &x, 0, [1.0f32; 4].map(f32::to_le_bytes).concat())?;
    /// // y += x, in place: warmup makes y 1.
    /// let graph = dev.capture(s, |d| {
    ///     d.launch(s, &axpy, [1, 1, 1], &[Arg::read(&x), Arg::read_write(&y)], &info)
    /// })?;
    /// dev.replay(s, &graph, 3)?; // three times, one submission
    /// assert_eq!(dev.read(s, &y)?, [4.0f32; 4].map(f32::to_le_bytes).concat());
    /// assert!(dev.replay(s, &graph, 0).is_err()); // refused; the graph lives on
    /// dev.drop_graph(graph)?; // or let the handle go: the same release
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] for `times == 0`, a stream other than the
    /// capturing one, or a graph of another device (rule 24); [`ServerError::UnknownGraph`]
    /// when the graph's device dropped it already; [`ServerError::GraphState`] inside
    /// a window; [`ServerError::NeighbourRefused`]; [`ServerError::Unwritten`] when
    /// skipped; the driver's refusal to enqueue.
    pub fn replay(
        &self,
        stream: StreamId,
        graph: &GraphHandle,
        times: u32,
    ) -> Result<(), ServerError> {
        let id = graph.id();
        let _span = tracing::debug_span!(
            target: "capture", "replay", %stream, pooled = self.inner.pooled(stream), graph = %id, times
        )
        .entered();
        let replayed = self
            .owned(graph)
            .and_then(|()| self.replay_checked(stream, id, times));
        self.inner.labels.named(replayed)
    }

    /// Refuses a graph another device captured (rule 24).
    pub(crate) fn owned(&self, graph: &GraphHandle) -> Result<(), ServerError> {
        if graph.device() == self.inner.serial {
            Ok(())
        } else {
            Err(ServerError::invalid(
                "graph",
                graph.id(),
                "the graph belongs to another device",
            ))
        }
    }

    fn replay_checked(
        &self,
        stream: StreamId,
        graph: GraphId,
        times: u32,
    ) -> Result<(), ServerError> {
        self.inner.closure_check(stream, "replay")?;
        self.inner.reap();
        if times == 0 || times > MAX_REPLAYS_PER_CALL {
            return Err(ServerError::invalid(
                "replay count",
                times,
                format!(
                    "a replay call runs a graph 1 to {MAX_REPLAYS_PER_CALL} times \
                     (one submission); call again for more"
                ),
            ));
        }
        let index = self
            .inner
            .registry()
            .pooled_of(graph)
            .ok_or_else(|| ServerError::UnknownGraph(graph))?;
        if index != self.inner.pooled(stream) {
            return Err(ServerError::invalid_value_of(
                "replay stream",
                stream,
                Subject::graph(graph),
                "a graph replays only on the stream that captured it",
            ));
        }
        let mut ps = self.inner.cells[index].lock();
        self.inner.replay_on(&mut ps, stream, graph, times)
    }

    /// Drops `graph`, as dropping its handle does, and says whether it could. Never
    /// blocks: its executable and pins wait in its stream's drop queue behind the fence
    /// that follows its last replay.
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] for a graph of another device (which its own
    /// device then releases, as the handle is dropped); [`ServerError::UnknownGraph`]
    /// when the graph is gone already (its device was dropped).
    pub fn drop_graph(&self, graph: GraphHandle) -> Result<(), ServerError> {
        self.owned(&graph)?;
        let id = graph.into_id();
        self.inner.reap();
        self.inner.drop_graph(id)
    }
}

impl<B: Backend> GraphOwner for Inner<B> {
    fn release(&self, graph: GraphId) {
        if crate::lock_order::holds_any() {
            // Dropped inside the library's own work (a user's work or kept object
            // released as a stream drains): taking a lock here could deadlock, so the
            // next call that holds none releases it.
            self.released.push(graph);
            return;
        }
        self.reap();
        let _ = self.drop_graph(graph);
    }

    fn update(
        &self,
        graph: GraphId,
        updates: Vec<(SlotName, SlotUpdate)>,
    ) -> Result<(), ServerError> {
        let slot = updates.first().map(|u| u.0);
        let span = tracing::debug_span!(
            target: "capture", "update", graph = %graph,
            slot = slot.as_ref().map_or("", SlotName::as_str),
            slots = updates.len(),
            pooled = tracing::field::Empty
        );
        // On the timeline an update sits on its graph's pooled stream, as a replay does.
        let pooled = self.registry().pooled_of(graph);
        if let Some(index) = pooled {
            span.record("pooled", index);
        }
        let _span = span.entered();
        self.labels.named(self.update_slots(graph, updates))
    }

    fn slots(&self, graph: GraphId) -> Result<Vec<SlotInfo>, ServerError> {
        self.labels.named(self.slots_of(graph))
    }
}

impl<B: Backend> Inner<B> {
    /// Releases `graph` behind the fence of its last replay (rule 16).
    pub(crate) fn drop_graph(&self, graph: GraphId) -> Result<(), ServerError> {
        let dropped = self.drop_graph_checked(graph);
        self.labels.forget_graph(graph);
        dropped
    }

    fn drop_graph_checked(&self, graph: GraphId) -> Result<(), ServerError> {
        let index = self
            .registry()
            .remove(graph)
            .ok_or_else(|| ServerError::UnknownGraph(graph))?;
        self.cells[index].run(|ps| {
            let Some(g) = ps.graphs.remove(graph) else {
                return Err(ServerError::UnknownGraph(graph));
            };
            let stream = g.owner();
            let bytes = g.ledger().device_bytes;
            self.leave_pool(ps, graph);
            for handle in ps
                .stream
                .info_cache()
                .graph_release(graph)
                .unwrap_or_default()
            {
                ps.drops.push(handle);
            }
            ps.drops.push(Pending::other(g, bytes));
            self.trace.push(Event::DropGraph { stream, graph });
            Ok(())
        })
    }
}

/// Aborts a window whose `capture` closure panicked, then lets the panic continue.
struct AbortOnPanic<'a, B: Backend> {
    device: &'a Device<B>,
    stream: StreamId,
    armed: bool,
}

impl<B: Backend> AbortOnPanic<'_, B> {
    fn defuse(mut self) {
        self.armed = false;
    }
}

impl<B: Backend> Drop for AbortOnPanic<'_, B> {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.device.abort(self.stream);
        }
    }
}

/// A lifecycle refusal from a pooled stream's `StreamCapture`, which does not know the
/// logical caller, with the caller as its subject.
fn naming(stream: StreamId, error: ServerError) -> ServerError {
    match error {
        ServerError::GraphState {
            op,
            subject: None,
            window,
            reason,
        } => ServerError::GraphState {
            op,
            subject: Some(Box::new(Subject::Stream(stream))),
            window,
            reason,
        },
        other => other,
    }
}

impl<B: Backend> Inner<B> {
    pub(crate) fn lifecycle(&self, stream: StreamId, what: &'static str) {
        self.trace.push(Event::Lifecycle { stream, what });
    }

    fn end_on(&self, ps: &mut PooledStream<B>, stream: StreamId) -> Result<GraphId, ServerError> {
        // A branch's `end` is refused, not an abandonment: the window is its origin's.
        if let Some(owner) = ps.stream.capturing().owner()
            && owner != stream
            && self.is_branch_of(ps, stream)
        {
            let error: ServerError = BranchRefused {
                op: "end",
                branch: stream,
                parent: owner,
                reason: BranchReason::Lifecycle { origin: owner },
            }
            .into();
            self.refused(stream, "end", &error);
            return Err(error);
        }
        // Rule 28: a window that ends with a branch unjoined is doomed, naming it; no
        // graph comes out.
        if ps.stream.capturing().is_recording()
            && ps.stream.capturing().owner() == Some(stream)
            && let Some(branch) = ps.stream.capturing().lanes_ref().first_open()
        {
            let cause = ServerError::UnjoinedBranch {
                window: stream,
                branch,
            };
            self.doom(ps, stream, Op::Call("end"), cause);
        }
        let outcome = self.seal_on(ps, stream);
        self.release_branches(ps);
        outcome
    }

    fn seal_on(&self, ps: &mut PooledStream<B>, stream: StreamId) -> Result<GraphId, ServerError> {
        let recording_owner = ps
            .stream
            .capturing()
            .is_recording()
            .then(|| ps.stream.capturing().owner())
            .flatten();
        // The graph registry (lock 4) is not held while the capture status (lock 3) is
        // taken or the driver instantiates: the id is reserved first, and given back
        // when no graph comes out and no other id was taken since.
        let id = self.registry().reserve_id();
        let arena = ps.stream.device_memory().arena_capture();
        let mut window = Window::<B>::on(&mut ps.stream, &mut ps.drops);
        let result = window.instantiate(stream, id);
        let fence_error = window.take_fence_error();
        ps.clear_held();
        let outcome = match result {
            Ok(graph) => {
                let ledger = graph.ledger();
                self.registry().insert(id, ps.index, graph.live_ledger());
                self.trace.push(Event::Sealed {
                    stream,
                    graph: id,
                    launches: ledger.launches,
                    copies: ledger.copies,
                });
                self.trace.push(Event::Pin {
                    graph: id,
                    device: graph.pinned_device().collect(),
                    host: graph.pinned_staging().collect(),
                    info: ledger.info_entries as usize,
                });
                ps.graphs.seal(id, graph);
                if let Some((pool, overwrote)) = arena {
                    self.join_pool(ps, stream, id, pool, overwrote);
                }
                Ok(id)
            }
            Err(Refused { error, written }) => {
                ps.graphs.open_window();
                self.registry().unreserve_id(id);
                let error = match (recording_owner, error) {
                    // A window that recorded and sealed nothing: its error is a
                    // post-mortem (a doomed window's already is; an abandoned window's
                    // stays flat, naming both streams).
                    (Some(owner), error)
                        if !matches!(error, ServerError::Doomed(_))
                            && !matches!(error.root_cause(), ServerError::Abandoned { .. }) =>
                    {
                        let op = Op::Call(if owner == stream {
                            "instantiate"
                        } else {
                            "end"
                        });
                        let launches = ps.stream.capturing().launches();
                        ServerError::doomed(owner, op, stream, launches, error)
                    }
                    (_, error) => naming(stream, error),
                };
                self.trace.push(Event::NotSealed {
                    stream,
                    error: error.clone(),
                });
                let keys: Vec<_> = written.iter().map(BufferBinding::claim_key).collect();
                self.claim(&keys, &error);
                Err(error)
            }
        };
        if let Some(error) = fence_error {
            self.fault(ps, stream, &error);
        }
        self.forget_freed(ps);
        self.maybe_flush(ps, stream);
        outcome
    }

    /// Makes `ps` wait, on the device, for what every other pooled stream queued so far.
    fn settle_others(&self, ps: &mut PooledStream<B>) -> Result<(), ServerError> {
        for q in (0..self.cells.len()).filter(|&q| q != ps.index) {
            if let Some(stamped) = self.fence_of(q) {
                B::wait_for(&mut ps.stream, &stamped.fence)?;
                self.order().ordered(ps.index, q, stamped.epoch);
            }
        }
        Ok(())
    }

    fn abort_on(&self, ps: &mut PooledStream<B>, stream: StreamId) -> Result<(), ServerError> {
        let capture = ps.stream.capturing();
        match capture.owner() {
            None => return Ok(()),
            Some(owner) if owner != stream => {
                return self.admit(ps, stream, "abort").map(drop);
            }
            Some(_) => {}
        }
        let recording = capture.is_recording();
        let from = if recording { "capture" } else { "prepare" };
        if recording {
            self.doom(
                ps,
                stream,
                Op::Call("abort"),
                ServerError::graph_state("abort", "the window was aborted"),
            );
        }
        // Closing through the window closes the driver capture (from capture) or
        // disarms (from prepare); no graph id is consumed.
        let id = self.registry().next_id();
        let mut window = Window::<B>::on(&mut ps.stream, &mut ps.drops);
        let result = window.instantiate(stream, id);
        let fence_error = window.take_fence_error();
        ps.clear_held();
        ps.graphs.open_window();
        self.lifecycle(
            stream,
            if recording {
                "abort from capture"
            } else {
                "abort from prepare"
            },
        );
        if let Err(Refused { error, written }) = result {
            let keys: Vec<_> = written.iter().map(BufferBinding::claim_key).collect();
            self.claim(&keys, &error);
        }
        if let Some(error) = fence_error {
            self.fault(ps, stream, &error);
        }
        let _ = from;
        self.forget_freed(ps);
        self.release_branches(ps);
        Ok(())
    }

    /// What every replay (a loop's too) checks first: not inside the stream's own
    /// window (rule 16), not a neighbour of one (rules 13 and 28), a graph this pooled
    /// stream holds, replayed on the stream that captured it.
    pub(crate) fn replayable(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        graph: GraphId,
    ) -> Result<(), ServerError> {
        let capture = ps.stream.capturing();
        match capture.owner() {
            Some(owner) if owner == stream => {
                let error = ServerError::graph_state_in(
                    "replay",
                    Some(Subject::Stream(stream)),
                    stream,
                    "is open: a replay inside it is refused",
                );
                self.refused(stream, "replay", &error);
                return Err(error);
            }
            // A neighbour of a window, or of a branch of one (rule 28).
            Some(_) | None => drop(self.admit(ps, stream, "replay")?),
        }
        let Some(g) = ps.graphs.get(graph) else {
            return Err(ServerError::UnknownGraph(graph));
        };
        if g.owner() != stream {
            return Err(ServerError::invalid_value_of(
                "replay stream",
                stream,
                Subject::graph(graph),
                format!(
                    "the graph was captured on {} and replays only there",
                    g.owner()
                ),
            ));
        }
        Ok(())
    }

    /// A replay (`op`) skipped by rule 14: a claimed input's failure, traced and
    /// naming the replay that did not run.
    pub(crate) fn skipped_replay(
        &self,
        stream: StreamId,
        op: Op,
        mut error: ServerError,
    ) -> ServerError {
        if let ServerError::Unwritten(u) = &mut error {
            self.trace.push(Event::Skip {
                stream,
                op: op.clone(),
                failure: u.failure,
            });
            u.by = Some(ReadBy {
                op,
                stream,
                recorded: false,
            });
        }
        error
    }

    pub(crate) fn replay_on(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        graph: GraphId,
        times: u32,
    ) -> Result<(), ServerError> {
        self.replayable(ps, stream, graph)?;
        let g = ps.graphs.get(graph).expect("replayable looked it up");
        let op = Op::replay(graph);
        // Rule 14: inputs first; a claimed one skips the replay and passes it on.
        let skipped = self.taint().propagate(
            op.clone(),
            stream,
            g.inputs().iter().copied(),
            g.written().iter().copied(),
        );
        if let Err(error) = skipped {
            return Err(self.skipped_replay(stream, op, error));
        }
        let scope = self.taint().enter(op, g.written().iter().copied())?;
        // Rule 18: after every other stream's use of what the graph reads and writes.
        // Into the launch scratch, so a replay allocates nothing.
        let (mut inputs, mut written) = (
            std::mem::take(&mut ps.scratch.get_or_insert_with(Box::default).inputs),
            std::mem::take(&mut ps.scratch.get_or_insert_with(Box::default).outputs),
        );
        inputs.clear();
        inputs.extend_from_slice(g.inputs());
        written.clear();
        written.extend_from_slice(g.written());
        // Rule 23: a pool member's replay writes over the other members' bytes it
        // shares; ordered and tracked as written here, claimed once it is enqueued.
        let own = written.len();
        let mut taken = std::mem::take(&mut ps.taken);
        taken.clear();
        self.replay_takes(ps, graph, &mut taken);
        written.extend_from_slice(&taken);
        let enqueued = self.order_device(ps, &inputs, &written).and_then(|()| {
            let g = ps
                .graphs
                .get(graph)
                .ok_or_else(|| ServerError::UnknownGraph(graph))?;
            B::replay(&mut ps.stream, g.executable(), times)
        });
        let outcome = match enqueued {
            Ok(()) => {
                self.taint().settle(scope);
                self.used(ps, &inputs, &written, []);
                self.replayed_over(ps, stream, graph, times, &mut taken);
                self.trace.push(Event::Replay {
                    stream,
                    graph,
                    times,
                });
                self.maybe_flush(ps, stream);
                Ok(())
            }
            Err(error) => {
                self.refused(stream, "replay", &error);
                self.fail_scope(scope, &written[..own], &error);
                Err(error)
            }
        };
        let scratch = ps.scratch_mut();
        (scratch.inputs, scratch.outputs) = (inputs, written);
        ps.taken = taken;
        outcome
    }
}

impl<B: Backend> Device<B> {
    /// Replays `graph` up to `max` times on the device, in one submission, stopping
    /// after the iteration in which its stop flag was set (rule 30): the decode loop
    /// that runs until the end token without a host round trip per token. The graph's
    /// capture named the flag (`Arg::write(&done).stop_flag()`, a `u32` a kernel of the
    /// step writes non-zero to stop); each loop replay zeroes it first.
    ///
    /// Returns at once with the graph's iteration counter, a 4-byte buffer the library
    /// keeps (the same for every loop replay of the graph): read it as any output
    /// (`read_values::<u32>`), after the loop like every read. Every iteration is the
    /// whole graph; the outputs are the last iteration's; a read after the loop waits
    /// for the whole loop; a fault in an iteration ends the loop and claims what the
    /// graph writes, the counter included (rule 15); slot updates apply to the loops
    /// enqueued after them. The first loop replay of a graph allocates its counter.
    ///
    /// ```
    /// # use capture_graphs::{Arg, Device, DeviceConfig, KernelSignature, Param, StreamId};
    /// # use capture_graphs::mock::{MockBackend, MockKernel};
    /// // x += 1; done = x >= 5.
    /// const STEP: MockKernel = MockKernel {
    ///     name: "step",
    ///     signature: KernelSignature::of(&[Param::READ_WRITE, Param::WRITE]),
    ///     f: |bufs, _| {
    ///         let x = u32::from_le_bytes(bufs[0][..4].try_into().unwrap()) + 1;
    ///         bufs[0].copy_from_slice(&x.to_le_bytes());
    ///         bufs[1].copy_from_slice(&u32::from(x >= 5).to_le_bytes());
    ///     },
    /// };
    /// let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// let s = StreamId::new(0);
    /// let (x, done) = (dev.alloc(s, 4)?, dev.alloc(s, 4)?);
    /// dev.write_values(s, &x, 0, &[0u32])?;
    /// let step = dev.kernel(STEP);
    /// let graph = dev.capture(s, |d| {
    ///     d.launch(s, &step, [1, 1, 1], &[Arg::read_write(&x), Arg::write(&done).stop_flag()], &[])
    /// })?; // warmup ran the step once: x = 1
    /// let count = dev.replay_until(s, &graph, 100)?;
    /// assert_eq!(dev.read_values::<u32>(s, &count)?, [4]); // x: 2, 3, 4, 5
    /// assert_eq!(dev.read_values::<u32>(s, &x)?, [5]);
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ServerError::LoopRefused`] for a `max` of 0 or past
    /// [`MAX_REPLAYS_PER_CALL`](crate::MAX_REPLAYS_PER_CALL), a graph whose capture named
    /// no stop flag, or a device that runs no loop; otherwise as
    /// [`replay`](Self::replay), and the counter's allocation's.
    pub fn replay_until(
        &self,
        stream: StreamId,
        graph: &GraphHandle,
        max: u32,
    ) -> Result<Buffer, ServerError> {
        let id = graph.id();
        let _span = tracing::debug_span!(
            target: "capture", "replay", %stream, pooled = self.inner.pooled(stream), graph = %id, max
        )
        .entered();
        let replayed = self.owned(graph).and_then(|()| {
            self.inner.closure_check(stream, "replay")?;
            self.inner.reap();
            if max == 0 || max > MAX_REPLAYS_PER_CALL {
                return Err(loops::refused(
                    Subject::graph(id),
                    LoopMismatch::Max {
                        max,
                        limit: MAX_REPLAYS_PER_CALL,
                    },
                ));
            }
            let index = self
                .inner
                .registry()
                .pooled_of(id)
                .ok_or(ServerError::UnknownGraph(id))?;
            if index != self.inner.pooled(stream) {
                return Err(ServerError::invalid_value_of(
                    "replay stream",
                    stream,
                    Subject::graph(id),
                    "a graph replays only on the stream that captured it",
                ));
            }
            let mut ps = self.inner.cells[index].lock();
            self.inner.replay_loop_on(&mut ps, stream, id, max)
        });
        self.inner.labels.named(replayed)
    }
}
