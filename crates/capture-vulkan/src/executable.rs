//! `VulkanExecutable`: a sealed window's secondary command buffer and the descriptor
//! pools its sets came from, freed on drop (the core drops it behind the timeline value
//! of its last replay).

use std::sync::Arc;

use crate::submitter::{Submitter, Window};

/// A replayable capture.
pub struct VulkanExecutable {
    pub(crate) submitter: Arc<Submitter>,
    pub(crate) window: Option<Window>,
}

impl VulkanExecutable {
    /// Its secondaries, in the order a replay executes them.
    pub(crate) fn secondaries(&self) -> Option<&[ash::vk::CommandBuffer]> {
        self.window.as_ref().map(|w| w.secondaries())
    }
}

impl Drop for VulkanExecutable {
    fn drop(&mut self) {
        if let Some(window) = self.window.take() {
            self.submitter.free(window);
        }
    }
}
