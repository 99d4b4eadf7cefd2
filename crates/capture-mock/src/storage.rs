//! `MockStorage`: pages of real bytes in host memory. A slice returned to its pool is
//! poisoned at once, so a use after release shows.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use capture_core::backend::{ComputeStorage, StorageId};
use capture_core::{ByteRange, MemoryKind, OutOfMemory, PoolKind, PoolName, ServerError};

use crate::context::Context;
use crate::lock::lock;

/// The byte written over a slice when it returns to its pool.
pub const POISON: u8 = 0xDE;

/// The byte a fresh page holds, so never-written memory is recognisable.
pub const FRESH: u8 = 0xA5;

/// How many bytes of pages one kind of the mock's memory holds at most (over every
/// device of a backend value): past it an allocation is `OutOfMemory`, as a device's
/// would be, rather than a host allocation that aborts the process.
pub const MOCK_MEMORY_BYTES: u64 = 4 << 30;

/// The pages of one kind of memory of one mock device.
#[derive(Debug, Default)]
pub(crate) struct Pages {
    pub(crate) pages: HashMap<u64, Vec<u8>>,
    next: u64,
    /// Bytes the live pages hold.
    bytes: u64,
}

impl Pages {
    /// Frees page `page`.
    pub(crate) fn remove(&mut self, page: u64) {
        if let Some(bytes) = self.pages.remove(&page) {
            self.bytes -= bytes.len() as u64;
        }
    }

    /// The bytes of `bytes` on page `page`.
    pub(crate) fn slice(&self, page: u64, bytes: ByteRange) -> &[u8] {
        &self.pages[&page][bytes.start() as usize..bytes.end() as usize]
    }

    /// The bytes of `bytes` on page `page`, to write.
    pub(crate) fn slice_mut(&mut self, page: u64, bytes: ByteRange) -> &mut [u8] {
        let page = self.pages.get_mut(&page).expect("a live page");
        &mut page[bytes.start() as usize..bytes.end() as usize]
    }
}

/// What a launch or copy is given: a slice of a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MockResource {
    pub(crate) page: u64,
    pub(crate) bytes: ByteRange,
}

/// One stream's view of one kind of memory (device, or pinned host).
#[derive(Debug)]
pub struct MockStorage {
    pages: Arc<Mutex<Pages>>,
    context: Arc<Context>,
    /// The pages this storage allocated and has not freed: given back when it drops,
    /// as a real driver frees a device's memory when the device goes.
    owned: Vec<u64>,
}

impl MockStorage {
    /// A storage over `pages`, on driver context `context`.
    pub(crate) fn over(pages: &Arc<Mutex<Pages>>, context: &Arc<Context>) -> Self {
        Self {
            pages: Arc::clone(pages),
            context: Arc::clone(context),
            owned: Vec::new(),
        }
    }

    /// A storage of its own, not shared with any device (for tests of the memory layer).
    pub fn standalone() -> Self {
        Self::over(&Arc::new(Mutex::new(Pages::default())), &Context::new())
    }

    /// The bytes behind `resource` as they are now, without running anything: what a
    /// lifetime test inspects (poisoned slices, never-written pages).
    pub fn peek(&self, resource: MockResource) -> Vec<u8> {
        let pages = lock(&self.pages);
        match pages.pages.get(&resource.page) {
            Some(_) => pages.slice(resource.page, resource.bytes).to_vec(),
            None => Vec::new(),
        }
    }
}

impl ComputeStorage for MockStorage {
    type Resource = MockResource;

    fn alloc(&mut self, size: u64) -> Result<StorageId, ServerError> {
        // Tolerated in relaxed mode: `cuMemAlloc` enqueues nothing a capture could miss.
        let mut pages = lock(&self.pages);
        let out_of_memory = |reason: String| {
            ServerError::OutOfMemory(Box::new(OutOfMemory {
                requested: size,
                // The memory manager names the pool that grew.
                pool: PoolName {
                    memory: MemoryKind::Device,
                    pool: PoolKind::Dynamic,
                },
                reason: reason.into(),
                pools: Vec::new(),
                graphs: Vec::new(),
            }))
        };
        if pages.bytes.saturating_add(size) > MOCK_MEMORY_BYTES {
            return Err(out_of_memory(format!(
                "the mock holds at most {MOCK_MEMORY_BYTES} B of each kind of memory, \
                 {} B are in pages",
                pages.bytes
            )));
        }
        // Filled by `vec!`'s memset: byte by byte, a debug build would crawl.
        let page = vec![FRESH; size as usize];
        let id = pages.next;
        pages.next += 1;
        pages.bytes += size;
        pages.pages.insert(id, page);
        self.owned.push(id);
        Ok(StorageId(id))
    }

    fn dealloc(&mut self, id: StorageId) {
        self.context.conflicts_with_all("a free");
        lock(&self.pages).remove(id.0);
        self.owned.retain(|&p| p != id.0);
    }

    fn resource(&mut self, id: StorageId, bytes: ByteRange) -> MockResource {
        MockResource { page: id.0, bytes }
    }

    fn slice_released(&mut self, id: StorageId, bytes: ByteRange) {
        let mut pages = lock(&self.pages);
        if pages.pages.contains_key(&id.0) {
            pages.slice_mut(id.0, bytes).fill(POISON);
        }
    }
}

impl Drop for MockStorage {
    fn drop(&mut self) {
        // Frees, as `cuMemFree` at a device's teardown: a recording of the context that
        // overlaps them is invalidated (the core must not let them happen then).
        if !self.owned.is_empty() {
            self.context.conflicts_with_all("a free at teardown");
        }
        // The stream finished its work before its storages drop.
        let mut pages = lock(&self.pages);
        for id in self.owned.drain(..) {
            pages.remove(id);
        }
    }
}
