//! `ComputeStorage`: a backend's raw allocations, which pools carve into slices.

use crate::error::ServerError;
pub use crate::ids::StorageId;
use crate::range::ByteRange;

/// Where memory the caller owns lies, as its backend names it: bytes `range` of one
/// address space (a CUDA context's device addresses, one `VkBuffer`, one mock page). Two
/// imports overlap exactly when they name the same space and their ranges intersect; a
/// device refuses a second live import of bytes a first still covers, since the rules
/// (taint, order, races) key memory by its import, and two imports of one memory would be
/// two unrelated buffers to them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExternalPlace {
    /// The address space, as the backend numbers it.
    pub space: u64,
    /// The bytes within it.
    pub range: ByteRange,
}

impl ExternalPlace {
    /// `len` bytes from `start` of `space`.
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] for no bytes, or a range past the address
    /// space: memory no import can be.
    pub fn new(space: u64, start: u64, len: u64) -> Result<Self, ServerError> {
        match ByteRange::new(start, len) {
            Ok(range) => Ok(Self { space, range }),
            Err(why) => Err(ServerError::invalid(
                "imported memory",
                format!("{len} bytes at {start:#x}"),
                format!("an import is at least one byte, within the address space ({why})"),
            )),
        }
    }

    /// Whether the two places share a byte.
    pub fn overlaps(&self, other: &ExternalPlace) -> bool {
        self.space == other.space && self.range.intersection(other.range).is_some()
    }
}

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

    /// Where `external` lies (asked before [`adopt`](Self::adopt), which it does not
    /// replace): what tells a second import of memory a live import covers.
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] naming what the backend cannot use (as `adopt`
    /// would refuse it: a zero size, a range past the address space).
    fn place(&self, external: &Self::External) -> Result<ExternalPlace, ServerError>;

    /// The resource for `bytes` of page `id`.
    fn resource(&mut self, id: StorageId, bytes: ByteRange) -> Self::Resource;

    /// Told when a slice goes back to its pool, so a backend that checks lifetimes (the
    /// mock poisons the bytes) can make any later use of them show.
    fn slice_released(&mut self, id: StorageId, bytes: ByteRange) {
        let _ = (id, bytes);
    }
}
