//! Graph-pool arenas (rule 23): the pages of the graph-pools pool, each belonging to one
//! graph pool, where a capture into the pool places its allocations from the start of
//! the pool's pages again, first fit, over the graph-only memory the pool's other
//! members hold there, never over what this capture placed or bound (its touched slots)
//! nor over a slice a buffer handle still holds. Slices of different members overlap;
//! which bytes a member takes from another is what the runtime claims (the overwrite
//! check), so the sharing is checked, never assumed.

use std::sync::Arc;

use super::ClaimKey;
use super::handle::ManagedMemoryHandle;
use super::place::{ArenaPlace, subtract, union_len};
use super::pool::{Page, Pool, Slot, SlotIndex};
use crate::ids::{GraphPoolId, MemoryId, StorageId};
use crate::range::ByteRange;

impl Page {
    /// The parts of `bytes` no handed-out slice of this page covers.
    pub(crate) fn uncovered(&self, bytes: ByteRange) -> Vec<ByteRange> {
        let mut held: Vec<ByteRange> = self
            .slots
            .iter()
            .filter(|s| s.holder.is_some())
            .map(|s| s.bytes)
            .collect();
        subtract(bytes, &mut held)
    }

    /// The bytes of the slices `counted` names, each byte once.
    pub(crate) fn held_union(&self, counted: impl Fn(&Slot) -> bool) -> u64 {
        let mut ranges: Vec<ByteRange> = self
            .slots
            .iter()
            .filter(|s| counted(s))
            .map(|s| s.bytes)
            .collect();
        union_len(&mut ranges)
    }
}

impl Pool {
    /// The page indices of `pool`'s arena, in the order the pool grew by them.
    fn arena_pages(&self, pool: GraphPoolId) -> Vec<usize> {
        let mut pages: Vec<(u64, usize)> = self
            .pages
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match p.as_ref()?.arena {
                Some((owner, seq)) if owner == pool => Some((seq, i)),
                _ => None,
            })
            .collect();
        pages.sort_unstable();
        pages.into_iter().map(|(_, i)| i).collect()
    }

    /// Tags page `index`, just added, as the next page of `pool`'s arena.
    pub(crate) fn tag_arena(&mut self, index: usize, pool: GraphPoolId) {
        let seq = self
            .pages
            .iter()
            .flatten()
            .filter_map(|p| p.arena.filter(|(owner, _)| *owner == pool))
            .map(|(_, seq)| seq + 1)
            .max()
            .unwrap_or(0);
        if let Some(Some(page)) = self.pages.get_mut(index) {
            page.arena = Some((pool, seq));
        }
    }

    /// Places a slice of `padded` bytes in `pool`'s arena, first fit from its first
    /// page, avoiding the handed-out slices `mine` names (this capture's) and those a
    /// buffer handle holds; `None` when the arena has to grow.
    pub(crate) fn place(
        &mut self,
        pool: GraphPoolId,
        padded: u64,
        handle: &ManagedMemoryHandle,
        mine: impl Fn(SlotIndex) -> bool,
    ) -> Option<SlotIndex> {
        for p in self.arena_pages(pool) {
            let page = self.pages[p].as_mut()?;
            let mut taken: Vec<ByteRange> = page
                .slots
                .iter()
                .enumerate()
                .filter(|(s, slot)| {
                    slot.user_held()
                        || (slot.holder.is_some() && mine(SlotIndex { page: p, slot: *s }))
                })
                .map(|(_, slot)| slot.bytes)
                .collect();
            taken.sort_by_key(|r| r.start());
            let mut at = 0;
            for t in &taken {
                if t.start() >= at + padded {
                    break;
                }
                at = at.max(t.end());
            }
            if at + padded > page.size {
                continue;
            }
            let bytes = ByteRange::from_bounds(at, at + padded);
            let holder = Some(Arc::clone(&handle.0));
            page.carved = page.carved.max(bytes.end());
            let slot = match page
                .slots
                .iter()
                .position(|s| s.holder.is_none() && s.bytes == bytes)
            {
                Some(s) => {
                    page.slots[s].holder = holder;
                    s
                }
                None => {
                    page.slots.push(Slot { bytes, holder });
                    page.slots.len() - 1
                }
            };
            return Some(SlotIndex { page: p, slot });
        }
        None
    }

    /// The handed-out slices of the same page that `at`'s bytes overlap and `mine` does
    /// not name: what placing `at` took from other members, as claim keys of theirs.
    pub(crate) fn displaced_by(
        &self,
        at: SlotIndex,
        mine: impl Fn(SlotIndex) -> bool,
        out: &mut Vec<ClaimKey>,
    ) {
        let Some(page) = self.page(at.page) else {
            return;
        };
        let bytes = page.slots[at.slot].bytes;
        for (s, slot) in page.slots.iter().enumerate() {
            let index = SlotIndex {
                page: at.page,
                slot: s,
            };
            if s == at.slot || mine(index) {
                continue;
            }
            if let (Some(id), Some(overlap)) = (slot.id(), slot.bytes.intersection(bytes)) {
                out.push(key_in(id, slot.bytes, overlap));
            }
        }
    }

    /// Where the allocation in slot `at` of an arena page lives, as an [`ArenaPlace`]:
    /// its own bytes (its size, as ledgers count it), from the slice's start.
    pub(crate) fn arena_place(&self, at: SlotIndex) -> Option<ArenaPlace> {
        let page = self.page(at.page)?;
        let (pool, _) = page.arena?;
        let slot = page.slots.get(at.slot)?;
        let size = slot.holder.as_ref()?.binding.size;
        Some(ArenaPlace {
            pool,
            storage: page.storage,
            bytes: ByteRange::from_bounds(slot.bytes.start(), slot.bytes.start() + size),
        })
    }

    /// The handed-out slices of `pool`'s arena that `writes` (bytes of its pages) overlap,
    /// leaving out the allocations `own` names (sorted): what a member writing `writes`
    /// overwrites of the others, as claim keys of theirs.
    pub(crate) fn overwritten_by(
        &self,
        pool: GraphPoolId,
        writes: &[(StorageId, ByteRange)],
        own: &[MemoryId],
        out: &mut Vec<ClaimKey>,
    ) {
        for page in self.pages.iter().flatten() {
            if page.arena.map(|(owner, _)| owner) != Some(pool) {
                continue;
            }
            for slot in &page.slots {
                let Some(id) = slot.id() else { continue };
                if own.binary_search(&id).is_ok() {
                    continue;
                }
                for (storage, bytes) in writes {
                    if *storage != page.storage {
                        continue;
                    }
                    if let Some(overlap) = slot.bytes.intersection(*bytes) {
                        out.push(key_in(id, slot.bytes, overlap));
                    }
                }
            }
        }
    }
}

/// The claim key, in allocation `id`'s own coordinates, of the `overlap` of its slice
/// `slot` (both in page coordinates).
fn key_in(id: MemoryId, slot: ByteRange, overlap: ByteRange) -> ClaimKey {
    ClaimKey {
        memory: id,
        range: ByteRange::from_bounds(overlap.start() - slot.start(), overlap.end() - slot.start()),
    }
}
