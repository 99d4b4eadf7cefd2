//! What a device keeps of its graph pools (rule 23): each pool's entry (its name, the
//! pooled stream its members live on, its live members), and each member's record on its
//! pooled stream (what its replays write, what is its own). Data only: the pooled
//! stream and the registry hold them; `graph_pool.rs` acts on them.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::ids::{GraphId, GraphPoolId, MemoryId, StorageId};
use crate::range::ByteRange;

/// A graph pool as its device keeps it.
#[derive(Debug)]
pub(crate) struct PoolEntry {
    pub(crate) label: Arc<str>,
    /// The pooled stream its arena lives on, from its first capture.
    pub(crate) pooled: Option<usize>,
    /// Its live members.
    pub(crate) members: BTreeSet<GraphId>,
}

/// What a member graph takes from the others when it replays: the arena bytes it writes,
/// and its own arena allocations, which it never takes from itself.
#[derive(Debug)]
pub(crate) struct PoolMember {
    pub(crate) pool: GraphPoolId,
    /// Its arena allocations, sorted.
    pub(crate) own: Vec<MemoryId>,
    /// The arena bytes its replay writes, by page storage.
    pub(crate) writes: Vec<(StorageId, ByteRange)>,
    /// Replays so far, over its life.
    pub(crate) replays: u64,
}
