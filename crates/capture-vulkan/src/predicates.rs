//! `Predicates`: the `go` words a stream hands its capture windows on a device with
//! conditional rendering (rule 30's loop replays, `loops.rs`). Every secondary of a
//! window runs inside conditional rendering on its window's word, which is 1 except
//! while a loop replay of the graph has seen its stop flag: a plain replay runs every
//! dispatch, a loop discards the dispatches of the iterations after the flag's.
//!
//! The words live in pages of host-visible coherent memory made for conditional
//! rendering, written 1 by the host when a page is made (so no command initialises
//! them); a loop leaves its word 1 again when it ends, so a word handed back (once its
//! graph's executable is freed, behind the fence of its last replay) is 1 when handed
//! out again.

use ash::vk;
use capture_core::ServerError;

use crate::memory::MemoryUse;
use crate::raw::{self, Gpu, Page};

/// Words per page.
pub(crate) const WORDS_PER_PAGE: u32 = 256;

/// Bytes of a page of words.
pub(crate) const PAGE_BYTES: u64 = 4 * WORDS_PER_PAGE as u64;

/// A window's `go` word: its page's buffer and its index there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Word {
    /// The page's buffer.
    pub(crate) buffer: vk::Buffer,
    /// The word's index in the page.
    pub(crate) index: u32,
}

impl Word {
    /// Where conditional rendering reads it: the buffer and the byte offset.
    pub(crate) fn at(&self) -> (vk::Buffer, u64) {
        (self.buffer, 4 * u64::from(self.index))
    }
}

/// A stream's pages of `go` words, and the words no window holds.
#[derive(Default)]
pub(crate) struct Predicates {
    pages: Vec<Page>,
    free: Vec<Word>,
}

impl Predicates {
    /// A word for a window, 1; a page of them made (of the memory `memory` names,
    /// which is mapped and coherent) when none is free.
    pub(crate) fn take(&mut self, gpu: &Gpu, memory: &MemoryUse) -> Result<Word, ServerError> {
        if let Some(word) = self.free.pop() {
            return Ok(word);
        }
        let page = raw::create_predicate(gpu, PAGE_BYTES, memory)?;
        let Some(at) = page.mapped else {
            raw::destroy_page(gpu, page);
            return Err(ServerError::graph_state(
                "capture",
                "the memory for conditional rendering's words must be mapped",
            ));
        };
        let ones: Vec<u8> = (0..WORDS_PER_PAGE)
            .flat_map(|_| 1u32.to_le_bytes())
            .collect();
        raw::write_mapped(at, &ones);
        let buffer = page.buffer;
        self.pages.push(page);
        self.free.extend(
            (1..WORDS_PER_PAGE)
                .rev()
                .map(|index| Word { buffer, index }),
        );
        Ok(Word { buffer, index: 0 })
    }

    /// Gives a word back: its window is freed, so nothing pending reads it, and the
    /// last loop that wrote it left it 1.
    pub(crate) fn give(&mut self, word: Word) {
        self.free.push(word);
    }

    /// Destroys the pages, once nothing pending uses them (the stream's teardown).
    pub(crate) fn destroy(&mut self, gpu: &Gpu) {
        self.free.clear();
        for page in self.pages.drain(..) {
            raw::destroy_page(gpu, page);
        }
    }
}
