//! `Inner`: the state a [`Device`](super::Device) shares with its stream workers (the
//! pooled streams, the device-wide capture status, taint ledger, graph and kernel
//! registries, trace and launch limits), and the helpers every operation uses: neighbour
//! refusal, dooming a window, claims, asynchronous faults, flushes and drains, device
//! reservations, staging, and the hand-over to another pooled stream.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::buffer::Buffer;
use super::cell::{StreamCell, lock};
use super::config::DeviceConfig;
use super::pooled::PooledStream;
use super::registry::KernelRegistry;
use crate::capture::DeviceCaptures;
use crate::driver::{Backend, DeviceResource, DeviceStream};
use crate::error::{Chain, ServerError};
use crate::ids::{FailureId, GraphId, StreamId};
use crate::kernel::LaunchLimits;
use crate::memory::{ClaimKey, ManagedMemoryHandle};
use crate::range::ByteRange;
use crate::report::GraphLedger;
use crate::taint::TaintLedger;
use crate::trace::{Event, Trace};

#[derive(Debug, Default)]
pub(crate) struct GraphRegistry {
    pub(crate) next: u64,
    /// Live graphs: the pooled stream each lives on, and its ledger.
    pub(crate) live: BTreeMap<GraphId, (usize, GraphLedger)>,
}

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
}

impl<B: Backend> Inner<B> {
    pub(crate) fn pooled(&self, stream: StreamId) -> usize {
        (stream.index() % self.cells.len() as u64) as usize
    }

    /// Runs `f` on `stream`'s pooled stream (under its lock, or on its worker).
    pub(crate) fn on_stream<R: Send + 'static>(
        &self,
        stream: StreamId,
        f: impl FnOnce(&mut PooledStream<B>) -> R + Send + 'static,
    ) -> R {
        self.cells[self.pooled(stream)].run(f)
    }

    pub(crate) fn taint(&self) -> MutexGuard<'_, TaintLedger> {
        lock(&self.taint)
    }

    pub(crate) fn check_buffer(&self, buffer: &Buffer) -> Result<(), ServerError> {
        if buffer.device != self.serial {
            return Err(ServerError::InvalidBinding {
                binding: format!("{}", buffer.id()),
                reason: "the buffer belongs to another device".into(),
            });
        }
        Ok(())
    }

    pub(crate) fn ledgers(&self) -> Vec<GraphLedger> {
        lock(&self.graphs).live.values().map(|(_, l)| *l).collect()
    }

    /// Refuses a neighbour of an active window on this pooled stream (rule 13).
    pub(crate) fn neighbour(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        op: &'static str,
    ) -> Result<(), ServerError> {
        match ps.stream.capturing().owner() {
            Some(owner) if owner != stream => {
                let error = ServerError::NeighbourRefused {
                    op,
                    neighbour: stream,
                    owner,
                };
                self.refused(stream, op, &error);
                Err(error)
            }
            _ => Ok(()),
        }
    }

    pub(crate) fn refused(&self, stream: StreamId, op: &'static str, error: &ServerError) {
        self.trace.push(Event::Refused {
            stream,
            op,
            error: Chain(error).to_string(),
        });
    }

    /// Dooms the window on `ps` with a post-mortem naming `op` on `stream`, and returns
    /// the error to hand back (rule 11).
    pub(crate) fn doom(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        op: Cow<'static, str>,
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
        let keys = std::mem::take(&mut ps.since_fence);
        if let Some(failure) = self.claim(&keys, error) {
            self.trace.push(Event::Fault {
                stream,
                ranges: keys.len(),
                failure,
            });
        }
        ps.since_fence = keys;
        ps.since_fence.clear();
    }

    /// Forgets, in the ledger, allocations the pools took back.
    pub(crate) fn forget_freed(&self, ps: &mut PooledStream<B>) {
        ps.collect_freed();
        if ps.freed.is_empty() {
            return;
        }
        let mut taint = self.taint();
        for id in ps.freed.drain(..) {
            // Host staging and info buffers were never tracked: unknown is expected.
            let _ = taint.forget(id);
        }
    }

    /// Flushes the drop queue when its policy asks, except while recording (rule 9).
    pub(crate) fn maybe_flush(&self, ps: &mut PooledStream<B>, stream: StreamId) {
        if ps.stream.capturing().is_recording() || !ps.drops.should_flush() {
            return;
        }
        let signal = ps.stream.signal();
        if let Err(e) = ps
            .drops
            .flush(|| <B::Stream as DeviceStream>::fence(signal))
        {
            self.fault(ps, stream, &e);
        }
    }

    /// Frees everything the drop queue holds, after waiting for the device (never while
    /// recording).
    pub(crate) fn drain(&self, ps: &mut PooledStream<B>, stream: StreamId) {
        if ps.stream.capturing().is_recording() {
            return;
        }
        let signal = ps.stream.signal();
        if let Err(e) = ps
            .drops
            .drain(|| <B::Stream as DeviceStream>::fence(signal))
        {
            self.fault(ps, stream, &e);
        }
    }

    /// Reserves device memory under the device's capture state.
    pub(crate) fn reserve_device(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        size: u64,
    ) -> Result<ManagedMemoryHandle, ServerError> {
        let memory = ps.stream.device_memory();
        let result = self
            .captures
            .status()
            .with_pages(ps.index, |update| memory.reserve(size, stream, update));
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
        B::write(&mut ps.stream, &source, destination, bytes)?;
        Ok(staging)
    }

    /// Adds every live graph's ledger to an out-of-memory error.
    pub(crate) fn with_ledgers(&self, error: ServerError) -> ServerError {
        match error {
            ServerError::OutOfMemory(mut oom) => {
                oom.graphs = self.ledgers();
                ServerError::OutOfMemory(oom)
            }
            other => other,
        }
    }

    /// Before `stream` works on a buffer of another pooled stream: refuse it if
    /// `stream`'s own window records, then wait for what `stream` already enqueued (a
    /// launch there may write the buffer; rule 18).
    pub(crate) fn hand_over(
        &self,
        stream: StreamId,
        op: &'static str,
        buffer: &Buffer,
    ) -> Result<(), ServerError> {
        let id = buffer.id();
        let fence = self.cells[self.pooled(stream)].run(move |ps| {
            let capture = ps.stream.capturing();
            match capture.owner() {
                Some(owner) if capture.is_recording() && owner == stream => {
                    Err(ServerError::graph_state(
                        op,
                        format!(
                            "{id} lives on another pooled stream: a {op} of it from inside {stream}'s window cannot be recorded"
                        ),
                    ))
                }
                Some(_) if capture.is_recording() => Ok(None),
                _ => Ok(Some(<B::Stream as DeviceStream>::fence(ps.stream.signal()))),
            }
        })?;
        if let Some(fence) = fence {
            crate::drop_queue::Fence::wait(fence)?;
        }
        Ok(())
    }
}
