//! `VulkanStream`: the core's per-stream state beside the stream's `Submitter`, and
//! `VulkanFence`, a timeline value on it.

use std::sync::Arc;

use capture_core::ServerError;
use capture_core::backend::{DeviceStream, Fence, StreamState};

use crate::memory::MemoryUse;
use crate::read_staging::ReadStaging;
use crate::storage::VulkanStorage;
use crate::submitter::{self, Submitter};

/// A Vulkan stream: the core's state of it beside its submitter.
pub struct VulkanStream {
    pub(crate) submitter: Arc<Submitter>,
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
        let _ = self.submitter.finish();
        self.read_staging.free(&self.submitter.gpu);
    }
}

/// A point on a stream's timeline: everything enqueued before the fence was recorded.
#[derive(Debug)]
pub struct VulkanFence {
    submitter: Option<Arc<Submitter>>,
    value: u64,
    error: Option<ServerError>,
}

impl VulkanFence {
    /// Makes `submitter`'s next submission wait for this fence's timeline value.
    pub(crate) fn order(&self, submitter: &Submitter) -> Result<(), ServerError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if let Some(other) = &self.submitter {
            submitter.wait_for(other, self.value);
        }
        Ok(())
    }
}

impl Fence for VulkanFence {
    fn wait(self) -> Result<(), ServerError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        match self.submitter {
            Some(submitter) => submitter.wait(self.value),
            None => Ok(()),
        }
    }
}

impl std::fmt::Debug for Submitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Submitter")
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
        match submitter::find(signal) {
            Some(submitter) => match submitter.flush() {
                Ok(value) => VulkanFence {
                    submitter: Some(submitter),
                    value,
                    error: None,
                },
                Err(error) => VulkanFence {
                    submitter: None,
                    value: 0,
                    error: Some(error),
                },
            },
            None => VulkanFence {
                submitter: None,
                value: 0,
                error: None,
            },
        }
    }
}
