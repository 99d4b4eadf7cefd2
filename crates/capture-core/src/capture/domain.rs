//! `CaptureDomain`: the devices whose captures one driver context's rules join.
//!
//! A driver's capture rules reach past one `Device`: every device built on the same CUDA
//! context (two `Device`s over clones of one backend, or over two backends that
//! retained the same primary context) shares what a page release or a module load does
//! to a capture. The backend hands each device its context's domain
//! ([`Backend::capture_domain`](crate::driver::Backend::capture_domain)); a device's
//! page and load decisions then see the windows every device of the domain records,
//! decided under the domain's lock so no `begin` on another device slips between the
//! check and the driver call.
//!
//! Teardown keeps the same rules (rule 25): what a device (or anything else on the
//! context, a benchmark floor) gives back when it goes — its pages, its modules — is
//! released at once only while no window of the domain records; otherwise the domain
//! keeps it and releases it when the last window closes
//! ([`CaptureDomain::release_at_rest`]).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::ids::StreamId;
use crate::lock_order::{Level, Ordered};

/// What a gone device left for the domain to release once nothing records.
pub(crate) type Remains = Box<dyn Send>;

/// Which windows record in each device of a domain: `(device, pooled stream)` to the
/// logical stream that owns the window; and what waits for them all to close.
#[derive(Default)]
pub(crate) struct Recordings {
    windows: BTreeMap<(u64, usize), StreamId>,
    /// Released when the last window closes (rule 25).
    deferred: Vec<Remains>,
}

impl fmt::Debug for Recordings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recordings")
            .field("windows", &self.windows)
            .field("deferred", &self.deferred.len())
            .finish()
    }
}

impl Recordings {
    /// Notes whether pooled stream `index` of device `member` records, and for whom.
    /// When the last window of the domain closes, returns what waited for it: the
    /// caller drops it while still holding the domain, so no `begin` slips in between.
    #[must_use = "the remains must be dropped under the domain lock"]
    pub(crate) fn set(
        &mut self,
        member: u64,
        index: usize,
        recording: Option<StreamId>,
    ) -> Vec<Remains> {
        match recording {
            Some(owner) => {
                self.windows.insert((member, index), owner);
                Vec::new()
            }
            None => {
                self.windows.remove(&(member, index));
                if self.windows.is_empty() {
                    std::mem::take(&mut self.deferred)
                } else {
                    Vec::new()
                }
            }
        }
    }

    /// The first window recording on a device of the domain other than `member`.
    pub(crate) fn other(&self, member: u64) -> Option<StreamId> {
        self.windows
            .iter()
            .find(|((device, _), _)| *device != member)
            .map(|(_, owner)| *owner)
    }

    /// Forgets every window of `member` (the device is gone).
    fn leave(&mut self, member: u64) {
        self.windows.retain(|(device, _), _| *device != member);
    }
}

#[derive(Default)]
struct Shared {
    recordings: Mutex<Recordings>,
    members: AtomicU64,
}

/// The capture domain of one driver context. Cloning gives another handle on the same
/// domain; [`CaptureDomain::new`] starts one no other device shares.
#[derive(Clone, Default)]
pub struct CaptureDomain(Arc<Shared>);

impl CaptureDomain {
    /// A domain of its own (a driver whose captures nothing outside one device can
    /// break, or the first device of a context).
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `other` is this same domain.
    pub fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// A number for one more device in the domain.
    pub(crate) fn join(&self) -> u64 {
        self.0.members.fetch_add(1, Ordering::Relaxed)
    }

    /// Forgets the windows of device `member`.
    pub(crate) fn leave(&self, member: u64) {
        let mut recordings = self.lock();
        recordings.leave(member);
        let released = if recordings.windows.is_empty() {
            std::mem::take(&mut recordings.deferred)
        } else {
            Vec::new()
        };
        drop(released);
    }

    /// Releases `remains` (what frees pages or unloads modules when dropped) now if no
    /// window of the domain records, under the domain's lock so none opens meanwhile;
    /// otherwise keeps it and releases it when the last window closes (rule 25).
    /// Returns whether it was released now.
    pub fn release_at_rest(&self, remains: Box<dyn Send>) -> bool {
        let mut recordings = self.lock();
        if recordings.windows.is_empty() {
            drop(remains);
            true
        } else {
            recordings.deferred.push(remains);
            false
        }
    }

    /// Runs `f` (a page allocation or a module load outside any device, as a benchmark
    /// floor makes) under the domain's lock if no window of the domain records; `None`
    /// when one does.
    pub fn at_rest<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        let recordings = self.lock();
        recordings.windows.is_empty().then(f)
    }

    /// How many gone devices' remains wait for the domain's windows to close.
    pub fn deferred(&self) -> usize {
        self.lock().deferred.len()
    }

    pub(crate) fn lock(&self) -> Ordered<'_, Recordings> {
        Ordered::lock(&self.0.recordings, Level::Domain)
    }
}

impl fmt::Debug for CaptureDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureDomain")
            .field("recording", &self.lock().windows.len())
            .finish()
    }
}
