//! `CudaStorage`: pages from `cuMemAlloc` (device) or `cuMemHostAlloc` (pinned host
//! staging).

use std::sync::Arc;

use capture_core::ServerError;
use capture_core::backend::{ComputeStorage, ExternalPlace, IdMap, StorageId};
use capture_core::{ByteRange, MemoryKind, PoolKind, PoolName};

use crate::gpu::Gpu;
use crate::import::CudaExternal;
use crate::raw;

/// What a launch or copy is given: an address (a device pointer, or a pinned host
/// address) and a length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaSlice {
    pub(crate) addr: u64,
    pub(crate) len: u64,
}

/// One stream's pages of one kind of memory.
pub struct CudaStorage {
    gpu: Arc<Gpu>,
    kind: MemoryKind,
    pages: IdMap<u64, u64>,
    /// The caller's memory adopted as pages (imports): forgotten, never freed.
    adopted: IdMap<u64, u64>,
    next: u64,
}

impl CudaStorage {
    pub(crate) fn new(gpu: Arc<Gpu>, kind: MemoryKind) -> Self {
        Self {
            gpu,
            kind,
            pages: IdMap::default(),
            adopted: IdMap::default(),
            next: 0,
        }
    }
}

impl ComputeStorage for CudaStorage {
    type Resource = CudaSlice;
    type External = CudaExternal;

    fn alloc(&mut self, size: u64) -> Result<StorageId, ServerError> {
        let pool = PoolName {
            memory: self.kind,
            pool: PoolKind::Dynamic,
        };
        let _current = raw::Current::enter(self.gpu.context)?;
        let addr = match self.kind {
            MemoryKind::Device => raw::mem_alloc(size, pool)?,
            MemoryKind::Host => raw::host_alloc(size, pool)? as u64,
        };
        let id = self.next;
        self.next += 1;
        self.pages.insert(id, addr);
        Ok(StorageId(id))
    }

    fn dealloc(&mut self, id: StorageId) {
        if self.adopted.remove(&id.0).is_some() {
            return;
        }
        if let Some(addr) = self.pages.remove(&id.0) {
            match raw::Current::enter(self.gpu.context) {
                Ok(_current) => free(self.kind, addr),
                Err(error) => {
                    tracing::warn!(target: "capture", %error, "a CUDA page could not be freed");
                }
            }
        }
    }

    fn adopt(&mut self, external: CudaExternal) -> Result<(StorageId, u64), ServerError> {
        if self.kind != MemoryKind::Device {
            return Err(ServerError::invalid(
                "imported memory",
                format!("{:#x}", external.ptr),
                "only device memory is imported",
            ));
        }
        if external.ptr == 0 || !external.ptr.is_multiple_of(16) {
            return Err(ServerError::invalid(
                "imported memory",
                format!("{:#x}", external.ptr),
                "an imported range starts at a non-null, 16-byte aligned device address",
            ));
        }
        let id = self.next;
        self.next += 1;
        self.adopted.insert(id, external.ptr);
        Ok((StorageId(id), external.bytes))
    }

    fn place(&self, external: &CudaExternal) -> Result<ExternalPlace, ServerError> {
        // One address space: the context's unified device addresses.
        ExternalPlace::new(0, external.ptr, external.bytes)
    }

    fn resource(&mut self, id: StorageId, bytes: ByteRange) -> CudaSlice {
        let base = self
            .pages
            .get(&id.0)
            .or_else(|| self.adopted.get(&id.0))
            .copied()
            .unwrap_or(0);
        CudaSlice {
            addr: base + bytes.start(),
            len: bytes.len(),
        }
    }
}

fn free(kind: MemoryKind, addr: u64) {
    match kind {
        MemoryKind::Device => raw::mem_free(addr),
        MemoryKind::Host => raw::host_free(addr as usize),
    }
}

impl Drop for CudaStorage {
    fn drop(&mut self) {
        // The stream synchronised before its storages drop.
        match raw::Current::enter(self.gpu.context) {
            Ok(_current) => {
                for (_, addr) in self.pages.drain() {
                    free(self.kind, addr);
                }
            }
            Err(error) => {
                tracing::warn!(target: "capture", %error, "a CUDA storage could not be freed");
            }
        }
    }
}
