//! `DeviceCaptures` and `CaptureStatus`: which pooled streams of a device are in a
//! capture window right now, and the page decisions that depend on it.
//!
//! Every page decision ([`PageUpdate`]) and every lifecycle transition that starts or
//! stops recording is made under this one lock, so a `begin` on one thread and a page
//! release or pool growth on another cannot interleave: either the release happens
//! wholly before the window opens, or it is refused.

use std::fmt;
use std::sync::{Arc, Mutex};

use crate::lock_order::{Level, Ordered};

use super::domain::{CaptureDomain, Recordings};
use crate::ids::StreamId;
use crate::memory::PageUpdate;

/// One pooled stream's position, as the device sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Slot {
    /// The logical stream whose window is active (prepared or recording).
    pub(crate) owner: Option<StreamId>,
    /// Whether that window records.
    pub(crate) recording: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Slots {
    pub(crate) slots: Vec<Slot>,
}

impl Slots {
    /// The owner of the first recording window other than `index`'s, in stream order.
    fn other_recording(&self, index: usize) -> Option<StreamId> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(i, s)| *i != index && s.recording)
            .find_map(|(_, s)| s.owner)
    }
}

/// The captures of a whole device: which pooled streams record, whether the driver's
/// capture breaks on any allocation in its domain, and the domain the device shares
/// with every other device on the same driver context.
pub struct CaptureStatus {
    allocation_breaks_capture: bool,
    slots: Mutex<Slots>,
    domain: CaptureDomain,
    member: u64,
}

impl CaptureStatus {
    fn lock(&self) -> Ordered<'_, Slots> {
        // A panic while holding this lock cannot leave the slots half-updated: every
        // write is a single field store. Recover the data rather than propagate poison.
        Ordered::lock(&self.slots, Level::Captures)
    }

    /// Whether any pooled stream of the device is recording.
    pub fn is_any_recording(&self) -> bool {
        self.lock().slots.iter().any(|s| s.recording)
    }

    /// The logical streams whose windows are active (prepared or recording), in
    /// pooled-stream order.
    pub fn active(&self) -> Vec<StreamId> {
        self.lock().slots.iter().filter_map(|s| s.owner).collect()
    }

    /// The logical streams whose windows record, in pooled-stream order.
    pub fn recording(&self) -> Vec<StreamId> {
        self.lock()
            .slots
            .iter()
            .filter(|s| s.recording)
            .filter_map(|s| s.owner)
            .collect()
    }

    /// Whether an allocation anywhere in the process breaks a recording capture (CUDA's
    /// global mode, and the mock modelling it).
    pub fn allocation_breaks_capture(&self) -> bool {
        self.allocation_breaks_capture
    }

    /// Holds the device's capture state still while `f` decides and carries out a page
    /// change for pooled stream `index`: no window opens or closes until `f` returns.
    ///
    /// The domain is held too: no `begin` on another device of the same driver context
    /// opens a window until `f` returns.
    pub fn with_pages<R>(&self, index: usize, f: impl FnOnce(PageUpdate) -> R) -> R {
        let slots = self.lock();
        let domain = self.domain.lock();
        let update = self.decide(&slots, &domain, index);
        f(update)
    }

    /// What pooled stream `index`'s reservations may do to pages right now. A snapshot:
    /// to act on it without racing a `begin`, use [`with_pages`](Self::with_pages).
    pub fn page_update(&self, index: usize) -> PageUpdate {
        let slots = self.lock();
        let domain = self.domain.lock();
        self.decide(&slots, &domain, index)
    }

    fn decide(&self, slots: &Slots, domain: &Recordings, index: usize) -> PageUpdate {
        if let Some(own) = slots.slots.get(index).filter(|s| s.recording)
            && let Some(recording) = own.owner
        {
            return PageUpdate::Freeze { recording };
        }
        let other = slots
            .other_recording(index)
            .or_else(|| domain.other(self.member));
        match other {
            None => PageUpdate::Free,
            Some(recording) if self.allocation_breaks_capture => PageUpdate::Freeze { recording },
            Some(recording) => PageUpdate::Hold { recording },
        }
    }

    /// Runs `f` under the capture state unless pooled stream `index` records; `None`
    /// when it does. A `begin` takes the same lock to start recording, so `f` never
    /// overlaps the stream's driver capture.
    pub(crate) fn unless_recording<R>(&self, index: usize, f: impl FnOnce() -> R) -> Option<R> {
        let slots = self.lock();
        if slots.slots.get(index).is_some_and(|s| s.recording) {
            return None;
        }
        Some(f())
    }

    /// Runs `f` under the capture state with the first recording stream, if any, of
    /// this device or (when `f` needs to know) of another device in its domain: a
    /// decision that depends on whether any stream records (a kernel load) cannot race
    /// a `begin` or an `end` on another thread or device (rule 20).
    pub(crate) fn with_recording<R>(&self, f: impl FnOnce(Option<Recording>) -> R) -> R {
        let slots = self.lock();
        let domain = self.domain.lock();
        let recording = slots
            .slots
            .iter()
            .filter(|s| s.recording)
            .find_map(|s| s.owner)
            .map(Recording::Here)
            .or_else(|| domain.other(self.member).map(Recording::Elsewhere));
        f(recording)
    }

    /// The owner of the window recording on pooled stream `index`, if one is.
    pub(crate) fn recording_owner(&self, index: usize) -> Option<StreamId> {
        self.lock()
            .slots
            .get(index)
            .filter(|s| s.recording)
            .and_then(|s| s.owner)
    }

    pub(crate) fn update(&self, index: usize, slot: Slot) {
        let mut slots = self.lock();
        if let Some(s) = slots.slots.get_mut(index) {
            *s = slot;
            let recording = slot.owner.filter(|_| slot.recording);
            let mut domain = self.domain.lock();
            let released = domain.set(self.member, index, recording);
            // Dropped here, under the domain: a gone device's pages and modules.
            drop(released);
        }
    }

    /// The domain the device shares with every other device on its driver context.
    pub fn domain(&self) -> &CaptureDomain {
        &self.domain
    }

    /// The device is going: forgets whatever windows of its the domain still lists.
    /// Called once its streams finished (which closed its windows), before what it
    /// leaves behind is released; not on drop, as that release may happen under the
    /// domain's lock.
    pub(crate) fn leave_domain(&self) {
        self.domain.leave(self.member);
    }

    fn add_slot(&self) -> usize {
        let mut slots = self.lock();
        slots.slots.push(Slot::default());
        slots.slots.len() - 1
    }
}

