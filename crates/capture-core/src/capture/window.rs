//! `Window`: the shared half of each capture transition (arming pools, opening the
//! driver capture, sealing what it recorded), and the `Graph` and `Refused` it ends in.

use std::any::Any;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use super::branch_clocks::RaceRecord;
use super::claims::Claims;
use super::stream_capture::{CaptureEnd, TouchedPage};
use crate::driver::{DeviceStream, GraphDriver};
use crate::drop_queue::PendingDropQueue;
use crate::error::ServerError;
use crate::ids::{GraphId, MemoryId, StreamId};
use crate::info_cache::CacheMode;
use crate::memory::{BufferBinding, ClaimKey, ManagedMemoryBinding, ManagedMemoryHandle};
use crate::report::{DevicePin, GraphLedger, LiveLedger};
use crate::slot_table::SlotName;

/// A capture window on one stream: arming the pools before it opens, opening it, and
/// instantiating what it recorded. The stream refuses the steps out of order.
pub struct Window<'a, D: GraphDriver> {
    stream: &'a mut D::Stream,
    drops: &'a mut PendingDropQueue<<D::Stream as DeviceStream>::Fence>,
    fence_error: Option<ServerError>,
}

/// A window that closed without a graph: the error, and the memory its recorded
/// launches would have written, which the caller must claim with that error (the
/// launches never ran, so a later read must fail rather than see bytes nothing wrote).
#[derive(Debug)]
pub struct Refused {
    /// Why no graph came out.
    pub error: ServerError,
    /// The ranges the recording would have written, each named once.
    pub written: Vec<BufferBinding>,
}

/// A sealed capture: the driver's executable and everything it needs to stay exactly
/// where it was recorded, for its whole life.
pub struct Graph<D: GraphDriver> {
    id: GraphId,
    owner: StreamId,
    executable: D::Executable,
    /// What the recorded user work references: dropped after the executable (fields
    /// drop in order), which may still name it.
    kept: Vec<Box<dyn Any + Send>>,
    staging: Vec<ManagedMemoryBinding>,
    inputs: Vec<ClaimKey>,
    written: Vec<ClaimKey>,
    touched: Vec<TouchedPage>,
    /// What the recorded operations were given, each slot's uses apart: its inputs and
    /// outputs are computed from it again when a slot is rebound (rule 27).
    claims: Claims,
    /// What its window's lanes were, for rule 29 on every rebind (rule 27).
    races: RaceRecord,
    /// The device pins, and the figures fixed at the seal.
    ledger: LiveLedger,
}

impl<'a, D: GraphDriver> Window<'a, D> {
    /// The capture window on `stream`, whose deferred frees `drops` holds.
    pub fn on(
        stream: &'a mut D::Stream,
        drops: &'a mut PendingDropQueue<<D::Stream as DeviceStream>::Fence>,
    ) -> Self {
        Self {
            stream,
            drops,
            fence_error: None,
        }
    }

    /// Arm the pools for a window about to open, before the warmup run: every
    /// allocation from here until the window closes goes to the persistent pool, and the
    /// info cache runs in capture mode. Both the device pool and the pinned host pool are
    /// armed.
    ///
    /// # Errors
    ///
    /// The stream's refusal, when it is not in a state a window can open from; nothing
    /// is changed.
    pub fn prepare(&mut self, stream_id: StreamId) -> Result<(), ServerError> {
        self.stream.capturing().prepare(stream_id)?;
        self.stream.device_memory().capture_begin();
        self.stream.host_memory().capture_begin();
        self.stream.info_cache().set_mode(CacheMode::Capture);
        Ok(())
    }

    /// Open the window: from here the driver records every launch issued on this
    /// stream until the window closes. The state moves first; then the drop queue
    /// drains (so warmup's staging is back in its pool), priming ends, and the driver
    /// capture opens.
    ///
    /// # Errors
    ///
    /// The stream's refusal (nothing changed), or the driver's refusal to begin
    /// recording, with the stream left as it was found before prepare: pools disarmed,
    /// primed staging released, cache pins discarded, capture state back to none.
    pub fn begin(&mut self) -> Result<(), ServerError> {
        self.stream.capturing().begin()?;
        self.drain();
        self.stream.device_memory().capture_priming_end();
        self.stream.host_memory().capture_priming_end();
        if let Err(error) = D::begin(self.stream) {
            self.disarm();
            self.stream.capturing().abort();
            return Err(error);
        }
        Ok(())
    }

