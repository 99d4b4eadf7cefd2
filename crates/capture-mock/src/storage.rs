//! `MockStorage`: pages of real bytes in host memory. A slice returned to its pool is
//! poisoned at once, so a use after release shows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use capture_core::backend::{ComputeStorage, ExternalPlace, IdMap, IdSet, StorageId};
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

/// Numbers every [`Pages`] made in the process, so memory of one backend value is told
/// from another's.
static OWNERS: AtomicU64 = AtomicU64::new(0);

/// The pages of one kind of memory of one mock backend value (every device on it).
#[derive(Debug)]
pub(crate) struct Pages {
    pub(crate) pages: IdMap<u64, Vec<u8>>,
    /// Which backend value's memory this is (unique in the process).
    owner: u64,
    /// The next number: of a page, or of an adoption (an import's storage id), from one
    /// counter so the two never meet.
    next: u64,
    /// Bytes the live pages hold.
    bytes: u64,
    /// The pages that are memory of the caller's own ([`MockMemory`]), live or freed: no
    /// device's.
    pub(crate) external: IdSet<u64>,
    /// Of those, the ones the caller freed (poisoned, kept so a use after shows as
    /// poisoned bytes rather than a crash).
    freed: IdSet<u64>,
}

impl Default for Pages {
    fn default() -> Self {
        Self {
            pages: IdMap::default(),
            owner: OWNERS.fetch_add(1, Ordering::Relaxed),
            next: 0,
            bytes: 0,
            external: IdSet::default(),
            freed: IdSet::default(),
        }
    }
}

impl Pages {
    /// A number no page or adoption of these pages has.
    fn number(&mut self) -> u64 {
        let id = self.next;
        self.next += 1;
        id
    }

    /// A new page of `size` bytes, every byte [`FRESH`]; its number.
    fn add(&mut self, size: u64) -> u64 {
        // Filled by `vec!`'s memset: byte by byte, a debug build would crawl.
        let page = vec![FRESH; size as usize];
        let id = self.number();
        self.bytes += size;
        self.pages.insert(id, page);
        id
    }

    /// How many pages devices hold: every page but the caller's own.
    pub(crate) fn device_pages(&self) -> usize {
        self.pages.len() - self.external.len()
    }

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

/// Memory of the caller's own on a mock backend, as an engine allocates its weights with
/// the driver itself ([`MockBackend::external_memory`](crate::MockBackend::external_memory)):
/// live until the guard drops, when its bytes are poisoned (a use after shows as
/// [`POISON`] bytes) and no device holds it any more.
pub struct MockMemory {
    pages: Arc<Mutex<Pages>>,
    page: u64,
    size: u64,
}

/// What [`Device::import`](capture_core::Device::import) takes on the mock: a
/// [`MockMemory`]'s page. Safe to make: the mock checks that the memory is still the
/// caller's when it is imported, and a use after the guard drops reads poisoned bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MockExternal {
    /// The backend value whose memory it is.
    owner: u64,
    page: u64,
    /// Where the imported bytes start in the page.
    offset: u64,
    size: u64,
}

impl MockMemory {
    pub(crate) fn new(pages: &Arc<Mutex<Pages>>, size: u64) -> Self {
        let mut p = lock(pages);
        let page = p.add(size);
        p.external.insert(page);
        Self {
            pages: Arc::clone(pages),
            page,
            size,
        }
    }

    /// What [`Device::import`](capture_core::Device::import) takes: the whole memory.
    pub fn external(&self) -> MockExternal {
        self.external_range(0, self.size)
    }

    /// `len` bytes of the memory from `offset`, as
    /// [`Device::import`](capture_core::Device::import) takes them (as a CUDA pointer
    /// into an allocation of the caller's, or a range of a `VkBuffer`). A range past the
    /// memory is refused when imported.
    pub fn external_range(&self, offset: u64, len: u64) -> MockExternal {
        MockExternal {
            owner: lock(&self.pages).owner,
            page: self.page,
            offset,
            size: len,
        }
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Writes `bytes` at `offset`, as the caller fills its own memory (outside the
    /// library: the rules know nothing of it until `Device::assume_written`).
    ///
    /// # Panics
    ///
    /// When the range runs past the memory.
    pub fn write(&self, offset: u64, bytes: &[u8]) {
        let mut pages = lock(&self.pages);
        let page = pages.pages.get_mut(&self.page).expect("live until dropped");
        page[offset as usize..offset as usize + bytes.len()].copy_from_slice(bytes);
    }

    /// Its bytes as they are now: poisoned bytes if the page is gone (only a backend
    /// that freed the caller's memory, which the library must never make it do, loses
    /// it).
    pub fn read(&self) -> Vec<u8> {
        lock(&self.pages)
            .pages
            .get(&self.page)
            .cloned()
            .unwrap_or_else(|| vec![POISON; self.size as usize])
    }
}

impl Drop for MockMemory {
    fn drop(&mut self) {
        let mut pages = lock(&self.pages);
        if let Some(bytes) = pages.pages.get_mut(&self.page) {
            bytes.fill(POISON);
        }
        pages.freed.insert(self.page);
    }
}

impl std::fmt::Debug for MockMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MockMemory(page {}, {} B)", self.page, self.size)
    }
}

