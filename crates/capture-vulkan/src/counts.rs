//! `GroupCounts`: the group counts of a capture window's dispatches on a device without
//! conditional rendering (rule 30's indirect fallback, `loops.rs`). There every dispatch
//! a window records is `vkCmdDispatchIndirect`, reading its three group counts from a
//! slot of the window's own, so a loop replay can stop the dispatches of the iterations
//! after the flag's by zeroing them.
//!
//! A window's slots live in chunks, taken from pages a stream keeps ([`CountPages`]):
//! each chunk holds [`SLOTS_PER_CHUNK`] live slots, which the dispatches read, then as
//! many pristine ones, which a loop copies back over the live ones when it ends (so a
//! plain replay runs everything). The host writes a slot (both copies) when its dispatch
//! is recorded, into a window no submission holds yet; from then on only commands write
//! it, in queue order: a loop's kernels, and an update of a launch's grid (rule 26, an
//! update command in the stream's primary), so a replay or loop already queued keeps the
//! counts it was enqueued with. The window's first slot is the loop's own: its step
//! kernel reads it, so it stops counting once the counts are zeroed.
//!
//! The pages are host-visible coherent memory (as the `go` words are); a chunk handed
//! back (once its window is freed, behind the fence of its last replay) is handed out
//! again, its stale slots rewritten as dispatches take them.

use ash::vk;
use capture_core::ServerError;

use crate::memory::MemoryUse;
use crate::raw::{self, Gpu, Page};

/// Slots per chunk.
const SLOTS_PER_CHUNK: u32 = 128;

/// Bytes of a slot: three `u32` group counts and a pad word.
const SLOT_BYTES: u64 = 16;

/// Bytes of a chunk's live slots (the pristine copies follow them).
const LIVE_BYTES: u64 = SLOTS_PER_CHUNK as u64 * SLOT_BYTES;

/// Bytes of a chunk: its live slots, then their pristine copies. A multiple of every
/// device's storage-buffer offset alignment (at most 256), so a chunk binds alone.
const CHUNK_BYTES: u64 = 2 * LIVE_BYTES;

/// Chunks per page.
const CHUNKS_PER_PAGE: u64 = 16;

/// Chunks a window has room for before its list grows: 1,024 dispatches (so a long
/// recording allocates nothing per launch but the rare chunk).
const CHUNKS_PER_WINDOW: usize = 8;

/// A window's chunk of slots: its page's buffer, its offset there, and where the host
/// maps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chunk {
    buffer: vk::Buffer,
    offset: u64,
    mapped: usize,
}

impl Chunk {
    /// What a kernel binds to zero or restore it: the buffer, offset and length.
    pub(crate) fn binding(&self) -> (vk::Buffer, u64, u64) {
        (self.buffer, self.offset, CHUNK_BYTES)
    }
}

/// A dispatch's slot: its chunk and its index there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    chunk: Chunk,
    index: u32,
}

impl Slot {
    /// Where the dispatch reads its live group counts: the buffer and the byte offset.
    pub(crate) fn at(&self) -> (vk::Buffer, u64) {
        (
            self.chunk.buffer,
            self.chunk.offset + SLOT_BYTES * u64::from(self.index),
        )
    }

    /// Where its pristine copy lies.
    pub(crate) fn pristine(&self) -> (vk::Buffer, u64) {
        let (buffer, at) = self.at();
        (buffer, at + LIVE_BYTES)
    }

    /// The bytes of a slot holding `grid`.
    pub(crate) fn bytes(grid: [u32; 3]) -> [u8; 12] {
        let mut bytes = [0u8; 12];
        for (to, count) in bytes.chunks_exact_mut(4).zip(grid) {
            to.copy_from_slice(&count.to_le_bytes());
        }
        bytes
    }

    /// Writes `grid` into both copies from the host: only into a window no submission
    /// holds yet.
    fn write(&self, grid: [u32; 3]) {
        let bytes = Self::bytes(grid);
        let at = self.chunk.mapped + (SLOT_BYTES * u64::from(self.index)) as usize;
        raw::write_mapped(at, &bytes);
        raw::write_mapped(at + LIVE_BYTES as usize, &bytes);
    }
}

