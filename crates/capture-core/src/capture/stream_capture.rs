//! `StreamCapture`: one pooled stream's position in the capture lifecycle, and what the
//! recording remembers.
//!
//! The two travel together so that "buffers accumulate inside a window and nowhere else"
//! is a property of the type: `record`, `record_copy`, `touch` and `fail` do nothing
//! outside a window, and `prepare` starts every window from an empty recording.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use super::branch_clocks::{BranchClocks, Lane, RaceRecord};
use super::claims::Claims;
use super::status::{CaptureStatus, DeviceCaptures, Slot};
use crate::error::ServerError;
use crate::ids::{PageId, StreamId};
use crate::info_cache::CacheMode;
use crate::memory::{
    BufferBinding, ClaimKey, ManagedMemoryBinding, MemoryLocation, PageUpdate, PoolName,
};
use crate::slot_table::SlotName;

/// Where a pooled stream is in the capture lifecycle.
///
/// `NoCapture → Prepare(owner) → Capture(owner) → NoCapture`; `abort` returns to
/// `NoCapture` from anywhere. A failure inside a window is not a state: it is the
/// recording's first failure, and it dooms the seal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Entered at creation, by `end`, and by `abort`. Left by `prepare`.
    NoCapture,
    /// Entered by `prepare(owner)`: warmup runs eagerly with the pools armed. Left by
    /// `begin` (to `Capture`), by `end` (disarmed, refused) or by `abort`.
    Prepare { owner: StreamId },
    /// Entered by `begin`: launches are recorded, not executed. Left by `end` or `abort`.
    Capture { owner: StreamId },
}

/// How a window was closed, as `end` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureEnd {
    /// The stream that opened the window closed it: the recording may seal into a graph.
    Owned,
    /// Another stream closed the window: it is torn down with no graph, and the owner's
    /// later `end` is refused with [`ServerError::Abandoned`].
    Abandoned {
        /// The stream that opened the window.
        owner: StreamId,
        /// The stream that ended it.
        by: StreamId,
    },
}

/// A page a recorded launch used: the graph replays against it, so it may not be
/// released or renumbered for the graph's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TouchedPage {
    /// The logical stream whose memory holds the page.
    pub stream: StreamId,
    /// The pool the page belongs to.
    pub pool: PoolName,
    /// The page.
    pub page: PageId,
}

/// The graph capture of one pooled backend stream: where it sits in the lifecycle, and
/// the memory its recorded launches were given.
pub struct StreamCapture {
    status: Arc<CaptureStatus>,
    index: usize,
    state: State,
    /// The memory the recorded operations were given.
    claims: Claims,
    /// Recorded operations (launches and host-to-device copies), in order: the position
    /// of each claim's first read and first write.
    ops: u64,
    /// Recorded kernel launches (copies are not launches).
    launches: u64,
    /// Recorded host-to-device copies: each re-reads its held staging on every replay.
    copies: u64,
    touched: Vec<TouchedPage>,
    primed: Vec<ManagedMemoryBinding>,
    held: Vec<ManagedMemoryBinding>,
    failure: Option<ServerError>,
    abandoned: Option<(StreamId, StreamId)>,
    /// `end` left the recording state but the driver capture is still open.
    closing: bool,
    /// Strong bindings on other pooled streams' buffers the window's launches were
    /// given: the graph holds them even if the user drops the handle (rule 7).
    foreign: Vec<ManagedMemoryBinding>,
    /// What the user's recorded work references (its library handles, modules,
    /// pipelines): the graph keeps it for its life.
    kept: Vec<Box<dyn Any + Send>>,
    /// The window's branches and the race check between them (rules 28 and 29), of the
    /// current phase.
    lanes: BranchClocks,
    /// What the graph keeps of the lanes for its rebinds (rule 27), taken at `end`.
    races: RaceRecord,
    /// Counts the phases (each prepare and each begin starts one): a branch token is of
    /// the phase it was forked in.
    phase: u64,
}