/// One stream's view of one kind of memory (device, or pinned host).
#[derive(Debug)]
pub struct MockStorage {
    pages: Arc<Mutex<Pages>>,
    context: Arc<Context>,
    /// The pages this storage allocated and has not freed: given back when it drops,
    /// as a real driver frees a device's memory when the device goes.
    owned: Vec<u64>,
    /// The caller's pages this storage adopted (imports), by the storage id each import
    /// got, with where in the page the import starts: never freed or poisoned. Each
    /// import is an adoption of its own, as a real driver's import is (the device
    /// refuses a second live import of the same bytes; one after the first was taken
    /// back adopts them again).
    adopted: IdMap<u64, (u64, u64)>,
}

impl MockStorage {
    /// A storage over `pages`, on driver context `context`.
    pub(crate) fn over(pages: &Arc<Mutex<Pages>>, context: &Arc<Context>) -> Self {
        Self {
            pages: Arc::clone(pages),
            context: Arc::clone(context),
            owned: Vec::new(),
            adopted: IdMap::default(),
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
    type External = MockExternal;

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
        let id = pages.add(size);
        self.owned.push(id);
        Ok(StorageId(id))
    }

    fn dealloc(&mut self, id: StorageId) {
        // An adopted page is the caller's: forgotten, not freed.
        if self.adopted.remove(&id.0).is_some() {
            return;
        }
        self.context.conflicts_with_all("a free");
        lock(&self.pages).remove(id.0);
        self.owned.retain(|&p| p != id.0);
    }

    fn adopt(&mut self, external: MockExternal) -> Result<(StorageId, u64), ServerError> {
        let mut pages = lock(&self.pages);
        if external.owner != pages.owner {
            return Err(ServerError::invalid(
                "imported memory",
                format!("mock page {} of {} B", external.page, external.size),
                "it is memory of another backend value (MockBackend::external_memory of \
                 another MockBackend); import memory of the device's own backend value",
            ));
        }
        let live = pages.external.contains(&external.page)
            && !pages.freed.contains(&external.page)
            && pages.pages.contains_key(&external.page);
        if !live {
            return Err(ServerError::invalid(
                "imported memory",
                format!("mock page {}", external.page),
                "it is not memory of the caller's that is still live on this backend",
            ));
        }
        let page_len = pages
            .pages
            .get(&external.page)
            .map_or(0, |p| p.len() as u64);
        if external.offset.saturating_add(external.size) > page_len {
            return Err(ServerError::invalid(
                "imported memory",
                format!(
                    "bytes {}..{} of mock page {}",
                    external.offset,
                    external.offset.saturating_add(external.size),
                    external.page
                ),
                format!("the caller's memory holds {page_len} bytes"),
            ));
        }
        let id = pages.number();
        drop(pages);
        self.adopted.insert(id, (external.page, external.offset));
        Ok((StorageId(id), external.size))
    }

    fn place(&self, external: &MockExternal) -> Result<ExternalPlace, ServerError> {
        // The mock's own memory is one space per page of one backend value: another
        // value's page of the same number is refused by `adopt`, never confused.
        let space = external.page ^ (external.owner << 48);
        ExternalPlace::new(space, external.offset, external.size)
    }

    fn resource(&mut self, id: StorageId, bytes: ByteRange) -> MockResource {
        match self.adopted.get(&id.0) {
            Some(&(page, offset)) => MockResource {
                page,
                bytes: ByteRange::new(offset + bytes.start(), bytes.len())
                    .expect("a range of an adopted page, inside it"),
            },
            None => MockResource { page: id.0, bytes },
        }
    }

    fn slice_released(&mut self, id: StorageId, bytes: ByteRange) {
        // The caller's own memory keeps its bytes: the library never frees it.
        if self.adopted.contains_key(&id.0) {
            return;
        }
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
