//! `ComputeStorage`: a backend's raw allocations, which pools carve into slices.

use std::fmt;

use crate::error::ServerError;
use crate::range::ByteRange;

/// A backend's name for one raw allocation (one page).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StorageId(pub u64);

impl fmt::Display for StorageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "storage#{}", self.0)
    }
}

/// Raw allocations of one kind of memory (device, or pinned host), made and freed by a
/// backend. The memory manager asks it for whole pages only, always of the sizes its
/// pools fix, so memory figures do not depend on the backend.
pub trait ComputeStorage: Send {
    /// What a launch or copy is given for a slice: a device pointer, a buffer and range,
    /// an index into host memory; whatever the backend's driver calls take.
    type Resource: Clone + Send + 'static;

    /// Allocates one page of `size` bytes.
    ///
    /// # Errors
    ///
    /// The driver's refusal; an out-of-memory refusal becomes
    /// [`ServerError::OutOfMemory`] with every pool's figures in the manager.
    fn alloc(&mut self, size: u64) -> Result<StorageId, ServerError>;

    /// Frees a page. The manager calls it only for a page with no slice in use.
    fn dealloc(&mut self, id: StorageId);

    /// The resource for `bytes` of page `id`.
    fn resource(&mut self, id: StorageId, bytes: ByteRange) -> Self::Resource;

    /// Told when a slice goes back to its pool, so a backend that checks lifetimes (the
    /// mock poisons the bytes) can make any later use of them show.
    fn slice_released(&mut self, id: StorageId, bytes: ByteRange) {
        let _ = (id, bytes);
    }
}
