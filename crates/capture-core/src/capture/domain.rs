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

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::ids::StreamId;
use crate::lock_order::{Level, Ordered};

/// Which windows record in each device of a domain: `(device, pooled stream)` to the
/// logical stream that owns the window.
#[derive(Debug, Default)]
pub(crate) struct Recordings {
    windows: BTreeMap<(u64, usize), StreamId>,
}

impl Recordings {
    /// Notes whether pooled stream `index` of device `member` records, and for whom.
    pub(crate) fn set(&mut self, member: u64, index: usize, recording: Option<StreamId>) {
        match recording {
            Some(owner) => {
                self.windows.insert((member, index), owner);
            }
            None => {
                self.windows.remove(&(member, index));
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
        self.lock().leave(member);
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
