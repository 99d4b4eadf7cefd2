//! How to open the backend: [`VulkanOptions`] for a device the backend opens, and
//! [`ExternalDevice`] for one a caller hands over, with the checks both share.

use std::sync::{Arc, Mutex};

use ash::vk;

use crate::device::DeviceSelector;
use crate::error::{Unavailable, unavailable};
use crate::memory::MemoryMode;

/// Eager commands after which a stream's open batch is submitted, when
/// [`VulkanOptions::submit_every`] is not set otherwise. Measured on lavapipe over 2,000
/// eager launches (docs/backends.md, "Submission cadence"): submitting every 64
/// commands costs no measurable host time over one submission at the end, and a GPU
/// starts on the first launches after at most 64 of them.
pub const DEFAULT_SUBMIT_EVERY: u32 = 64;

/// Sets per descriptor pool, when [`VulkanOptions::sets_per_pool`] is not set otherwise.
pub const DEFAULT_SETS_PER_POOL: u32 = 256;

/// The environment variable that names the device [`VulkanOptions::from_env`] opens:
/// an index in the driver's enumeration, or a piece of the device's name.
pub const DEVICE_ENV: &str = "CAPTURE_VULKAN_DEVICE";

/// The environment variable that, set to `1`, makes [`VulkanOptions::from_env`] force
/// loop replays onto the indirect fallback ([`VulkanOptions::indirect_loops`]).
pub const INDIRECT_LOOPS_ENV: &str = "CAPTURE_VULKAN_INDIRECT_LOOPS";

/// How to open the backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VulkanOptions {
    /// The Vulkan loader library to load; `None` for the system's `libvulkan.so.1`.
    pub loader: Option<std::path::PathBuf>,
    /// Enable the Khronos validation layer, with synchronisation validation, when it is
    /// installed; its warnings and errors are collected.
    pub validation: bool,
    /// Where device pages live.
    pub memory: MemoryMode,
    /// The device to open; `None` for the best-ranked one that qualifies (discrete GPU,
    /// integrated GPU, virtual GPU, CPU). An index or name no device has is a typed
    /// [`Unavailable`] listing the devices seen.
    pub device: Option<DeviceSelector>,
    /// Eager commands (launches and copies) after which a stream's open batch is
    /// submitted without waiting for a fence, so the device starts before the host
    /// waits; at least 1. Default [`DEFAULT_SUBMIT_EVERY`]. (A replay call always ends
    /// with one submission.)
    pub submit_every: u32,
    /// Descriptor sets per descriptor pool; at least 1. Default
    /// [`DEFAULT_SETS_PER_POOL`]. A batch or graph that needs more sets adds pools.
    pub sets_per_pool: u32,
    /// At most this many live memory allocations, below the device's own
    /// `maxMemoryAllocationCount` (`None`: the device's limit). A page past it is refused
    /// with an out-of-memory error before `vkAllocateMemory` is called.
    pub max_allocations: Option<u32>,
    /// Run loop replays (rule 30) on the indirect fallback even where the device offers
    /// conditional rendering, which is then not enabled: every dispatch a capture window
    /// records becomes an indirect dispatch whose group counts a loop zeroes after its
    /// flag's iteration ([`LoopEmulation::IndirectDispatch`](crate::LoopEmulation)). For
    /// testing that path on a device that has the extension (lavapipe); default `false`
    /// (conditional rendering where offered, the fallback elsewhere). A device handed
    /// over takes the fallback too when this is set.
    pub indirect_loops: bool,
}

impl Default for VulkanOptions {
    /// The system loader, no validation, [`MemoryMode::Auto`], the best-ranked device,
    /// the default cadence and pool size, the device's allocation limit.
    fn default() -> Self {
        Self {
            loader: None,
            validation: false,
            memory: MemoryMode::Auto,
            device: None,
            submit_every: DEFAULT_SUBMIT_EVERY,
            sets_per_pool: DEFAULT_SETS_PER_POOL,
            max_allocations: None,
            indirect_loops: false,
        }
    }
}

