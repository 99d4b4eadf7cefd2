//! `VulkanStream`: the core's per-stream state beside the stream's `Lane`, and
//! `VulkanFence`, a timeline value on it.

use std::sync::Arc;

use capture_core::ServerError;
use capture_core::backend::{DeviceStream, Fence, StreamState};

use crate::lane::{self, Lane};
use crate::memory::MemoryUse;
use crate::read_staging::ReadStaging;
use crate::storage::VulkanStorage;

/// A Vulkan stream: the core's state of it beside its lane.
pub struct VulkanStream {
    pub(crate) lane: Arc<Lane>,
    pub(crate) signal: usize,
    /// The memory device pages are read back through when they are not mapped.
    pub(crate) readback: MemoryUse,
    /// The page those reads go through, kept from one read to the next.
    pub(crate) read_staging: ReadStaging,
    pub(crate) state: StreamState<VulkanStorage, VulkanStorage>,
}

impl Drop for VulkanStream {
    fn drop(&mut self) {
        // Everything the storages and the cache free must be done with.
        let _ = self.lane.finish();
        self.read_staging.free(&self.lane.gpu);
    }
}

/// A point on a stream's timeline: everything enqueued before the fence was recorded.
#[derive(Debug)]
pub struct VulkanFence {
    lane: Option<Arc<Lane>>,
    value: u64,
    error: Option<ServerError>,
}

impl VulkanFence {
    /// Makes `lane`'s next submission wait for this fence's timeline value.
    pub(crate) fn order(&self, lane: &Lane) -> Result<(), ServerError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if let Some(other) = &self.lane {
            lane.wait_for(other, self.value);
        }
        Ok(())
    }
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
    type DeviceStorage = VulkanStorage;
    type HostStorage = VulkanStorage;
    type Signal = usize;

    fn state(&mut self) -> &mut StreamState<VulkanStorage, VulkanStorage> {
        &mut self.state
    }
    fn signal(&self) -> usize {
        self.signal
    }
    fn read_staging_bytes(&self) -> u64 {
        self.read_staging.bytes()
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
