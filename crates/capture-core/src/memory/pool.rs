//! `Pool`: one pool's pages, carved into slices; the dynamic pool buckets sizes by
//! powers of two, the persistent pool fits them exactly.

use std::sync::Arc;

use super::SLICE_ALIGNMENT;
use super::handle::{HandleInner, ManagedMemoryHandle};
use super::location::{PoolKind, PoolName};
use super::report::PoolUsage;
use super::storage::{ComputeStorage, StorageId};
use crate::ids::{GraphPoolId, MemoryId};
use crate::range::ByteRange;

/// One slice of a page: its padded bytes, and the manager's own handle while it is
/// handed out.
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) bytes: ByteRange,
    pub(crate) holder: Option<Arc<HandleInner>>,
}

impl Slot {
    /// Handed out, and someone besides the manager still holds a handle or a binding.
    pub(crate) fn in_use(&self) -> bool {
        self.holder
            .as_ref()
            .is_some_and(|h| Arc::strong_count(h) > 1 || Arc::strong_count(&h.binding) > 1)
    }

    /// Handed out, and a handle besides the manager's holds it (a user's buffer).
    pub(crate) fn user_held(&self) -> bool {
        self.holder
            .as_ref()
            .is_some_and(|h| Arc::strong_count(h) > 1)
    }

    pub(crate) fn id(&self) -> Option<MemoryId> {
        self.holder.as_ref().map(|h| h.binding.id)
    }
}

/// One page: a storage allocation of a fixed size, and the slices carved from it so far.
#[derive(Debug)]
pub(crate) struct Page {
    pub(crate) storage: StorageId,
    pub(crate) size: u64,
    /// The slice size this page serves, in the dynamic pool; `None` in the persistent
    /// pool, whose pages hold slices of any size.
    bucket: Option<u64>,
    pub(crate) slots: Vec<Slot>,
    pub(crate) carved: u64,
    /// The graph pool this page belongs to, and its place among that pool's pages (in
    /// the graph-pools pool only).
    pub(crate) arena: Option<(GraphPoolId, u64)>,
}

/// Where a reservation landed: page index and slot index within the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotIndex {
    pub(crate) page: usize,
    pub(crate) slot: usize,
}

/// What a reservation needs when no existing slice fits: a new page of `size` bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Growth {
    pub(crate) page_size: u64,
}

/// One pool of a memory manager.
#[derive(Debug)]
pub(crate) struct Pool {
    pub(crate) name: PoolName,
    /// Index = page number. `None` is a released page's hole, until renumbering.
    pub(crate) pages: Vec<Option<Page>>,
    /// Pages ever allocated from the storage (one driver allocation each).
    allocations: u64,
    /// Pages ever given back to the storage.
    frees: u64,
}

impl Pool {
    pub(crate) fn new(name: PoolName) -> Self {
        Self {
            name,
            pages: Vec::new(),
            allocations: 0,
            frees: 0,
        }
    }

    /// The padded slice size a request of `size` bytes gets in this pool.
    pub(crate) fn padded(&self, size: u64) -> u64 {
        let aligned = size.div_ceil(SLICE_ALIGNMENT) * SLICE_ALIGNMENT;
        match self.name.pool {
            PoolKind::Dynamic => aligned.next_power_of_two(),
            PoolKind::Persistent | PoolKind::Imported | PoolKind::GraphPools => aligned,
        }
    }

    /// The page size this pool grows by to fit a slice of `padded` bytes, its pages being
    /// `page_bytes` (the manager's [`MemoryConfig::page_bytes`](super::MemoryConfig)).
    pub(crate) fn page_size_for(&self, padded: u64, page_bytes: u64) -> u64 {
        match self.name.pool {
            PoolKind::Dynamic | PoolKind::Persistent | PoolKind::GraphPools => {
                padded.max(page_bytes)
            }
            PoolKind::Imported => padded,
        }
    }

    /// Takes back every slice nobody holds any more, except those `keep` names, telling
    /// the storage. Returns the ids that went back.
    pub(crate) fn reclaim<S: ComputeStorage>(
        &mut self,
        storage: &mut S,
        keep: impl Fn(SlotIndex) -> bool,
        freed: &mut impl FnMut(MemoryId),
    ) {
        let shared = self.name.pool == PoolKind::GraphPools;
        let mut released = Vec::new();
        for (p, page) in self.pages.iter_mut().enumerate() {
            let Some(page) = page else { continue };
            for (s, slot) in page.slots.iter_mut().enumerate() {
                if slot.holder.is_some() && !slot.in_use() && !keep(SlotIndex { page: p, slot: s })
                {
                    if let Some(id) = slot.id() {
                        freed(id);
                    }
                    slot.holder = None;
                    if shared {
                        released.push(slot.bytes);
                    } else {
                        storage.slice_released(page.storage, slot.bytes);
                    }
                }
            }
            // A graph pool's slices overlap: only the bytes no held slice covers go
            // back, so a member's live bytes are never reported released.
            for bytes in released.drain(..) {
                for part in page.uncovered(bytes) {
                    storage.slice_released(page.storage, part);
                }
            }
        }
    }

