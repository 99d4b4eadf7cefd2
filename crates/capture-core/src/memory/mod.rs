//! Memory: storages carved into pages and slices, owning handles and non-owning
//! bindings, the two pools, capture arming, and reports.
//!
//! - Slices are aligned to [`SLICE_ALIGNMENT`] and pages have fixed sizes per pool, the
//!   same on every backend, so memory figures and traces do not depend on the backend.
//! - A [`ManagedMemoryHandle`] owns; a [`ManagedMemoryBinding`] only keeps the slice out
//!   of its pool. A slice goes back to its pool when neither is held.

mod binding;
mod handle;
mod location;
mod page_update;
mod report;
mod storage;

pub use binding::{Access, BufferBinding, ClaimKey};
pub use handle::{ManagedMemoryBinding, ManagedMemoryHandle};
pub use location::{MemoryKind, MemoryLocation, PoolKind, PoolName};
pub use page_update::PageUpdate;
pub use report::{MemoryReport, PoolUsage};
pub use storage::{ComputeStorage, StorageId};

/// Every slice starts at a multiple of this many bytes and its padded size is one too.
pub const SLICE_ALIGNMENT: u64 = 256;
