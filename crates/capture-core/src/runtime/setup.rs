//! `StreamSetup`: what a backend is handed to build one pooled stream's core state, so
//! every backend's streams share the device's ids, capture status and policies.

use crate::capture::{DeviceCaptures, StreamCapture};
use crate::drop_queue::{Fence, PendingDropQueue};
use crate::info_cache::MetadataInfoCache;
use crate::memory::{
    AllocGate, ComputeStorage, ManagedMemoryHandle, MemoryIds, MemoryKind, MemoryManagement,
};

use super::DeviceConfig;

/// The device-wide pieces one pooled stream's state is built from.
#[derive(Clone)]
pub struct StreamSetup {
    pub(crate) index: usize,
    pub(crate) captures: DeviceCaptures,
    pub(crate) ids: MemoryIds,
    pub(crate) config: DeviceConfig,
    pub(crate) gate: Option<AllocGate>,
}

impl std::fmt::Debug for StreamSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamSetup")
            .field("index", &self.index)
            .field("config", &self.config)
            .field("gated", &self.gate.is_some())
            .finish()
    }
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
            gate: None,
        }
    }

    /// The same setup, with every page allocation of the stream's memory passing `gate`
    /// first (a wrapper backend's way to refuse pages of a storage it does not own).
    pub fn with_alloc_gate(&self, gate: AllocGate) -> Self {
        let mut setup = self.clone();
        setup.gate = Some(gate);
        setup
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
        let mut memory = MemoryManagement::with_ids(
            storage,
            MemoryKind::Device,
            self.config.device_memory,
            self.ids.clone(),
        );
        if let Some(gate) = &self.gate {
            memory.set_alloc_gate(gate.clone());
        }
        memory
    }

    /// The stream's pinned host (staging) memory over `storage`.
    pub fn host_memory<S: ComputeStorage>(&self, storage: S) -> MemoryManagement<S> {
        let mut memory = MemoryManagement::with_ids(
            storage,
            MemoryKind::Host,
            self.config.host_memory,
            self.ids.clone(),
        );
        if let Some(gate) = &self.gate {
            memory.set_alloc_gate(gate.clone());
        }
        memory
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
