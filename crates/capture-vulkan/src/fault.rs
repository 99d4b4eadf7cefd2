//! Fault injection at this backend's own Vulkan call sites, for its tests: arm "the call
//! of this kind after `skip` more successful ones fails with this code", and that call
//! returns the code without reaching the driver. `vkEndCommandBuffer` is the one
//! exception: the driver ends the buffer, then the code is returned, so a buffer whose
//! end failed is not recording any more, as after a real failure (it is invalid then).
//!
//! Disarmed (the normal case) a check is one relaxed atomic load.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use ash::vk;

/// A Vulkan call this backend makes that a test may make fail.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VulkanCall {
    /// `vkAllocateCommandBuffers`.
    AllocateCommandBuffers,
    /// `vkBeginCommandBuffer`.
    BeginCommandBuffer,
    /// `vkEndCommandBuffer` (the driver ends the buffer first).
    EndCommandBuffer,
    /// `vkQueueSubmit`.
    QueueSubmit,
    /// `vkCreateShaderModule`.
    CreateShaderModule,
    /// `vkCreateDescriptorSetLayout`.
    CreateDescriptorSetLayout,
    /// `vkCreatePipelineLayout`.
    CreatePipelineLayout,
    /// `vkCreateComputePipelines`.
    CreateComputePipelines,
    /// `vkCreateDescriptorPool`.
    CreateDescriptorPool,
    /// `vkAllocateMemory`.
    AllocateMemory,
}

/// One armed fault: `call` fails after `skip` more successful calls of its kind.
#[derive(Debug)]
struct Armed {
    call: VulkanCall,
    skip: u32,
    code: vk::Result,
}

/// The armed faults of one device.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    any: AtomicBool,
    armed: Mutex<Vec<Armed>>,
}

impl Faults {
    /// Makes the call of kind `call` after `skip` more successful ones fail with `code`.
    pub(crate) fn arm(&self, call: VulkanCall, skip: u32, code: vk::Result) {
        let mut armed = self.armed.lock().unwrap_or_else(|p| p.into_inner());
        armed.push(Armed { call, skip, code });
        self.any.store(true, Ordering::Release);
    }

    /// Whether the call of kind `call` being made now fails, and with which code (each
    /// armed fault fires once).
    pub(crate) fn check(&self, call: VulkanCall) -> Result<(), vk::Result> {
        if !self.any.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut armed = self.armed.lock().unwrap_or_else(|p| p.into_inner());
        let mut fired = None;
        for (i, a) in armed.iter_mut().enumerate().filter(|(_, a)| a.call == call) {
            if a.skip == 0 {
                fired = Some(i);
                break;
            }
            a.skip -= 1;
        }
        let result = match fired {
            Some(i) => Err(armed.remove(i).code),
            None => Ok(()),
        };
        self.any.store(!armed.is_empty(), Ordering::Release);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_fires_once_after_its_skipped_calls_and_only_for_its_call() {
        let faults = Faults::default();
        assert_eq!(faults.check(VulkanCall::QueueSubmit), Ok(()));
        faults.arm(
            VulkanCall::QueueSubmit,
            2,
            vk::Result::ERROR_OUT_OF_HOST_MEMORY,
        );
        assert_eq!(faults.check(VulkanCall::EndCommandBuffer), Ok(()));
        assert_eq!(faults.check(VulkanCall::QueueSubmit), Ok(()));
        assert_eq!(faults.check(VulkanCall::QueueSubmit), Ok(()));
        assert_eq!(
            faults.check(VulkanCall::QueueSubmit),
            Err(vk::Result::ERROR_OUT_OF_HOST_MEMORY)
        );
        assert_eq!(faults.check(VulkanCall::QueueSubmit), Ok(()));
    }
}
