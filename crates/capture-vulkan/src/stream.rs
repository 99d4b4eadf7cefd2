//! `VulkanStream`: the core's per-stream state beside the stream's [`Lane`], and
//! `VulkanFence`, a timeline value on it.

use std::sync::Arc;

use capture_core::ServerError;
use capture_core::capture::StreamCapture;
use capture_core::driver::DeviceStream;
use capture_core::drop_queue::{Fence, PendingDropQueue};
use capture_core::info_cache::MetadataInfoCache;
use capture_core::memory::{ManagedMemoryHandle, MemoryManagement};

use crate::lane::{self, Lane};
use crate::storage::VkStorage;

/// A Vulkan stream: memory, drop queue, capture and info cache beside its lane.
pub struct VulkanStream {
    pub(crate) lane: Arc<Lane>,
    pub(crate) signal: usize,
    pub(crate) device: MemoryManagement<VkStorage>,
    pub(crate) host: MemoryManagement<VkStorage>,
    pub(crate) drops: PendingDropQueue<VulkanFence>,
    pub(crate) capture: StreamCapture,
    pub(crate) cache: MetadataInfoCache<ManagedMemoryHandle>,
}

impl Drop for VulkanStream {
    fn drop(&mut self) {
        // Everything the storages, the drop queue and the cache free must be done with.
        let _ = self.lane.finish();
    }
}

/// A point on a stream's timeline: everything enqueued before the fence was recorded.
#[derive(Debug)]
pub struct VulkanFence {
    lane: Option<Arc<Lane>>,
    value: u64,
    error: Option<ServerError>,
}

impl Fence for VulkanFence {
    fn wait(self) -> Result<(), ServerError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        match self.lane {
            Some(lane) => lane.wait(self.value),
            None => Ok(()),
        }
    }
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lane")
    }
}

impl DeviceStream for VulkanStream {
    type Fence = VulkanFence;
    type DeviceStorage = VkStorage;
    type HostStorage = VkStorage;
    type Signal = usize;

    fn device_memory(&mut self) -> &mut MemoryManagement<VkStorage> {
        &mut self.device
    }
    fn host_memory(&mut self) -> &mut MemoryManagement<VkStorage> {
        &mut self.host
    }
    fn drop_queue(&mut self) -> &mut PendingDropQueue<VulkanFence> {
        &mut self.drops
    }
    fn capturing(&mut self) -> &mut StreamCapture {
        &mut self.capture
    }
    fn info_cache(&mut self) -> &mut MetadataInfoCache<ManagedMemoryHandle> {
        &mut self.cache
    }
    fn signal(&self) -> usize {
        self.signal
    }
    /// Submits the stream's open batch, then names its timeline value.
    fn fence(signal: usize) -> VulkanFence {
        match lane::find(signal) {
            Some(lane) => match lane.flush() {
                Ok(value) => VulkanFence {
                    lane: Some(lane),
                    value,
                    error: None,
                },
                Err(error) => VulkanFence {
                    lane: None,
                    value: 0,
                    error: Some(error),
                },
            },
            None => VulkanFence {
                lane: None,
                value: 0,
                error: None,
            },
        }
    }
}