    /// Close the window and instantiate what it recorded into a graph registered under
    /// `id`. The window leaves capture mode first, so no path below can wedge the
    /// stream; a window the caller does not own is closed and torn down all the same.
    ///
    /// # Errors
    ///
    /// [`Refused`], which every failure here becomes: no window at all (a window still
    /// in prepare is disarmed), a doomed recording, the driver's refusal to close or
    /// instantiate, or an abandoned window. It carries the ranges the caller must claim.
    pub fn instantiate(&mut self, stream_id: StreamId, id: GraphId) -> Result<Graph<D>, Refused> {
        let launches = self.stream.capturing().launches();
        let copies = self.stream.capturing().copies();
        let end = match self.stream.capturing().end(stream_id) {
            Ok(end) => end,
            Err(error) => {
                // Nothing was recording. A window still in prepare was disarmed by
                // `end`; its pools and cache must be disarmed too.
                self.disarm();
                return Err(Refused {
                    error,
                    written: Vec::new(),
                });
            }
        };
        let doomed = self.stream.capturing().take_failure();
        let inputs = self.stream.capturing().recorded_inputs();
        let executable = D::instantiate(self.stream, doomed);
        // The driver capture is closed: only now may other streams allocate, release
        // or load again (rule 20).
        self.stream.capturing().driver_closed();
        let foreign = self.stream.capturing().take_foreign();
        let kept = self.stream.capturing().take_kept();
        let device = self.stream.device_memory().capture_end();
        let staging = self.stream.host_memory().capture_end();
        self.stream.capturing().release_held();
        let claims = self.stream.capturing().take_claims();
        let races = self.stream.capturing().take_races();
        let recorded = claims.merged();
        let touched = self.stream.capturing().take_touched();
        self.stream.info_cache().set_mode(CacheMode::Normal);
        self.drain();
        let written: Vec<BufferBinding> = recorded
            .iter()
            .filter(|b| b.access().writes())
            .cloned()
            .collect();
        let executable = match (end, executable) {
            (CaptureEnd::Owned, Ok(executable)) => executable,
            (CaptureEnd::Owned, Err(error)) => {
                self.stream.info_cache().capture_discard();
                return Err(Refused { error, written });
            }
            (CaptureEnd::Abandoned { owner, by }, result) => {
                self.stream.info_cache().capture_discard();
                // Flat when closing went well, so the ender matches it in one step; a
                // failure of the close itself follows it.
                let abandoned = ServerError::Abandoned { owner, by };
                let error = match result {
                    Ok(_) => abandoned,
                    Err(error) => ServerError::Several(vec![abandoned, error]),
                };
                return Err(Refused { error, written });
            }
        };
        let info = self.stream.info_cache().capture_commit(id).unwrap_or(0);
        if let Err(error) = D::upload(self.stream, &executable) {
            tracing::warn!(target: "capture", %id, %error, "graph upload failed; the first replay uploads on demand");
        }
        // Pins: every touched slice of this stream's pools, every other stream's buffer a
        // recorded launch was given (held since it was recorded: its handle may be gone),
        // plus every recorded buffer still live.
        let mut device = device;
        let mut seen: BTreeSet<MemoryId> = device.iter().map(ManagedMemoryBinding::id).collect();
        for binding in foreign {
            if seen.insert(binding.id()) {
                device.push(binding);
            }
        }
        for b in &recorded {
            if seen.insert(b.memory())
                && let Some(binding) = b.upgrade()
            {
                device.push(binding);
            }
        }
        device.sort_by_key(ManagedMemoryBinding::id);
        // The info cache owns its entries' buffers: they are the graph's info words,
        // not the user's, whatever their handles say.
        let info_buffers: BTreeSet<MemoryId> = self
            .stream
            .info_cache()
            .values()
            .map(ManagedMemoryHandle::id)
            .collect();
        let device: Arc<[DevicePin]> = device
            .into_iter()
            .map(|binding| DevicePin {
                info: info_buffers.contains(&binding.id()),
                arena: self.stream.device_memory().arena_place(binding.id()),
                binding,
            })
            .collect();
        let ledger = LiveLedger {
            graph: id,
            device,
            host_bytes: staging.iter().map(ManagedMemoryBinding::size).sum::<u64>(),
            info_entries: info as u64,
            launches,
            copies,
            label: None,
        };
        Ok(Graph {
            id,
            owner: stream_id,
            executable,
            kept,
            staging,
            inputs,
            written: written.iter().map(BufferBinding::claim_key).collect(),
            touched,
            claims,
            races,
            ledger,
        })
    }

    /// A fence wait that reported an asynchronous error while this window drained the
    /// drop queue; the caller taints what the stream wrote since its last good fence.
    pub fn take_fence_error(&mut self) -> Option<ServerError> {
        self.fence_error.take()
    }

    fn drain(&mut self) {
        let signal = self.stream.signal();
        if let Err(error) = self
            .drops
            .drain(|| <D::Stream as DeviceStream>::fence(signal))
        {
            self.fence_error.get_or_insert(error);
        }
    }

