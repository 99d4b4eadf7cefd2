//! Memory: storages carved into pages and slices, owning handles and non-owning
//! bindings, the two pools, capture arming, and reports.
//!
//! - Slices are aligned to [`SLICE_ALIGNMENT`] and pages have fixed sizes per pool, the
//!   same on every backend, so memory figures and traces do not depend on the backend.
//! - A [`ManagedMemoryHandle`] owns; a [`ManagedMemoryBinding`] only keeps the slice out
//!   of its pool. A slice goes back to its pool when neither is held.

mod access;
mod arena;
mod binding;
mod handle;
mod location;
mod management;
mod page_update;
mod place;
mod pool;
mod recent;
mod report;
mod storage;

pub use access::Access;
pub use binding::{BufferBinding, ClaimKey};
pub use handle::{ManagedMemoryBinding, ManagedMemoryHandle};
pub use location::{MemoryKind, MemoryLocation, PoolKind, PoolName};
pub use management::{
    AllocGate, AllocationMode, CleanupReport, MemoryConfig, MemoryIds, MemoryManagement,
};
pub use page_update::PageUpdate;
pub(crate) use place::{ArenaPlace, subtract};
pub use report::{MemoryReport, PoolUsage};
pub use storage::{ComputeStorage, ExternalPlace, StorageId};

/// Every slice starts at a multiple of this many bytes and its padded size is one too.
pub const SLICE_ALIGNMENT: u64 = 256;

/// Page size of the dynamic pool unless [`MemoryConfig::with_page_bytes`] sets another;
/// a larger slice gets a page of its own padded size.
pub const DYNAMIC_PAGE_BYTES: u64 = 1 << 20;

/// Page size of the persistent pool (and the graph pools') unless
/// [`MemoryConfig::with_page_bytes`] sets another; a larger slice gets a page of its own
/// padded size.
pub const PERSISTENT_PAGE_BYTES: u64 = DYNAMIC_PAGE_BYTES;

/// The largest single allocation a manager accepts (1 TiB).
pub const MAX_ALLOCATION_BYTES: u64 = 1 << 40;