impl fmt::Debug for CaptureStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureStatus")
            .field("allocation_breaks_capture", &self.allocation_breaks_capture)
            .field("slots", &self.lock().slots)
            .field("domain", &self.domain)
            .finish()
    }
}

/// A window that records, as a page or load decision sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Recording {
    /// On this device: the logical stream that owns it.
    Here(StreamId),
    /// On another device of the same driver context: that device's logical stream.
    Elsewhere(StreamId),
}

/// A shared handle on a device's [`CaptureStatus`]; each pooled stream's
/// `StreamCapture` is created from it.
#[derive(Clone, Debug)]
pub struct DeviceCaptures(Arc<CaptureStatus>);

impl DeviceCaptures {
    /// The captures of a new device in a domain of its own. `allocation_breaks_capture`:
    /// whether an allocation anywhere in the domain invalidates a recording (then, while
    /// any stream records, no stream's pool may grow).
    pub fn new(allocation_breaks_capture: bool) -> Self {
        Self::in_domain(allocation_breaks_capture, CaptureDomain::new())
    }

    /// The captures of a new device in `domain`, shared with every other device on the
    /// same driver context.
    pub fn in_domain(allocation_breaks_capture: bool, domain: CaptureDomain) -> Self {
        let member = domain.join();
        Self(Arc::new(CaptureStatus {
            allocation_breaks_capture,
            slots: Mutex::new(Slots::default()),
            domain,
            member,
        }))
    }

    /// The device-wide status.
    pub fn status(&self) -> &CaptureStatus {
        &self.0
    }

    pub(crate) fn register(&self) -> usize {
        self.0.add_slot()
    }

    pub(crate) fn shared(&self) -> Arc<CaptureStatus> {
        Arc::clone(&self.0)
    }
}