    fn disarm(&mut self) {
        drop(self.stream.device_memory().capture_end());
        drop(self.stream.host_memory().capture_end());
        self.stream.capturing().release_held();
        self.stream.info_cache().capture_discard();
        self.stream.info_cache().set_mode(CacheMode::Normal);
    }
}

impl<D: GraphDriver> Graph<D> {
    /// The graph's id.
    pub fn id(&self) -> GraphId {
        self.id
    }

    /// The logical stream that captured it, the only one it replays on.
    pub fn owner(&self) -> StreamId {
        self.owner
    }

    /// The driver's executable.
    pub fn executable(&self) -> &D::Executable {
        &self.executable
    }

    /// The ranges a replay reads before anything in the graph wrote them: checked before
    /// every replay.
    pub fn inputs(&self) -> &[ClaimKey] {
        &self.inputs
    }

    /// The ranges a replay writes: claimed on entry, settled on success.
    pub fn written(&self) -> &[ClaimKey] {
        &self.written
    }

    /// The pages the recording touched, which may not move for the graph's life.
    pub fn touched(&self) -> &[TouchedPage] {
        &self.touched
    }

    /// The device buffers the graph pins, in id order.
    pub fn pinned_device(&self) -> impl Iterator<Item = MemoryId> + '_ {
        self.ledger.device.iter().map(|pin| pin.binding.id())
    }

    /// How many objects of the user's recorded work (library handles, modules,
    /// pipelines) the graph keeps for its life.
    pub fn kept(&self) -> usize {
        self.kept.len()
    }

    /// The host staging buffers the graph pins, in id order.
    pub fn pinned_staging(&self) -> impl Iterator<Item = MemoryId> + '_ {
        self.staging.iter().map(ManagedMemoryBinding::id)
    }

    /// How many host-to-device copies the graph replays (each from its pinned staging).
    pub fn copies(&self) -> u64 {
        self.ledger.copies
    }

    /// What the graph holds, with its device bytes split as the handles stand now (its
    /// marginal bytes counted as if it were the only graph: the device's registry
    /// counts them against the others).
    pub fn ledger(&self) -> GraphLedger {
        self.ledger.now(std::iter::empty())
    }

    /// What its ledger is computed from, sharing its device pins: for the device's
    /// registry, which answers for the graph without reaching its stream.
    pub(crate) fn live_ledger(&self) -> LiveLedger {
        self.ledger.clone()
    }

    /// What its window's lanes were: every rebind is checked against rule 29 there.
    pub(crate) fn races(&self) -> &RaceRecord {
        &self.races
    }

    /// The driver's executable, for an update of its recorded launches.
    pub(crate) fn executable_mut(&mut self) -> &mut D::Executable {
        &mut self.executable
    }

    /// Moves every use of `slot` to `to` (rule 27): the graph's inputs and outputs are
    /// computed again, `pin` (the new buffer's binding, `arena` where it lives in a
    /// graph pool's memory) is pinned from here on, and `touched` (its page) may not
    /// move. Returns the pins no recorded operation needs any more, for the caller to
    /// release behind the fence of the last replay that used them.
    pub(crate) fn rebind(
        &mut self,
        slot: SlotName,
        to: &BufferBinding,
        pin: ManagedMemoryBinding,
        arena: Option<crate::memory::ArenaPlace>,
        touched: TouchedPage,
    ) -> Vec<ManagedMemoryBinding> {
        self.claims.rebind(slot, to);
        self.inputs = self.claims.inputs();
        self.written = self
            .claims
            .merged()
            .iter()
            .filter(|b| b.access().writes())
            .map(BufferBinding::claim_key)
            .collect();
        let used: BTreeSet<MemoryId> = self
            .claims
            .merged()
            .iter()
            .map(BufferBinding::memory)
            .collect();
        let mut released = Vec::new();
        let mut pins: Vec<DevicePin> = Vec::with_capacity(self.ledger.device.len() + 1);
        for p in self.ledger.device.iter() {
            if p.info || used.contains(&p.binding.id()) {
                pins.push(p.clone());
            } else {
                released.push(p.binding.clone());
            }
        }
        if !pins.iter().any(|p| p.binding.id() == pin.id()) {
            pins.push(DevicePin {
                binding: pin,
                info: false,
                arena,
            });
        }
        pins.sort_by_key(|p| p.binding.id());
        self.ledger.device = pins.into();
        if !self.touched.contains(&touched) {
            self.touched.push(touched);
            self.touched.sort_unstable();
        }
        released
    }
}

impl<D: GraphDriver> fmt::Debug for Graph<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Graph")
            .field("id", &self.id)
            .field("owner", &self.owner)
            .field("ledger", &self.ledger())
            .finish()
    }
}
