//! The core's per-stream state a backend embeds ([`StreamState`]: its memory, capture
//! and info cache), and the [`StreamSetup`] a backend builds it from, so every backend's
//! streams share the device's ids, capture status and policies without repeating them.

use crate::capture::{DeviceCaptures, StreamCapture};
use crate::info_cache::{CachePolicy, MetadataInfoCache};
use crate::memory::{
    AllocGate, ComputeStorage, ManagedMemoryHandle, MemoryConfig, MemoryIds, MemoryKind,
    MemoryManagement,
};

/// What one backend stream keeps for the core beside its driver handle: the memory its
/// kernels see, the pinned host memory it stages through, where it sits in the capture
/// lifecycle, and the per-launch info buffers it reuses. All of it moves in step with
/// the work queued on that stream. A backend builds it once with [`StreamSetup::state`]
/// and hands it out through [`DeviceStream::state`](crate::backend::DeviceStream::state).
pub struct StreamState<D: ComputeStorage, H: ComputeStorage> {
    pub(crate) device_memory: MemoryManagement<D>,
    pub(crate) host_memory: MemoryManagement<H>,
    pub(crate) capture: StreamCapture,
    pub(crate) info_cache: MetadataInfoCache<ManagedMemoryHandle>,
}

impl<D: ComputeStorage, H: ComputeStorage> std::fmt::Debug for StreamState<D, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamState")
            .field("index", &self.capture.index())
            .finish_non_exhaustive()
    }
}

/// The device-wide pieces one pooled stream's state is built from.
#[derive(Clone)]
pub struct StreamSetup {
    pub(crate) index: usize,
    pub(crate) captures: DeviceCaptures,
    pub(crate) ids: MemoryIds,
    pub(crate) device_memory: MemoryConfig,
    pub(crate) host_memory: MemoryConfig,
    pub(crate) cache_policy: CachePolicy,
    pub(crate) gate: Option<AllocGate>,
}

impl std::fmt::Debug for StreamSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamSetup")
            .field("index", &self.index)
            .field("gated", &self.gate.is_some())
            .finish_non_exhaustive()
    }
}

impl StreamSetup {
    /// Setup for pooled stream `index` of a device with `captures` and `ids`, its
    /// memory limits and info-cache policy.
    pub(crate) fn new(
        index: usize,
        captures: DeviceCaptures,
        ids: MemoryIds,
        device_memory: MemoryConfig,
        host_memory: MemoryConfig,
        cache_policy: CachePolicy,
    ) -> Self {
        Self {
            index,
            captures,
            ids,
            device_memory,
            host_memory,
            cache_policy,
            gate: None,
        }
    }

    /// Setup for stream `index` of no device: fresh ids and capture status, no memory
    /// limit, default policies. For a backend's own tests of one stream.
    pub fn standalone(index: usize, allocation_breaks_capture: bool) -> Self {
        Self::new(
            index,
            DeviceCaptures::new(allocation_breaks_capture),
            MemoryIds::new(),
            MemoryConfig::unlimited(),
            MemoryConfig::unlimited(),
            CachePolicy::default(),
        )
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

    /// The stream's state over `device` (the memory its kernels address) and `host` (the
    /// pinned staging it copies through), registered with the device. Call once per
    /// stream.
    pub fn state<D: ComputeStorage, H: ComputeStorage>(
        &self,
        device: D,
        host: H,
    ) -> StreamState<D, H> {
        StreamState {
            device_memory: self.memory(device, MemoryKind::Device, self.device_memory),
            host_memory: self.memory(host, MemoryKind::Host, self.host_memory),
            capture: StreamCapture::new(&self.captures),
            info_cache: MetadataInfoCache::new(self.cache_policy),
        }
    }

    fn memory<S: ComputeStorage>(
        &self,
        storage: S,
        kind: MemoryKind,
        config: MemoryConfig,
    ) -> MemoryManagement<S> {
        let mut memory = MemoryManagement::with_ids(storage, kind, config, self.ids.clone());
        if let Some(gate) = &self.gate {
            memory.set_alloc_gate(gate.clone());
        }
        memory
    }
}
