//! A device of the caller's handed over: [`VulkanBackend::from_external`]. It is an
//! `unsafe fn` (the caller vouches for objects Vulkan cannot be asked about), so it lives
//! beside `raw.rs` as the only other place of the crate with unsafe code; what Vulkan can
//! be asked, `raw::Gpu::adopt` checks.

use std::sync::Arc;

use crate::driver::VulkanBackend;
use crate::error::Unavailable;
use crate::options::{ExternalDevice, VulkanOptions, check_external_options, check_options};
use crate::raw::Gpu;

impl VulkanBackend {
    /// Runs the backend on a device the caller made and keeps owning: a runtime that
    /// already has an instance, a device and a compute queue hands them over instead of
    /// letting [`VulkanBackend::new`] open its own.
    ///
    /// The backend destroys only what it creates on the device (pages, staging,
    /// pipelines, descriptor pools, command pools, semaphores), each once no work of its
    /// own uses it; never the device or the instance. Its submissions and queue waits
    /// take the queue lock ([`ExternalDevice::queue_lock`], or the backend's own, reached
    /// through [`VulkanBackend::with_queue`]); at teardown it waits for that queue
    /// (`vkQueueWaitIdle`), never for the whole device. `options` sets the memory mode,
    /// the cadence, the descriptor pool size and the allocation cap; validation is what
    /// the caller's instance enabled, seen by the caller's own messenger
    /// ([`VulkanBackend::validation_enabled`] is `false`, and
    /// [`VulkanBackend::take_validation_messages`] has nothing to say).
    ///
    /// # Errors
    ///
    /// [`Unavailable`] saying why, with nothing created: an `instance_api_version` or a
    /// physical device below Vulkan 1.2; a physical device without timeline semaphores
    /// (so no device of it has them enabled); a queue family that does not exist or does
    /// not support compute; a queue index past the family's queue count; a `queue_lock`
    /// holding another queue than the one named; `options` naming what only
    /// [`VulkanBackend::new`] opens (a loader, validation, a device selector); a zero
    /// `submit_every` or `sets_per_pool`; device limits or memory types the backend
    /// cannot use; `conditional_rendering` claimed for a physical device that does not
    /// offer the extension and both its features.
    ///
    /// # Safety
    ///
    /// The caller guarantees, from the call until the backend's last handle is gone
    /// (every clone, and every `Device` built over one, with its buffers, kernels and
    /// graphs):
    ///
    /// - `instance`, `physical_device` and `device` are valid and stay alive: `device`
    ///   was created from `physical_device`, a physical device of `instance`, and both
    ///   were loaded through `entry`;
    /// - the instance was created with `instance_api_version` as its
    ///   `VkApplicationInfo::apiVersion`;
    /// - the device was created with the `timelineSemaphore` feature enabled
    ///   (`VkPhysicalDeviceVulkan12Features` or
    ///   `VkPhysicalDeviceTimelineSemaphoreFeatures`), the one feature the backend needs
    ///   (storage buffers are core Vulkan 1.0; its own devices also enable conditional
    ///   rendering where offered, for loop replays, see below). Vulkan cannot be asked
    ///   which features a device was created with, so this is not checked: only that the
    ///   physical device supports it;
    /// - where `conditional_rendering` is `true`, the device was created with the
    ///   `VK_EXT_conditional_rendering` extension enabled and its `conditionalRendering`
    ///   and `inheritedConditionalRendering` features on (a loop replay records its
    ///   commands; only that the physical device offers them is checked);
    /// - the device was created with at least `queue_index + 1` queues of
    ///   `queue_family` (only the family's capacity is checked);
    /// - the caller submits to that queue, waits for it (`vkQueueWaitIdle`) and waits for
    ///   the whole device (`vkDeviceWaitIdle`) only while holding the queue lock, and a
    ///   `queue_lock` it hands over holds that queue;
    /// - the caller destroys, resets, frees or waits on no object the backend created:
    ///   they are the backend's (nothing hands them out, so this holds unless the caller
    ///   goes looking for them).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::sync::{Arc, Mutex};
    /// use capture_vulkan::ash::{self, vk};
    /// use capture_vulkan::{ExternalDevice, VulkanBackend, VulkanOptions};
    ///
    /// # fn run(entry: ash::Entry, instance: ash::Instance, physical: vk::PhysicalDevice,
    /// #        device: ash::Device, family: u32) -> Result<(), capture_vulkan::Unavailable> {
    /// // The runtime's own queue lock, shared with the backend.
    /// // SAFETY: the device was created with one queue of `family`.
    /// let queue = Arc::new(Mutex::new(unsafe { device.get_device_queue(family, 0) }));
    /// // SAFETY: the instance (API 1.2) and the device (timeline semaphores on) outlive
    /// // the backend, and the runtime submits only under `queue`'s lock.
    /// let backend = unsafe {
    ///     VulkanBackend::from_external(
    ///         ExternalDevice {
    ///             entry,
    ///             instance,
    ///             instance_api_version: vk::API_VERSION_1_2,
    ///             physical_device: physical,
    ///             device,
    ///             queue_family: family,
    ///             queue_index: 0,
    ///             queue_lock: Some(Arc::clone(&queue)),
    ///             // Not enabled: loop replays (rule 30) take the indirect fallback.
    ///             conditional_rendering: false,
    ///         },
    ///         VulkanOptions::default(),
    ///     )?
    /// };
    /// # drop(backend); Ok(()) }
    /// ```
    // SAFETY: the contract is the `# Safety` list above, which is `Gpu::adopt`'s.
    pub unsafe fn from_external(
        external: ExternalDevice,
        options: VulkanOptions,
    ) -> Result<Self, Unavailable> {
        check_options(&options)?;
        check_external_options(&options)?;
        // SAFETY: the caller's guarantees are `Gpu::adopt`'s (the same list).
        let gpu = unsafe { Gpu::adopt(external, options.max_allocations, options.indirect_loops) }?;
        Self::over(Arc::new(gpu), &options)
    }
}
