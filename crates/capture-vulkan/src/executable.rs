//! `VulkanExecutable`: a sealed window's secondary command buffer and the descriptor
//! pools its sets came from, freed on drop (the core drops it behind the timeline value
//! of its last replay).

use std::sync::Arc;

use crate::lane::{Lane, Window};

/// A replayable capture.
pub struct VulkanExecutable {
    pub(crate) lane: Arc<Lane>,
    pub(crate) window: Option<Window>,
}

impl VulkanExecutable {
    pub(crate) fn secondary(&self) -> Option<ash::vk::CommandBuffer> {
        self.window.as_ref().map(|w| w.secondary)
    }
}

impl Drop for VulkanExecutable {
    fn drop(&mut self) {
        if let Some(window) = self.window.take() {
            self.lane.free(window);
        }
    }
}