impl StreamCapture {
    /// The capture of one more stream of the device whose captures `device` records.
    pub fn new(device: &DeviceCaptures) -> Self {
        let index = device.register();
        Self {
            status: device.shared(),
            index,
            state: State::NoCapture,
            claims: Claims::default(),
            ops: 0,
            launches: 0,
            copies: 0,
            touched: Vec::new(),
            primed: Vec::new(),
            held: Vec::new(),
            failure: None,
            abandoned: None,
            closing: false,
            foreign: Vec::new(),
            kept: Vec::new(),
            lanes: BranchClocks::default(),
            races: RaceRecord::default(),
            phase: 0,
        }
    }

    /// The captures of the whole device this stream belongs to, this one included.
    pub fn device(&self) -> &CaptureStatus {
        &self.status
    }

    /// This pooled stream's index in the device's [`CaptureStatus`].
    pub fn index(&self) -> usize {
        self.index
    }

    /// Remember the memory a launch was given, when the stream is recording; counts one
    /// recorded launch. A no-op outside a window, where a launch that fails taints its
    /// own buffers on the spot.
    ///
    /// Each claim is kept once, as it is recorded (a decode step records hundreds of
    /// launches over a few buffers), with the order of its first read and first write.
    pub fn record(&mut self, buffers: impl IntoIterator<Item = BufferBinding>) {
        if self.is_recording() {
            self.record_op(buffers);
            self.launches += 1;
        }
    }

    /// As [`record`](Self::record), for a recorded host-to-device copy: its memory is
    /// remembered in order with the launches', but it is not a launch.
    pub fn record_copy(&mut self, buffers: impl IntoIterator<Item = BufferBinding>) {
        if self.is_recording() {
            self.record_op(buffers);
            self.copies += 1;
        }
    }

    /// As [`record`](Self::record), each buffer with its slot, when it is one: a slot's
    /// use is kept as a claim of its own, so a rebind moves exactly it.
    pub fn record_slotted(
        &mut self,
        buffers: impl IntoIterator<Item = (BufferBinding, Option<SlotName>)>,
    ) {
        if self.is_recording() {
            let op = self.ops;
            for (b, slot) in buffers {
                self.claims.record(op, b, slot);
            }
            self.ops += 1;
            self.launches += 1;
        }
    }

    fn record_op(&mut self, buffers: impl IntoIterator<Item = BufferBinding>) {
        let op = self.ops;
        for b in buffers {
            self.claims.record(op, b, None);
        }
        self.ops += 1;
    }

    /// Remember that a launch was given the memory at `location`, owned by `stream`, when
    /// the stream is recording.
    pub fn touch(&mut self, stream: StreamId, location: MemoryLocation) {
        if self.is_recording() {
            let page = TouchedPage {
                stream,
                pool: location.pool,
                page: location.page,
            };
            // A window touches few pages, many times each: keep each once.
            if !self.touched.contains(&page) {
                self.touched.push(page);
            }
        }
    }

    /// The pages the recording touched, each named once.
    pub fn take_touched(&mut self) -> Vec<TouchedPage> {
        let mut touched = std::mem::take(&mut self.touched);
        touched.sort_unstable();
        touched.dedup();
        touched
    }

    /// What this stream's reservations may do to the pages held, decided under the
    /// device's capture state (see [`CaptureStatus::with_pages`] to act on it).
    pub fn page_update(&self) -> PageUpdate {
        self.status.page_update(self.index)
    }

    /// Hold `staging` until the window opens, when the stream is preparing a capture: a
    /// recorded copy keeps its staging for the graph's life, so the recorded run needs a
    /// slice per copy where warmup could reuse one.
    pub fn prime(&mut self, staging: &ManagedMemoryBinding) {
        if matches!(self.state, State::Prepare { .. }) {
            self.primed.push(staging.clone());
        }
    }

