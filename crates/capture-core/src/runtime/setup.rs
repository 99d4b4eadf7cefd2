//! `StreamSetup`: what a backend is handed to build one pooled stream's core state, so
//! every backend's streams share the device's ids, capture status and policies.

use crate::capture::{DeviceCaptures, StreamCapture};
use crate::drop_queue::{Fence, PendingDropQueue};
use crate::info_cache::MetadataInfoCache;
use crate::memory::{ComputeStorage, ManagedMemoryHandle, MemoryIds, MemoryKind, MemoryManagement};

use super::DeviceConfig;

/// The device-wide pieces one pooled stream's state is built from.
#[derive(Debug)]
pub struct StreamSetup {
    pub(crate) index: usize,
    pub(crate) captures: DeviceCaptures,
    pub(crate) ids: MemoryIds,
    pub(crate) config: DeviceConfig,
}

impl StreamSetup {
    /// Setup for pooled stream `index` of a device with `captures`, `ids` and `config`.
    pub fn new(
        index: usize,
        captures: DeviceCaptures,
        ids: MemoryIds,
        config: DeviceConfig,
    ) -> Self {
        Self {
            index,
            captures,
            ids,
            config,
        }
    }

    /// The pooled stream's index.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The device's captures.
    pub fn captures(&self) -> &DeviceCaptures {
        &self.captures
    }

    /// The stream's device memory over `storage`.
    pub fn device_memory<S: ComputeStorage>(&self, storage: S) -> MemoryManagement<S> {
        MemoryManagement::with_ids(
            storage,
            MemoryKind::Device,
            self.config.device_memory,
            self.ids.clone(),
        )
    }

    /// The stream's pinned host (staging) memory over `storage`.
    pub fn host_memory<S: ComputeStorage>(&self, storage: S) -> MemoryManagement<S> {
        MemoryManagement::with_ids(
            storage,
            MemoryKind::Host,
            self.config.host_memory,
            self.ids.clone(),
        )
    }

    /// The stream's drop queue.
    pub fn drop_queue<F: Fence>(&self) -> PendingDropQueue<F> {
        PendingDropQueue::new(self.config.drop_policy)
    }

    /// The stream's info cache.
    pub fn info_cache(&self) -> MetadataInfoCache<ManagedMemoryHandle> {
        MetadataInfoCache::new(self.config.cache_policy)
    }

    /// The stream's capture, registered with the device. Call once per stream.
    pub fn capture(&self) -> StreamCapture {
        StreamCapture::new(&self.captures)
    }
}