/// A stream's pages of chunks, and the chunks no window holds.
#[derive(Default)]
pub(crate) struct CountPages {
    pages: Vec<Page>,
    free: Vec<Chunk>,
}

impl CountPages {
    /// A chunk for a window; a page of them made (of the memory `memory` names, which is
    /// mapped and coherent) when none is free.
    fn take(&mut self, gpu: &Gpu, memory: &MemoryUse) -> Result<Chunk, ServerError> {
        if let Some(chunk) = self.free.pop() {
            return Ok(chunk);
        }
        let page = raw::create_counts(gpu, CHUNKS_PER_PAGE * CHUNK_BYTES, memory)?;
        let Some(mapped) = page.mapped else {
            raw::destroy_page(gpu, page);
            return Err(ServerError::graph_state(
                "capture",
                "the memory for indirect dispatches' group counts must be mapped",
            ));
        };
        let buffer = page.buffer;
        self.pages.push(page);
        let chunk = |i: u64| Chunk {
            buffer,
            offset: i * CHUNK_BYTES,
            mapped: mapped + (i * CHUNK_BYTES) as usize,
        };
        self.free.extend((1..CHUNKS_PER_PAGE).rev().map(chunk));
        Ok(chunk(0))
    }

    /// Destroys the pages, once nothing pending uses them (the stream's teardown).
    pub(crate) fn destroy(&mut self, gpu: &Gpu) {
        self.free.clear();
        for page in self.pages.drain(..) {
            raw::destroy_page(gpu, page);
        }
    }
}

/// A window's slots: its chunks, how many slots of the last are taken, and the slot of
/// each updatable launch with the grid it holds.
pub(crate) struct GroupCounts {
    chunks: Vec<Chunk>,
    used: u32,
    updatable: Vec<(u64, Slot, [u32; 3])>,
}

impl GroupCounts {
    /// A window's first chunk, its first slot the loop's own (one group).
    pub(crate) fn new(
        pages: &mut CountPages,
        gpu: &Gpu,
        memory: &MemoryUse,
    ) -> Result<Self, ServerError> {
        let chunk = pages.take(gpu, memory)?;
        let mut chunks = Vec::with_capacity(CHUNKS_PER_WINDOW);
        chunks.push(chunk);
        let counts = Self {
            chunks,
            used: 1,
            updatable: Vec::new(),
        };
        counts.step().write([1, 1, 1]);
        Ok(counts)
    }

    /// The loop's own slot, which its step kernel's dispatch reads.
    pub(crate) fn step(&self) -> Slot {
        Slot {
            chunk: self.chunks[0],
            index: 0,
        }
    }

    /// The window's chunks, which a loop zeroes and restores.
    pub(crate) fn chunks(&self) -> &[Chunk] {
        &self.chunks
    }

    /// A slot for a dispatch of `grid` the window records, written; a chunk taken when
    /// the last is full.
    pub(crate) fn slot(
        &mut self,
        pages: &mut CountPages,
        gpu: &Gpu,
        memory: &MemoryUse,
        grid: [u32; 3],
    ) -> Result<Slot, ServerError> {
        if self.used == SLOTS_PER_CHUNK {
            let chunk = pages.take(gpu, memory)?;
            self.chunks.push(chunk);
            self.used = 0;
        }
        let slot = Slot {
            chunk: *self.chunks.last().expect("a window has a chunk"),
            index: self.used,
        };
        self.used += 1;
        slot.write(grid);
        Ok(slot)
    }

    /// Keeps the slot of updatable launch `node`, recorded with `grid`.
    pub(crate) fn remember(&mut self, node: u64, slot: Slot, grid: [u32; 3]) {
        self.updatable.push((node, slot, grid));
    }

    /// The slot of updatable launch `node`, and the grid it holds (for an update to
    /// change once it wrote the slot).
    pub(crate) fn updatable(&mut self, node: u64) -> Option<(Slot, &mut [u32; 3])> {
        self.updatable
            .iter_mut()
            .find(|(n, ..)| *n == node)
            .map(|(_, slot, grid)| (*slot, grid))
    }

    /// Hands the chunks back: the window is freed, so nothing pending reads them.
    pub(crate) fn give(self, pages: &mut CountPages) {
        pages.free.extend(self.chunks);
    }
}
