//! Where an allocation lives: which memory, which pool, which page, which slice.

use std::fmt;

use crate::ids::PageId;
use crate::range::ByteRange;

/// Which memory a manager hands out: the device's, or the pinned host memory that stages
/// transfers to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MemoryKind {
    /// Memory the device's kernels address.
    Device,
    /// Pinned (page-locked) host memory used as transfer staging.
    Host,
}

/// The two pools of a memory manager.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PoolKind {
    /// Size-bucketed slices (powers of two), reused by any request of the bucket. The
    /// default outside a capture.
    Dynamic,
    /// Exact-fit slices, reused only by a request of the identical padded size. Every
    /// allocation goes here while a capture is armed, matching a graph's static shapes.
    Persistent,
    /// Memory the caller owns and imported (`Device::import`): one page per import, its
    /// one slice the whole of it, never carved for anything else, never freed by the
    /// library. Not a driver allocation of the library's: left out of its page counts.
    Imported,
    /// The arenas of graph pools: while a capture into a graph pool is armed, its
    /// allocations are placed from the start of that pool's pages again, over what the
    /// pool's other members placed there (rule 23), never over what this capture
    /// placed. Each page belongs to one graph pool.
    GraphPools,
}

/// A pool named in full: whose memory, and which pool of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PoolName {
    /// Device or pinned host memory.
    pub memory: MemoryKind,
    /// The pool.
    pub pool: PoolKind,
}

impl fmt::Display for PoolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let memory = match self.memory {
            MemoryKind::Device => "device",
            MemoryKind::Host => "host",
        };
        let pool = match self.pool {
            PoolKind::Dynamic => "dynamic",
            PoolKind::Persistent => "persistent",
            PoolKind::Imported => "imported",
            PoolKind::GraphPools => "graph pools",
        };
        write!(f, "{memory}.{pool}")
    }
}

/// Where one allocation lives: pool, page, the slice's index on that page, and its bytes
/// within the page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemoryLocation {
    /// The pool.
    pub pool: PoolName,
    /// The page within the pool.
    pub page: PageId,
    /// The slice's index on the page.
    pub slice: u32,
    /// The slice's bytes within the page (padded to the slice alignment).
    pub bytes: ByteRange,
}

impl fmt::Display for MemoryLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/slice{}{}",
            self.pool, self.page, self.slice, self.bytes
        )
    }
}
