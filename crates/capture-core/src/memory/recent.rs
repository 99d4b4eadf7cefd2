//! `Recent`: the last few allocations a memory manager located, so the launch path's
//! lookups of the buffers it keeps launching over skip the map and the pool.
//!
//! An entry is what `MemoryManagement::locate` found for a live allocation: its slot,
//! where it lives, its size and its page's storage. None of these change while the
//! allocation is live, and ids are never reused, so an entry is right for as long as
//! its allocation lives and its page keeps its number: the manager empties the cache
//! whenever it takes an allocation back or renumbers pages.

use super::location::{MemoryLocation, PoolKind};
use super::storage::StorageId;
use crate::ids::MemoryId;

/// How many allocations are kept: a launch's buffers and its info words.
const RECENT: usize = 4;

/// One located allocation.
#[derive(Clone, Copy, Debug)]
pub(super) struct Located {
    pub(super) id: MemoryId,
    /// Its slot by pool kind, page and index.
    pub(super) slot: (PoolKind, usize, usize),
    pub(super) location: MemoryLocation,
    /// The allocation's size in bytes.
    pub(super) size: u64,
    /// The storage of its page.
    pub(super) storage: StorageId,
}

/// See the module docs.
#[derive(Debug, Default)]
pub(super) struct Recent {
    entries: [Option<Located>; RECENT],
    /// The entry the next miss replaces.
    next: usize,
}

impl Recent {
    /// Where the entry of `id` is kept, if it is.
    #[inline]
    pub(super) fn position(&self, id: MemoryId) -> Option<usize> {
        self.entries
            .iter()
            .position(|e| e.as_ref().is_some_and(|e| e.id == id))
    }

    /// The entry kept at `at` (where [`position`](Self::position) or
    /// [`keep`](Self::keep) said).
    #[inline]
    pub(super) fn at(&self, at: usize) -> Option<&Located> {
        self.entries.get(at)?.as_ref()
    }

    /// Keeps `entry`, in place of the oldest kept; returns where.
    pub(super) fn keep(&mut self, entry: Located) -> usize {
        let at = self.next;
        self.next = (at + 1) % RECENT;
        self.entries[at] = Some(entry);
        at
    }

    /// Forgets every entry.
    pub(super) fn clear(&mut self) {
        self.entries = [None; RECENT];
    }
}
