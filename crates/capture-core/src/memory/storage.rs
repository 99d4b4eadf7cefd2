//! `ComputeStorage`: a backend's raw allocations, which pools carve into slices.

use crate::error::ServerError;
pub use crate::ids::StorageId;
use crate::range::ByteRange;

/// Raw allocations of one kind of memory (device, or pinned host), made and freed by a
/// backend. The memory manager asks it for whole pages only, always of the sizes its
/// pools fix, so memory figures do not depend on the backend.
pub trait ComputeStorage: Send {
    /// What a launch or copy is given for a slice: a device pointer, a buffer and range,
    /// an index into host memory; whatever the backend's driver calls take.
    type Resource: Clone + Send + 'static;

    /// Memory the caller already owns, described for this storage (a device pointer and
    /// size, a `VkBuffer` range): what [`adopt`](Self::adopt) takes. A storage that
    /// cannot adopt memory uses [`std::convert::Infallible`].
    type External: Send + 'static;

    /// Allocates one page of `size` bytes.
    ///
    /// # Errors
    ///
    /// The driver's refusal; an out-of-memory refusal becomes
    /// [`ServerError::OutOfMemory`] with every pool's figures in the manager.
    fn alloc(&mut self, size: u64) -> Result<StorageId, ServerError>;

    /// Frees a page. The manager calls it only for a page with no slice in use. For a
    /// page [`adopt`](Self::adopt) made, it frees nothing and only forgets the page: the
    /// memory is the caller's.
    fn dealloc(&mut self, id: StorageId);

    /// Makes `external` (memory the caller owns and keeps alive) a page of this storage,
    /// which the manager never carves for anything else; returns its id and size in bytes.
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] naming what the backend cannot use.
    fn adopt(&mut self, external: Self::External) -> Result<(StorageId, u64), ServerError>;

    /// The resource for `bytes` of page `id`.
    fn resource(&mut self, id: StorageId, bytes: ByteRange) -> Self::Resource;

    /// Told when a slice goes back to its pool, so a backend that checks lifetimes (the
    /// mock poisons the bytes) can make any later use of them show.
    fn slice_released(&mut self, id: StorageId, bytes: ByteRange) {
        let _ = (id, bytes);
    }
}