    /// Hold the staging a recorded copy reads until the window closes, when the stream
    /// is recording: every replay re-reads it, so no later copy of the same window may be
    /// staged over it. Closing the window hands it to the graph (through the host pool's
    /// retention) or releases it.
    pub fn hold(&mut self, staging: &ManagedMemoryBinding) {
        if self.is_recording() {
            self.held.push(staging.clone());
        }
    }

    /// Keep `binding` (memory of another pooled stream a recorded launch was given) for
    /// the graph this window seals into, when the stream is recording: that stream's
    /// pools are not armed by this window, so touching cannot pin it.
    pub fn pin_foreign(&mut self, binding: ManagedMemoryBinding) {
        if self.is_recording() && !self.foreign.iter().any(|b| b.id() == binding.id()) {
            self.foreign.push(binding);
        }
    }

    /// Keeps `value` (what recorded work references) for the graph this recording seals
    /// into. Only meaningful while recording.
    pub fn keep(&mut self, value: Box<dyn Any + Send>) {
        if self.is_recording() {
            self.kept.push(value);
        }
    }

    /// What [`keep`](Self::keep) kept, taken as the window closes.
    pub fn take_kept(&mut self) -> Vec<Box<dyn Any + Send>> {
        std::mem::take(&mut self.kept)
    }

    /// The other streams' memory the window's launches were given, taken as it closes.
    pub fn take_foreign(&mut self) -> Vec<ManagedMemoryBinding> {
        std::mem::take(&mut self.foreign)
    }

    /// Releases what [`hold`](Self::hold) kept, once the pools have retained it.
    pub fn release_held(&mut self) {
        self.held.clear();
    }

    /// The memory of the capture that just closed, each claim named once (write winning
    /// over read), leaving out memory already gone. Call after
    /// [`recorded_inputs`](Self::recorded_inputs).
    pub fn take_recorded(&mut self) -> Vec<BufferBinding> {
        let merged = self.claims.merged();
        self.claims.clear();
        merged
    }

    /// What the window's operations were given, in order, taken as it seals: the graph
    /// keeps it, to compute its inputs again when a slot is rebound.
    pub(crate) fn take_claims(&mut self) -> Claims {
        std::mem::take(&mut self.claims)
    }

    /// The bytes the recording reads before recorded launches (or copies) wrote them, in
    /// first-read order, each named once: what a replay must find written before it
    /// runs. A read the window partly wrote first leaves only its unwritten parts as
    /// inputs: a replay rewrites the rest before it reads them. Call before
    /// [`take_recorded`](Self::take_recorded).
    pub fn recorded_inputs(&self) -> Vec<ClaimKey> {
        self.claims.inputs()
    }

    /// The parts of `key` that no claim recorded so far in this window writes, appended
    /// to `out` in order: what a launch recorded now reads from before the window (rules
    /// 11 and 14). Empty when the window wrote every byte of `key`.
    pub fn unwritten_parts(&self, key: ClaimKey, out: &mut Vec<ClaimKey>) {
        self.claims.unwritten_parts(key, out);
    }

    /// Whether launches recorded earlier in this window write every byte of `key`: a
    /// later recorded launch may read them, since a replay runs the writers first. Bytes
    /// the window only partly wrote are still inputs (rules 11 and 14).
    pub fn writes_before(&self, key: ClaimKey) -> bool {
        self.claims.writes_all(key)
    }

    /// The lane the operation being recorded now goes to: [`Lane::ORIGIN`] for the
    /// window's own stream, another for a branch it forked (rule 28). The core hands it
    /// to the backend's calls that record work (`lane` of
    /// [`Backend::launch`](crate::Backend::launch)).
    pub(crate) fn lane(&self) -> Lane {
        self.lanes.current()
    }

    /// What the window that just ended keeps of its lanes for its graph's rebinds
    /// (rule 27); empty afterwards.
    pub(crate) fn take_races(&mut self) -> RaceRecord {
        std::mem::take(&mut self.races)
    }

    /// The window's branches, for the core.
    pub(crate) fn lanes(&mut self) -> &mut BranchClocks {
        &mut self.lanes
    }