    /// Hands out a free slice of exactly `padded` bytes, or carves one from a page with
    /// room; `None` when the pool has to grow.
    pub(crate) fn take(&mut self, padded: u64, handle: &ManagedMemoryHandle) -> Option<SlotIndex> {
        let dynamic = self.name.pool == PoolKind::Dynamic;
        for (p, page) in self.pages.iter_mut().enumerate() {
            let Some(page) = page else { continue };
            if dynamic && page.bucket != Some(padded) {
                continue;
            }
            if let Some(s) = page
                .slots
                .iter()
                .position(|s| s.holder.is_none() && s.bytes.len() == padded)
            {
                page.slots[s].holder = Some(Arc::clone(&handle.0));
                return Some(SlotIndex { page: p, slot: s });
            }
        }
        for (p, page) in self.pages.iter_mut().enumerate() {
            let Some(page) = page else { continue };
            if dynamic && page.bucket != Some(padded) {
                continue;
            }
            if page.size - page.carved >= padded {
                let bytes = ByteRange::from_bounds(page.carved, page.carved + padded);
                page.carved += padded;
                page.slots.push(Slot {
                    bytes,
                    holder: Some(Arc::clone(&handle.0)),
                });
                return Some(SlotIndex {
                    page: p,
                    slot: page.slots.len() - 1,
                });
            }
        }
        None
    }

    /// Adds a page backed by `storage`, sized for slices of `padded` bytes, at the first
    /// hole (or the end), and returns its index.
    pub(crate) fn add_page(&mut self, storage: StorageId, growth: Growth, padded: u64) -> usize {
        let page = Page {
            storage,
            size: growth.page_size,
            bucket: (self.name.pool == PoolKind::Dynamic).then_some(padded),
            slots: Vec::new(),
            carved: 0,
            arena: None,
        };
        self.allocations += 1;
        match self.pages.iter().position(Option::is_none) {
            Some(hole) => {
                self.pages[hole] = Some(page);
                hole
            }
            None => {
                self.pages.push(Some(page));
                self.pages.len() - 1
            }
        }
    }

    /// Adds an adopted page (`storage`, `size` bytes) holding one slice, the whole page,
    /// held by `handle`: an import, never carved or reused for anything else.
    pub(crate) fn adopt_page(
        &mut self,
        storage: StorageId,
        size: u64,
        handle: &ManagedMemoryHandle,
    ) -> SlotIndex {
        let page = self.add_page(
            storage,
            Growth { page_size: size },
            size.div_ceil(SLICE_ALIGNMENT) * SLICE_ALIGNMENT,
        );
        let p = self.pages[page].as_mut().expect("just added");
        p.carved = p.size;
        p.slots.push(Slot {
            bytes: ByteRange::from_bounds(0, size),
            holder: Some(Arc::clone(&handle.0)),
        });
        SlotIndex { page, slot: 0 }
    }

    /// Installs `handle` as the holder of the free slot `at`.
    pub(crate) fn hold(&mut self, at: SlotIndex, handle: &ManagedMemoryHandle) {
        if let Some(slot) = self
            .pages
            .get_mut(at.page)
            .and_then(Option::as_mut)
            .and_then(|p| p.slots.get_mut(at.slot))
        {
            slot.holder = Some(Arc::clone(&handle.0));
        }
    }

    pub(crate) fn slot(&self, at: SlotIndex) -> Option<&Slot> {
        self.pages.get(at.page)?.as_ref()?.slots.get(at.slot)
    }

    pub(crate) fn page(&self, index: usize) -> Option<&Page> {
        self.pages.get(index)?.as_ref()
    }

    /// Indices of the pages no slice of is handed out.
    pub(crate) fn empty_pages(&self) -> Vec<usize> {
        self.pages
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                p.as_ref()
                    .filter(|p| p.slots.iter().all(|s| s.holder.is_none()))
                    .map(|_| i)
            })
            .collect()
    }

    /// Removes page `index`, leaving a hole so no other page's number changes.
    pub(crate) fn release_page(&mut self, index: usize) -> Option<Page> {
        let page = self.pages.get_mut(index)?.take();
        self.frees += u64::from(page.is_some());
        page
    }

    /// Closes the holes: pages keep their order, numbers become dense. Returns, for each
    /// old index, the new one.
    pub(crate) fn renumber(&mut self) -> Vec<Option<usize>> {
        let mut map = Vec::with_capacity(self.pages.len());
        let mut next = 0;
        for p in &self.pages {
            if p.is_some() {
                map.push(Some(next));
                next += 1;
            } else {
                map.push(None);
            }
        }
        self.pages.retain(Option::is_some);
        map
    }

    pub(crate) fn has_holes(&self) -> bool {
        self.pages.iter().any(Option::is_none)
    }

    pub(crate) fn reserved(&self) -> u64 {
        self.pages.iter().flatten().map(|p| p.size).sum()
    }

    pub(crate) fn usage(&self) -> PoolUsage {
        let mut usage = PoolUsage {
            pool: self.name,
            pages: 0,
            reserved: 0,
            in_use: 0,
            slices_in_use: 0,
            allocations: self.allocations,
            frees: self.frees,
        };
        for page in self.pages.iter().flatten() {
            usage.pages += 1;
            usage.reserved += page.size;
            if page.arena.is_some() {
                usage.in_use += page.held_union(Slot::in_use);
                usage.slices_in_use += page.slots.iter().filter(|s| s.in_use()).count() as u64;
                continue;
            }
            for slot in page.slots.iter().filter(|s| s.in_use()) {
                usage.in_use += slot.bytes.len();
                usage.slices_in_use += 1;
            }
        }
        usage
    }
}
