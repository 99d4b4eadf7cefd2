//! `VulkanStorage`: pages of `VkDeviceMemory`, each with one `VkBuffer` over all of it.

use std::sync::Arc;

use ash::vk::{self, Handle};
use capture_core::backend::{ComputeStorage, ExternalPlace, IdMap, StorageId};
use capture_core::{ByteRange, MemoryKind, ServerError};

use crate::import::VulkanExternal;
use crate::memory::MemoryUse;
use crate::raw::{self, Gpu, Page};

/// What a launch or copy is given: a range of one page's buffer, and its mapped address
/// when the page is mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VulkanSlice {
    pub(crate) buffer: vk::Buffer,
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) mapped: Option<usize>,
}

/// One stream's pages of one kind of memory.
pub struct VulkanStorage {
    gpu: Arc<Gpu>,
    kind: MemoryKind,
    memory: MemoryUse,
    pages: IdMap<u64, Page>,
    /// The caller's buffer ranges adopted as pages (imports): forgotten, never destroyed.
    adopted: IdMap<u64, VulkanExternal>,
    next: u64,
}

impl VulkanStorage {
    /// Pages of `kind` memory, of the memory `memory` names.
    pub(crate) fn new(gpu: Arc<Gpu>, kind: MemoryKind, memory: MemoryUse) -> Self {
        Self {
            gpu,
            kind,
            memory,
            pages: IdMap::default(),
            adopted: IdMap::default(),
            next: 0,
        }
    }
}

impl ComputeStorage for VulkanStorage {
    type Resource = VulkanSlice;
    type External = VulkanExternal;

    fn alloc(&mut self, size: u64) -> Result<StorageId, ServerError> {
        let page = raw::create_page(&self.gpu, size, &self.memory)
            .map_err(|e| crate::error::out_of_memory(e, size, self.kind))?;
        let id = self.next;
        self.next += 1;
        self.pages.insert(id, page);
        Ok(StorageId(id))
    }

    fn dealloc(&mut self, id: StorageId) {
        if self.adopted.remove(&id.0).is_some() {
            return;
        }
        if let Some(page) = self.pages.remove(&id.0) {
            raw::destroy_page(&self.gpu, page);
        }
    }

    fn adopt(&mut self, external: VulkanExternal) -> Result<(StorageId, u64), ServerError> {
        if self.kind != MemoryKind::Device {
            return Err(ServerError::invalid(
                "imported memory",
                format!("{:?}", external.buffer),
                "only device memory is imported",
            ));
        }
        let align = self.gpu.limits.min_storage_buffer_offset_alignment.max(1);
        if external.buffer == vk::Buffer::null() || !external.offset.is_multiple_of(align) {
            return Err(ServerError::invalid(
                "imported memory",
                format!("{:?} at {}", external.buffer, external.offset),
                format!("an imported range is a non-null buffer at a multiple of {align} bytes"),
            ));
        }
        let id = self.next;
        self.next += 1;
        self.adopted.insert(id, external);
        Ok((StorageId(id), external.size))
    }

    fn place(&self, external: &VulkanExternal) -> Result<ExternalPlace, ServerError> {
        // A space per `VkBuffer`: two buffers bound to one `VkDeviceMemory` are not
        // told apart (Vulkan has no query for a buffer's memory; the guide says so).
        ExternalPlace::new(external.buffer.as_raw(), external.offset, external.size)
    }

    fn resource(&mut self, id: StorageId, bytes: ByteRange) -> VulkanSlice {
        if let Some(external) = self.adopted.get(&id.0) {
            return VulkanSlice {
                buffer: external.buffer,
                offset: external.offset + bytes.start(),
                len: bytes.len(),
                mapped: None,
            };
        }
        let page = &self.pages[&id.0];
        VulkanSlice {
            buffer: page.buffer,
            offset: bytes.start(),
            len: bytes.len(),
            mapped: page.mapped.map(|at| at + bytes.start() as usize),
        }
    }
}

impl Drop for VulkanStorage {
    fn drop(&mut self) {
        // The stream waited for its work before its storages drop.
        for (_, page) in self.pages.drain() {
            raw::destroy_page(&self.gpu, page);
        }
    }
}