    /// The window's branches, read only.
    pub(crate) fn lanes_ref(&self) -> &BranchClocks {
        &self.lanes
    }

    /// Which phase of the window this is (a new one at each prepare and begin).
    pub(crate) fn phase(&self) -> u64 {
        self.phase
    }

    /// How many operations (launches and copies) the window recorded so far: the next
    /// one's place.
    pub(crate) fn ops(&self) -> u64 {
        self.ops
    }

    /// How many launches the current (or just closed) window recorded.
    pub fn launches(&self) -> u64 {
        self.launches
    }

    /// Doom the recording: work inside the window failed or was skipped. The first
    /// failure wins, and a stream that is not recording has no window to doom.
    pub fn fail(&mut self, error: ServerError) {
        if self.is_recording() && self.failure.is_none() {
            self.failure = Some(error);
        }
    }

    /// How many host-to-device copies the current (or just closed) window recorded.
    /// Each re-reads its staging, which [`hold`](Self::hold) keeps for the graph's life.
    pub fn copies(&self) -> u64 {
        self.copies
    }

    /// The failure that doomed this window, taken as it closes.
    pub fn take_failure(&mut self) -> Option<ServerError> {
        self.failure.take()
    }

    /// Whether the window has a failure recorded (without taking it).
    pub fn is_doomed(&self) -> bool {
        self.failure.is_some()
    }

    /// Whether launches on the stream are being recorded right now.
    pub fn is_recording(&self) -> bool {
        matches!(self.state, State::Capture { .. })
    }

    /// Whether a capture is prepared or recording.
    pub fn is_active(&self) -> bool {
        !matches!(self.state, State::NoCapture)
    }

    /// The logical stream that opened the window, while one is open.
    pub fn owner(&self) -> Option<StreamId> {
        match self.state {
            State::NoCapture => None,
            State::Prepare { owner } | State::Capture { owner } => Some(owner),
        }
    }

    /// The [`CacheMode`] the metadata info cache should run in: `Capture` from prepare
    /// until the window closes, `Normal` otherwise.
    pub fn cache_mode(&self) -> CacheMode {
        match self.state {
            State::NoCapture => CacheMode::Normal,
            State::Prepare { .. } | State::Capture { .. } => CacheMode::Capture,
        }
    }

    /// Start the warmup run; `begin` may open the window afterwards. The recording starts
    /// empty.
    ///
    /// # Errors
    ///
    /// [`ServerError::GraphState`] when a capture is already prepared or recording,
    /// leaving both the state and the recording untouched.
    pub fn prepare(&mut self, owner: StreamId) -> Result<(), ServerError> {
        match self.state {
            State::NoCapture => {
                self.clear();
                self.abandoned = None;
                self.state = State::Prepare { owner };
                self.status.update(
                    self.index,
                    Slot {
                        owner: Some(owner),
                        recording: false,
                    },
                );
                Ok(())
            }
            State::Prepare { owner: held } => Err(ServerError::graph_state_in(
                "prepare",
                None,
                held,
                "is prepared on this stream: end it, or abort it, before preparing again",
            )),
            State::Capture { owner: held } => Err(ServerError::graph_state_in(
                "prepare",
                None,
                held,
                "is recording on this stream: end it, or abort it, before preparing again",
            )),
        }
    }

    /// Open the window: launches from here until `end` are recorded rather than executed.
    /// The staging the warmup run primed goes back to the pool, for the recorded run to
    /// reuse. The state moves before any of the caller's work.
    ///
    /// # Errors
    ///
    /// [`ServerError::GraphState`] when no capture is prepared, or one is already
    /// recording; nothing is changed.
    pub fn begin(&mut self) -> Result<(), ServerError> {
        match self.state {
            State::Prepare { owner } => {
                self.state = State::Capture { owner };
                self.status.update(
                    self.index,
                    Slot {
                        owner: Some(owner),
                        recording: true,
                    },
                );
                self.primed.clear();
                self.lanes = BranchClocks::default();
                self.phase += 1;
                Ok(())
            }
            State::NoCapture => Err(ServerError::graph_state(
                "begin",
                "no capture is prepared on this stream (call prepare first)",
            )),
            State::Capture { owner } => Err(ServerError::graph_state_in(
                "begin",
                None,
                owner,
                "is already recording on this stream",
            )),
        }
    }