impl VulkanOptions {
    /// The defaults, with forced staging from `CAPTURE_VK_FORCE_STAGING=1`, the device
    /// from [`DEVICE_ENV`] (`CAPTURE_VULKAN_DEVICE`: an index or a piece of a name), and
    /// the indirect loop fallback forced from [`INDIRECT_LOOPS_ENV`]
    /// (`CAPTURE_VULKAN_INDIRECT_LOOPS=1`).
    pub fn from_env() -> Self {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// [`VulkanOptions::from_env`] over the variables `var` looks up.
    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Self {
        let forced = var("CAPTURE_VK_FORCE_STAGING").is_some_and(|v| v == "1");
        let device = var(DEVICE_ENV)
            .filter(|v| !v.trim().is_empty())
            .map(|v| DeviceSelector::parse(&v));
        Self {
            memory: if forced {
                MemoryMode::ForcedStaging
            } else {
                MemoryMode::Auto
            },
            device,
            indirect_loops: var(INDIRECT_LOOPS_ENV).is_some_and(|v| v == "1"),
            ..Self::default()
        }
    }
}

/// Vulkan objects a caller already owns, handed to [`VulkanBackend::from_external`](crate::VulkanBackend::from_external): the
/// backend runs on them and never destroys them. Its `# Safety` list says what the caller
/// guarantees about each.
#[derive(Clone)]
pub struct ExternalDevice {
    /// The loader the instance and the device were loaded through; the backend keeps a
    /// clone, so the library stays loaded while it lives.
    pub entry: ash::Entry,
    /// The instance.
    pub instance: ash::Instance,
    /// The `VkApplicationInfo::apiVersion` the instance was created with
    /// ([`vk::API_VERSION_1_2`] or later). Vulkan cannot be asked for it afterwards, and
    /// a device offers its version's functions only up to it.
    pub instance_api_version: u32,
    /// The physical device the device was created on.
    pub physical_device: vk::PhysicalDevice,
    /// The device.
    pub device: ash::Device,
    /// The queue family of the queue the backend submits to; it must support compute.
    pub queue_family: u32,
    /// The queue's index in its family.
    pub queue_index: u32,
    /// The lock the caller submits to that queue under, to share with the backend; `None`
    /// for a lock of the backend's own, which the caller takes through
    /// [`VulkanBackend::with_queue`](crate::VulkanBackend::with_queue).
    pub queue_lock: Option<Arc<Mutex<vk::Queue>>>,
    /// Whether the device was created with `VK_EXT_conditional_rendering` enabled and its
    /// `conditionalRendering` and `inheritedConditionalRendering` features on: what a
    /// loop replay (rule 30) runs on. Vulkan cannot be asked, so the backend takes the
    /// caller's word (checking only that the physical device offers them); `false`
    /// runs loop replays on the indirect fallback
    /// ([`LoopEmulation::IndirectDispatch`](crate::LoopEmulation)).
    pub conditional_rendering: bool,
}

impl std::fmt::Debug for ExternalDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalDevice")
            .field("instance", &self.instance.handle())
            .field("instance_api_version", &self.instance_api_version)
            .field("physical_device", &self.physical_device)
            .field("device", &self.device.handle())
            .field("queue_family", &self.queue_family)
            .field("queue_index", &self.queue_index)
            .field("queue_lock", &self.queue_lock.is_some())
            .field("conditional_rendering", &self.conditional_rendering)
            .finish_non_exhaustive()
    }
}

/// Refuses a zero cadence or pool size.
pub(crate) fn check_options(options: &VulkanOptions) -> Result<(), Unavailable> {
    for (name, value) in [
        ("submit_every", options.submit_every),
        ("sets_per_pool", options.sets_per_pool),
    ] {
        if value == 0 {
            return Err(unavailable(format!(
                "VulkanOptions::{name} must be at least 1"
            )));
        }
    }
    Ok(())
}

/// Refuses, for a device the caller hands over, the options that only say what
/// [`VulkanBackend::new`](crate::VulkanBackend::new) opens: rather than ignore them.
pub(crate) fn check_external_options(options: &VulkanOptions) -> Result<(), Unavailable> {
    let named = [
        ("loader", options.loader.is_some()),
        ("validation", options.validation),
        ("device", options.device.is_some()),
    ];
    match named.iter().find(|(_, set)| *set) {
        Some((name, _)) => Err(unavailable(format!(
            "VulkanOptions::{name} says what VulkanBackend::new opens; a device handed over \
             is the caller's as it is"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(set: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            set.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn the_environment_names_the_device_and_the_memory_mode() {
        assert_eq!(
            VulkanOptions::from_vars(vars(&[])),
            VulkanOptions::default()
        );
        let named = VulkanOptions::from_vars(vars(&[(DEVICE_ENV, "llvmpipe")]));
        assert_eq!(named.device, Some(DeviceSelector::Name("llvmpipe".into())));
        let indexed = VulkanOptions::from_vars(vars(&[
            (DEVICE_ENV, "1"),
            ("CAPTURE_VK_FORCE_STAGING", "1"),
        ]));
        assert_eq!(indexed.device, Some(DeviceSelector::Index(1)));
        assert_eq!(indexed.memory, MemoryMode::ForcedStaging);
        let blank = VulkanOptions::from_vars(vars(&[(DEVICE_ENV, "  ")]));
        assert_eq!(blank.device, None);
        assert!(!blank.indirect_loops);
        let indirect = VulkanOptions::from_vars(vars(&[(INDIRECT_LOOPS_ENV, "1")]));
        assert!(indirect.indirect_loops);
    }
}