    /// Close the window, saying whether `caller` owned it. The state moves first, so no
    /// later failure can wedge the stream in capture mode; the recording survives for
    /// `take_recorded` to collect.
    ///
    /// # Errors
    ///
    /// - From `Prepare`: the window never opened; the stream is disarmed (back to
    ///   no-capture) and [`ServerError::GraphState`] says so, or, when `caller` is not
    ///   the owner, [`ServerError::Abandoned`] (the owner's later `end` hears of it too).
    /// - From no-capture, to the owner of a window another stream abandoned:
    ///   [`ServerError::Abandoned`] naming both.
    /// - Otherwise from no-capture: [`ServerError::GraphState`]; nothing is changed.
    pub fn end(&mut self, caller: StreamId) -> Result<CaptureEnd, ServerError> {
        match self.state {
            State::Capture { owner } => {
                self.races = self.lanes.take_record();
                self.lanes = BranchClocks::default();
                self.phase += 1;
                // The device still sees this stream recording until the driver capture
                // is closed (`driver_closed`): nothing may allocate, release or load
                // in between (rule 20).
                self.state = State::NoCapture;
                self.closing = true;
                if owner == caller {
                    Ok(CaptureEnd::Owned)
                } else {
                    self.abandoned = Some((owner, caller));
                    Ok(CaptureEnd::Abandoned { owner, by: caller })
                }
            }
            State::Prepare { owner } => {
                self.state = State::NoCapture;
                self.status.update(self.index, Slot::default());
                self.clear();
                if owner != caller {
                    // A foreign end abandons a prepared window too (rule 12).
                    self.abandoned = Some((owner, caller));
                    return Err(ServerError::Abandoned { owner, by: caller });
                }
                Err(ServerError::graph_state_in(
                    "end",
                    None,
                    owner,
                    "was prepared and never opened; disarmed",
                ))
            }
            State::NoCapture => match self.abandoned {
                Some((owner, by)) if owner == caller => {
                    self.abandoned = None;
                    Err(ServerError::Abandoned { owner, by })
                }
                _ => Err(ServerError::graph_state(
                    "end",
                    "nothing is recording on this stream",
                )),
            },
        }
    }

    /// The driver capture `end` left open is closed: the device stops seeing this
    /// stream record. A no-op when nothing is closing.
    pub fn driver_closed(&mut self) {
        if self.closing {
            self.closing = false;
            self.status.update(self.index, Slot::default());
        }
    }

    /// Give up a capture, restoring the stream to no-capture. Whatever it had recorded,
    /// touched, primed or retained goes with it.
    pub fn abort(&mut self) {
        match self.state {
            State::NoCapture => self.driver_closed(),
            State::Prepare { .. } | State::Capture { .. } => {
                self.state = State::NoCapture;
                self.closing = false;
                self.status.update(self.index, Slot::default());
            }
        }
        self.clear();
    }

    fn clear(&mut self) {
        self.claims.clear();
        self.ops = 0;
        self.launches = 0;
        self.touched.clear();
        self.copies = 0;
        self.primed.clear();
        self.held.clear();
        self.foreign.clear();
        self.kept.clear();
        self.failure = None;
        self.lanes = BranchClocks::default();
        self.races = RaceRecord::default();
        self.phase += 1;
    }
}

impl fmt::Debug for StreamCapture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamCapture")
            .field("index", &self.index)
            .field("state", &self.state)
            .field("recorded", &self.claims.len())
            .field("launches", &self.launches)
            .field("touched", &self.touched.len())
            .field("copies", &self.copies)
            .field("primed", &self.primed.len())
            .field("held", &self.held.len())
            .field("doomed", &self.failure.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests;
