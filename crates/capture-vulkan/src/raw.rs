//! The only module that calls Vulkan. Every `unsafe` block carries a `// SAFETY:` line
//! naming the fact that makes it sound; everything outside calls the safe functions
//! here.
//!
//! Facts the rest of the crate guarantees (and these functions rely on):
//! - every child object is created from, and destroyed before, the [`Gpu`] it holds an
//!   `Arc` of;
//! - a command pool and the buffers allocated from it are used under the pool's lock;
//! - the queue is used under [`Gpu::queue`]'s lock (the documented queue lock), which
//!   the caller of [`VulkanBackend::from_external`] shares;
//! - an object is destroyed only once nothing submitted still uses it (the core frees
//!   through its drop queue behind a timeline value).

use std::ffi::{CStr, c_void};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ash::vk;

use crate::device::{self, DeviceSelector, Seen};
use crate::error::{Unavailable, unavailable, vk_error};
use crate::fault::{Faults, VulkanCall};
use crate::memory::MemoryUse;
use crate::options::ExternalDevice;
use capture_core::ServerError;

/// Validation messages (warnings and errors) the debug messenger collected.
#[derive(Debug, Default)]
pub(crate) struct Messages {
    pub(crate) list: Mutex<Vec<String>>,
}

impl Messages {
    /// The messages collected so far, taken.
    pub(crate) fn take(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.list))
    }
}

/// The debug messenger, when the validation layer is on.
type Debug = Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>;

/// A device that could not be opened: what must be torn down (the loader last: the
/// instance's functions live in it) and why.
type Failed = (ash::Entry, ash::Instance, Debug, Unavailable);

/// Who destroys the instance and the device.
enum Ownership {
    /// Opened by [`Gpu::open`]: when the last handle drops, the device, the messenger and
    /// the instance are destroyed, in that order (the loader is unloaded after them).
    Owned(Box<(ash::Instance, Debug)>),
    /// Handed over by [`VulkanBackend::from_external`]: the caller owns the instance and
    /// the device, and the backend destroys neither (only what it created from them).
    Borrowed,
}

/// The instance, device and queue, shared by every object made from them.
pub(crate) struct Gpu {
    /// The loader, kept loaded while the backend lives (the instance's and the device's
    /// functions live in it), the caller's too; dropped after everything else is gone.
    _entry: ash::Entry,
    owner: Ownership,
    pub(crate) messages: Arc<Messages>,
    pub(crate) device: ash::Device,
    /// The queue lock: every submission and queue wait of the backend, and of a caller
    /// that handed the device over, happens under it.
    pub(crate) queue: Arc<Mutex<vk::Queue>>,
    pub(crate) family: u32,
    pub(crate) memory: vk::PhysicalDeviceMemoryProperties,
    pub(crate) limits: vk::PhysicalDeviceLimits,
    pub(crate) name: String,
    pub(crate) kind: vk::PhysicalDeviceType,
    pub(crate) api_version: u32,
    pub(crate) validation: bool,
    /// Conditional rendering, which a loop replay predicates its iterations with: its
    /// functions where the device has it enabled, else why not (a loop replay then
    /// zeroes indirect dispatches' group counts instead, `loops.rs`).
    pub(crate) conditional: Conditional,
    /// Faults a test armed at this device's call sites.
    pub(crate) faults: Faults,
    /// Successful `vkQueueSubmit` calls so far.
    pub(crate) submissions: AtomicU64,
    /// Descriptor pools created so far.
    pub(crate) descriptor_pools: AtomicU64,
    /// Command buffers allocated and not freed one by one (a pool's destruction frees
    /// the rest).
    pub(crate) command_buffers: AtomicU64,
    /// Live `VkDeviceMemory` allocations.
    allocations: AtomicU32,
    /// The most live allocations: the device's `maxMemoryAllocationCount`, or less.
    pub(crate) allocation_limit: u32,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The armed fault for `call` (named `op` in the error), if one fires now.
fn fault(gpu: &Gpu, call: VulkanCall, op: &'static str) -> Result<(), ServerError> {
    gpu.faults.check(call).map_err(|code| vk_error(op, code))
}

// SAFETY: the debug messenger's user data is a pointer to `Messages` kept alive (through
// the `Arc` in `Gpu`) until the messenger is destroyed; the callback only appends to the
// mutex-protected list and reads the message the layer hands it.
unsafe extern "system" fn on_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    kind: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    if data.is_null() || user.is_null() {
        return vk::FALSE;
    }
    // SAFETY: the layer passes a valid callback-data pointer for the duration of the
    // call, and `user` is the `Messages` registered with the messenger (see above).
    let (text, messages) = unsafe {
        let text = (*data)
            .message_as_c_str()
            .map(|m| m.to_string_lossy().into_owned())
            .unwrap_or_default();
        (text, &*(user as *const Messages))
    };
    lock(&messages.list).push(format!("{severity:?} {kind:?}: {text}"));
    vk::FALSE
}

/// How to open the device.
#[derive(Clone, Debug)]
pub(crate) struct Open {
    /// Enable the Khronos validation layer (with synchronisation validation) if it is
    /// installed.
    pub(crate) validation: bool,
    /// Load this Vulkan loader library instead of the system's `libvulkan.so.1`.
    pub(crate) loader: Option<std::path::PathBuf>,
    /// At most this many live memory allocations (below the device's own limit).
    pub(crate) max_allocations: Option<u32>,
    /// The device to open; `None` for the best-ranked one that qualifies.
    pub(crate) device: Option<DeviceSelector>,
    /// Enable conditional rendering where the device offers it; `false` forces loop
    /// replays onto the indirect-dispatch fallback (`VulkanOptions::indirect_loops`).
    pub(crate) conditional_rendering: bool,
}

const VALIDATION: &CStr = c"VK_LAYER_KHRONOS_validation";

/// Conditional rendering (`VK_EXT_conditional_rendering`) on a device: what a loop replay
/// predicates its iterations with (rule 30), or why it zeroes indirect dispatches' group
/// counts instead.
pub(crate) enum Conditional {
    /// Enabled with its `conditionalRendering` feature: the extension's functions.
    Enabled(ash::ext::conditional_rendering::Device),
    /// Not enabled, for the reason given: loop replays take the indirect fallback.
    Missing(&'static str),
}

/// Why a device without `VK_EXT_conditional_rendering` takes the indirect fallback.
const NO_EXTENSION: &str = "the device lacks VK_EXT_conditional_rendering";

/// Why a device offering the extension without its `conditionalRendering` feature takes
/// the indirect fallback.
const NO_FEATURE: &str =
    "the device offers VK_EXT_conditional_rendering without its conditionalRendering feature";

/// Why a device handed over without the caller's word takes the indirect fallback.
const NOT_DECLARED: &str = "a device handed over (VulkanBackend::from_external) uses \
     conditional rendering only where ExternalDevice::conditional_rendering says it was \
     created with VK_EXT_conditional_rendering and its conditionalRendering feature";

/// Why a device whose options force it takes the indirect fallback.
const FORCED: &str = "VulkanOptions::indirect_loops forces the indirect fallback";

/// Whether `physical` offers conditional rendering with its `conditionalRendering`
/// feature; why not.
fn conditional_support(
    instance: &ash::Instance,
    physical: vk::PhysicalDevice,
) -> Result<(), &'static str> {
    // SAFETY: `physical` is a live device of the live `instance`.
    let extensions =
        unsafe { instance.enumerate_device_extension_properties(physical) }.unwrap_or_default();
    let offered = extensions.iter().any(|e| {
        e.extension_name_as_c_str()
            .is_ok_and(|n| n == ash::ext::conditional_rendering::NAME)
    });
    if !offered {
        return Err(NO_EXTENSION);
    }
    let mut conditional = vk::PhysicalDeviceConditionalRenderingFeaturesEXT::default();
    let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut conditional);
    // SAFETY: as above; the device offers the extension whose structure is chained, and
    // `features` and its chain live across the call.
    unsafe { instance.get_physical_device_features2(physical, &mut features) };
    if conditional.conditional_rendering == vk::TRUE {
        Ok(())
    } else {
        Err(NO_FEATURE)
    }
}

impl Gpu {
    /// Loads Vulkan at run time and opens the best-ranked device (or the one
    /// `open.device` names) with a compute queue, Vulkan ≥ 1.2 and timeline semaphores.
    pub(crate) fn open(open: Open) -> Result<Arc<Gpu>, Unavailable> {
        let entry = match &open.loader {
            // SAFETY: loading the loader library runs its initialisers; nothing else in
            // the process depends on it being absent.
            None => unsafe { ash::Entry::load() },
            // SAFETY: as above, for the library the caller named.
            Some(path) => unsafe { ash::Entry::load_from(path) },
        }
        .map_err(|e| unavailable(format!("no Vulkan loader: {e}")))?;
        // SAFETY: `entry` holds a loaded loader; the query takes no pointers of ours.
        let version = unsafe { entry.try_enumerate_instance_version() }
            .map_err(|e| unavailable(format!("instance version query failed: {e}")))?
            .unwrap_or(vk::API_VERSION_1_0);
        if version < vk::API_VERSION_1_2 {
            return Err(unavailable(format!(
                "the Vulkan instance is {}.{}, 1.2 is needed",
                vk::api_version_major(version),
                vk::api_version_minor(version)
            )));
        }
        // SAFETY: as above.
        let layers = unsafe { entry.enumerate_instance_layer_properties() }.unwrap_or_default();
        let has_validation = layers
            .iter()
            .any(|l| l.layer_name_as_c_str().is_ok_and(|n| n == VALIDATION));
        let validation = open.validation && has_validation;
        let layer_names = if validation {
            vec![VALIDATION.as_ptr()]
        } else {
            Vec::new()
        };
        // SAFETY: as above; the layer name is a NUL-terminated constant.
        let layer_extensions =
            unsafe { entry.enumerate_instance_extension_properties(Some(VALIDATION)) }
                .unwrap_or_default();
        let offers = |name: &CStr| {
            layer_extensions
                .iter()
                .any(|e| e.extension_name_as_c_str().is_ok_and(|n| n == name))
        };
        let mut extensions = Vec::new();
        if validation {
            extensions.push(ash::ext::debug_utils::NAME.as_ptr());
            if offers(ash::ext::validation_features::NAME) {
                extensions.push(ash::ext::validation_features::NAME.as_ptr());
            }
        }
        let app = vk::ApplicationInfo::default()
            .application_name(c"capture")
            .api_version(vk::API_VERSION_1_2);
        let enables = [vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION];
        let mut features =
            vk::ValidationFeaturesEXT::default().enabled_validation_features(&enables);
        let mut info = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layer_names)
            .enabled_extension_names(&extensions);
        if validation {
            info = info.push_next(&mut features);
        }
        // SAFETY: every pointer in `info` (names, app info, features) lives until the
        // call returns.
        let instance = unsafe { entry.create_instance(&info, None) }
            .map_err(|e| unavailable(format!("vkCreateInstance failed: {e}")))?;
        let messages = Arc::new(Messages::default());
        let debug = if validation {
            let utils = ash::ext::debug_utils::Instance::new(&entry, &instance);
            let info = vk::DebugUtilsMessengerCreateInfoEXT::default()
                .message_severity(
                    vk::DebugUtilsMessageSeverityFlagsEXT::WARNING
                        | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
                )
                .message_type(
                    vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                        | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE
                        | vk::DebugUtilsMessageTypeFlagsEXT::GENERAL,
                )
                .pfn_user_callback(Some(on_message))
                .user_data(Arc::as_ptr(&messages) as *mut c_void);
            // SAFETY: the user data outlives the messenger (the `Arc` is held by `Gpu`,
            // which destroys the messenger first in `drop`).
            match unsafe { utils.create_debug_utils_messenger(&info, None) } {
                Ok(m) => Some((utils, m)),
                Err(_) => None,
            }
        } else {
            None
        };
        match Self::device(entry, instance, debug, messages, &open, validation) {
            Ok(gpu) => Ok(Arc::new(gpu)),
            Err(failed) => {
                let (entry, instance, debug, e) = *failed;
                // SAFETY: nothing was created from the instance but the messenger, which
                // is destroyed first; the loader (`entry`) stays loaded until after both.
                unsafe {
                    if let Some((utils, m)) = debug {
                        utils.destroy_debug_utils_messenger(m, None);
                    }
                    instance.destroy_instance(None);
                }
                drop(entry);
                Err(e)
            }
        }
    }

    fn device(
        entry: ash::Entry,
        instance: ash::Instance,
        debug: Debug,
        messages: Arc<Messages>,
        open: &Open,
        validation: bool,
    ) -> Result<Gpu, Box<Failed>> {
        // SAFETY: `instance` is live; the returned handles are plain values.
        let physicals = match unsafe { instance.enumerate_physical_devices() } {
            Ok(p) if !p.is_empty() => p,
            Ok(_) => {
                return Err(Box::new((
                    entry,
                    instance,
                    debug,
                    unavailable("no Vulkan device"),
                )));
            }
            Err(e) => {
                let why = format!("enumerating devices failed: {e}");
                return Err(Box::new((entry, instance, debug, unavailable(why))));
            }
        };
        let all: Vec<_> = physicals
            .iter()
            // SAFETY: `physical` came from this instance.
            .map(|&physical| unsafe { instance.get_physical_device_properties(physical) })
            .collect();
        let seen: Vec<Seen> = all
            .iter()
            .map(|props| Seen {
                name: props
                    .device_name_as_c_str()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|_| "unnamed device".into()),
                kind: props.device_type,
            })
            .collect();
        let order = match device::order(&seen, open.device.as_ref()) {
            Ok(order) => order,
            Err(why) => return Err(Box::new((entry, instance, debug, unavailable(why)))),
        };
        let mut why =
            String::from("no device offers a compute queue, Vulkan 1.2 and timeline semaphores");
        for i in order {
            let (physical, props, name) = (physicals[i], all[i], &seen[i].name);
            if props.api_version < vk::API_VERSION_1_2 {
                why = format!("{name}: Vulkan 1.2 is needed");
                continue;
            }
            let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
            let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut v12);
            // SAFETY: `features` and its chain live across the call.
            unsafe { instance.get_physical_device_features2(physical, &mut features) };
            if v12.timeline_semaphore != vk::TRUE {
                why = format!("{name}: the device lacks timeline semaphores");
                continue;
            }
            // SAFETY: `physical` came from this instance.
            let families =
                unsafe { instance.get_physical_device_queue_family_properties(physical) };
            let Some(family) = families
                .iter()
                .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
            else {
                why = format!("{name}: the device has no compute queue");
                continue;
            };
            let family = family as u32;
            let priorities = [1.0f32];
            let queues = [vk::DeviceQueueCreateInfo::default()
                .queue_family_index(family)
                .queue_priorities(&priorities)];
            let mut enable12 =
                vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
            // Conditional rendering where the device has it, with both its features: what
            // a loop replay runs on (rule 30); without it loops take the indirect fallback.
            let conditional = if open.conditional_rendering {
                conditional_support(&instance, physical)
            } else {
                Err(FORCED)
            };
            let mut enable_conditional =
                vk::PhysicalDeviceConditionalRenderingFeaturesEXT::default()
                    .conditional_rendering(true);
            let extensions = [ash::ext::conditional_rendering::NAME.as_ptr()];
            let mut info = vk::DeviceCreateInfo::default()
                .queue_create_infos(&queues)
                .push_next(&mut enable12);
            if conditional.is_ok() {
                info = info
                    .enabled_extension_names(&extensions)
                    .push_next(&mut enable_conditional);
            }
            // SAFETY: every pointer in `info` lives until the call returns; the extension
            // and its features are enabled only where the device offers them.
            let device = match unsafe { instance.create_device(physical, &info, None) } {
                Ok(d) => d,
                Err(e) => {
                    why = format!("{name}: vkCreateDevice failed: {e}");
                    continue;
                }
            };
            let conditional = match conditional {
                Ok(()) => Conditional::Enabled(ash::ext::conditional_rendering::Device::new(
                    &instance, &device,
                )),
                Err(why) => Conditional::Missing(why),
            };
            // SAFETY: the family was requested with one queue at device creation.
            let queue = unsafe { device.get_device_queue(family, 0) };
            // SAFETY: `physical` came from this instance.
            let memory = unsafe { instance.get_physical_device_memory_properties(physical) };
            return Ok(Gpu {
                _entry: entry,
                owner: Ownership::Owned(Box::new((instance, debug))),
                messages,
                device,
                queue: Arc::new(Mutex::new(queue)),
                family,
                memory,
                limits: props.limits,
                name: name.clone(),
                kind: props.device_type,
                api_version: props.api_version,
                validation,
                conditional,
                faults: Faults::default(),
                submissions: AtomicU64::new(0),
                descriptor_pools: AtomicU64::new(0),
                command_buffers: AtomicU64::new(0),
                allocations: AtomicU32::new(0),
                allocation_limit: allocation_limit(&props.limits, open.max_allocations),
            });
        }
        Err(Box::new((entry, instance, debug, unavailable(why))))
    }

    /// Runs on a device the caller made and keeps owning (see
    /// [`VulkanBackend::from_external`], whose checks these are).
    ///
    /// # Safety
    ///
    /// [`VulkanBackend::from_external`]'s `# Safety` list.
    // SAFETY: the contract is that list; each block below names the item it rests on.
    pub(crate) unsafe fn adopt(
        external: ExternalDevice,
        max_allocations: Option<u32>,
        indirect_loops: bool,
    ) -> Result<Gpu, Unavailable> {
        let ExternalDevice {
            entry,
            instance,
            instance_api_version,
            physical_device,
            device,
            queue_family,
            queue_index,
            queue_lock,
            conditional_rendering,
        } = external;
        let version = |v: u32| format!("{}.{}", vk::api_version_major(v), vk::api_version_minor(v));
        if instance_api_version < vk::API_VERSION_1_2 {
            return Err(unavailable(format!(
                "the instance was created for Vulkan {}, 1.2 is needed",
                version(instance_api_version)
            )));
        }
        // SAFETY: the caller guarantees `physical_device` is a live device of the live
        // `instance`.
        let props = unsafe { instance.get_physical_device_properties(physical_device) };
        let name = props
            .device_name_as_c_str()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "unnamed device".into());
        if props.api_version < vk::API_VERSION_1_2 {
            return Err(unavailable(format!(
                "{name}: the device is Vulkan {}, 1.2 is needed",
                version(props.api_version)
            )));
        }
        let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut v12);
        // SAFETY: as above, and the instance is Vulkan 1.2 (checked), which has the
        // query; `features` and its chain live across the call.
        unsafe { instance.get_physical_device_features2(physical_device, &mut features) };
        if v12.timeline_semaphore != vk::TRUE {
            return Err(unavailable(format!(
                "{name}: the device lacks timeline semaphores, so no device of it has them \
                 enabled"
            )));
        }
        // SAFETY: as above.
        let families =
            unsafe { instance.get_physical_device_queue_family_properties(physical_device) };
        let Some(family) = families.get(queue_family as usize) else {
            return Err(unavailable(format!(
                "{name}: there is no queue family {queue_family} (the device has {})",
                families.len()
            )));
        };
        if !family.queue_flags.contains(vk::QueueFlags::COMPUTE) {
            return Err(unavailable(format!(
                "{name}: queue family {queue_family} does not support compute"
            )));
        }
        if queue_index >= family.queue_count {
            return Err(unavailable(format!(
                "{name}: queue family {queue_family} has {} queue(s), so no queue {queue_index}",
                family.queue_count
            )));
        }
        // SAFETY: the caller guarantees the device was created from `physical_device`
        // with at least `queue_index + 1` queues in the family (both checked against
        // what the family offers).
        let queue = unsafe { device.get_device_queue(queue_family, queue_index) };
        let queue = match queue_lock {
            Some(shared) => {
                if *lock(&shared) != queue {
                    return Err(unavailable(format!(
                        "{name}: the queue lock holds another queue than queue {queue_index} \
                         of family {queue_family}"
                    )));
                }
                shared
            }
            None => Arc::new(Mutex::new(queue)),
        };
        // Conditional rendering only where the caller says it enabled it (Vulkan cannot
        // be asked), and then only if the physical device has it, with its feature.
        let conditional = if conditional_rendering {
            if let Err(why) = conditional_support(&instance, physical_device) {
                return Err(unavailable(format!(
                    "{name}: ExternalDevice::conditional_rendering says the device was \
                     created with VK_EXT_conditional_rendering, but {why}"
                )));
            }
            if indirect_loops {
                Conditional::Missing(FORCED)
            } else {
                Conditional::Enabled(ash::ext::conditional_rendering::Device::new(
                    &instance, &device,
                ))
            }
        } else {
            Conditional::Missing(NOT_DECLARED)
        };
        // SAFETY: as for the properties above.
        let memory = unsafe { instance.get_physical_device_memory_properties(physical_device) };
        Ok(Gpu {
            _entry: entry,
            owner: Ownership::Borrowed,
            messages: Arc::new(Messages::default()),
            device,
            queue,
            family: queue_family,
            memory,
            limits: props.limits,
            name,
            kind: props.device_type,
            api_version: props.api_version,
            validation: false,
            conditional,
            faults: Faults::default(),
            submissions: AtomicU64::new(0),
            descriptor_pools: AtomicU64::new(0),
            command_buffers: AtomicU64::new(0),
            allocations: AtomicU32::new(0),
            allocation_limit: allocation_limit(&props.limits, max_allocations),
        })
    }

    /// The memory type for `use_`: the chosen one when `bits` allows it, else the first
    /// allowed type with the flags the use requires.
    pub(crate) fn memory_type(&self, bits: u32, use_: &MemoryUse) -> Option<u32> {
        if bits & (1 << use_.index) != 0 {
            return Some(use_.index);
        }
        (0..self.memory.memory_type_count).find(|&i| {
            bits & (1 << i) != 0
                && self.memory.memory_types[i as usize]
                    .property_flags
                    .contains(use_.required)
        })
    }

    /// Counts one more live allocation, or `false` when that would pass the limit.
    fn reserve_allocation(&self) -> bool {
        self.allocations
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.allocation_limit).then_some(n + 1)
            })
            .is_ok()
    }

    fn release_allocation(&self) {
        self.allocations.fetch_sub(1, Ordering::AcqRel);
    }

    /// The messages collected so far, taken.
    pub(crate) fn take_messages(&self) -> Vec<String> {
        self.messages.take()
    }

    /// Waits until the device is idle (teardown only): the whole device when the
    /// backend owns it (it has one queue), the backend's queue when the device is the
    /// caller's (whose other queues the backend never locks).
    pub(crate) fn idle(&self) {
        let queue = lock(&self.queue);
        match self.owner {
            Ownership::Owned(_) => {
                // SAFETY: the queue lock is held, and the device has no other queue, so
                // no submission races the wait.
                let _ = unsafe { self.device.device_wait_idle() };
            }
            Ownership::Borrowed => {
                // SAFETY: the queue lock is held, so no submission to this queue races
                // the wait (the caller submits to it only under this lock).
                let _ = unsafe { self.device.queue_wait_idle(*queue) };
            }
        }
    }

    /// Runs `f` with the queue, under the queue lock.
    pub(crate) fn with_queue<R>(&self, f: impl FnOnce(vk::Queue) -> R) -> R {
        let queue = lock(&self.queue);
        f(*queue)
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        match &mut self.owner {
            Ownership::Owned(owned) => {
                let (instance, debug) = &mut **owned;
                // SAFETY: every child object holds an `Arc<Gpu>`, so all of them are gone;
                // the backend created the device and the instance, and nothing else holds
                // them; the messenger goes before the instance that made it.
                unsafe {
                    let _ = self.device.device_wait_idle();
                    self.device.destroy_device(None);
                    if let Some((utils, m)) = debug.take() {
                        utils.destroy_debug_utils_messenger(m, None);
                    }
                    instance.destroy_instance(None);
                }
            }
            // The caller's: every object the backend made from them is gone (each holds
            // an `Arc<Gpu>`, and each waited for its queue work), and they stay alive.
            Ownership::Borrowed => {}
        }
    }
}

/// The most live allocations: the device's `maxMemoryAllocationCount`, or `cap` below it.
fn allocation_limit(limits: &vk::PhysicalDeviceLimits, cap: Option<u32>) -> u32 {
    cap.map_or(limits.max_memory_allocation_count, |cap| {
        cap.min(limits.max_memory_allocation_count)
    })
}

/// One page: a `VkDeviceMemory` with one `VkBuffer` over all of it, mapped if the memory
/// is host-visible and mapping was asked for.
pub(crate) struct Page {
    pub(crate) memory: vk::DeviceMemory,
    pub(crate) buffer: vk::Buffer,
    pub(crate) mapped: Option<usize>,
}

/// Allocates a page of `size` bytes of the memory `use_` names, mapped when it says so.
/// Refused before `vkAllocateMemory` when the device's allocation-count limit is reached.
pub(crate) fn create_page(gpu: &Gpu, size: u64, use_: &MemoryUse) -> Result<Page, ServerError> {
    create_buffer(
        gpu,
        size,
        use_,
        vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST,
    )
}

/// A page of `size` bytes a kernel writes and conditional rendering reads its predicate
/// from (a loop replay's `go` word), of the memory `use_` names. Only on a device with
/// conditional rendering enabled.
pub(crate) fn create_predicate(
    gpu: &Gpu,
    size: u64,
    use_: &MemoryUse,
) -> Result<Page, ServerError> {
    create_buffer(
        gpu,
        size,
        use_,
        vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::CONDITIONAL_RENDERING_EXT,
    )
}

/// A page of `size` bytes holding indirect dispatches' group counts (rule 30's indirect
/// fallback, `counts.rs`): written by the host when recorded, by a kernel in a loop
/// replay, by an update command (rule 26), and read by `vkCmdDispatchIndirect`.
pub(crate) fn create_counts(gpu: &Gpu, size: u64, use_: &MemoryUse) -> Result<Page, ServerError> {
    create_buffer(
        gpu,
        size,
        use_,
        vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::INDIRECT_BUFFER
            | vk::BufferUsageFlags::TRANSFER_DST,
    )
}

/// A page of `size` bytes of `usage`, as [`create_page`] says.
fn create_buffer(
    gpu: &Gpu,
    size: u64,
    use_: &MemoryUse,
    usage: vk::BufferUsageFlags,
) -> Result<Page, ServerError> {
    let map = use_.map;
    let info = vk::BufferCreateInfo::default()
        .size(size)
        .usage(usage)
        .sharing_mode(vk::SharingMode::EXCLUSIVE);
    // SAFETY: `info` lives across the call; the device is live.
    let buffer = unsafe { gpu.device.create_buffer(&info, None) }
        .map_err(|e| vk_error("vkCreateBuffer", e))?;
    // SAFETY: `buffer` was just created on this device.
    let needs = unsafe { gpu.device.get_buffer_memory_requirements(buffer) };
    let Some(kind) = gpu.memory_type(needs.memory_type_bits, use_) else {
        // SAFETY: the buffer is unused and unbound.
        unsafe { gpu.device.destroy_buffer(buffer, None) };
        return Err(ServerError::invalid(
            "memory type",
            format!("{:?}", use_.required),
            "the device offers no such memory for buffers",
        ));
    };
    if !gpu.reserve_allocation() {
        // SAFETY: the buffer is unused and unbound.
        unsafe { gpu.device.destroy_buffer(buffer, None) };
        return Err(vk_error(
            "vkAllocateMemory (refused before the call: as many allocations are live as \
             the device's maxMemoryAllocationCount allows)",
            vk::Result::ERROR_TOO_MANY_OBJECTS,
        ));
    }
    let alloc = vk::MemoryAllocateInfo::default()
        .allocation_size(needs.size)
        .memory_type_index(kind);
    let allocated = gpu
        .faults
        .check(VulkanCall::AllocateMemory)
        // SAFETY: `alloc` lives across the call.
        .and_then(|()| unsafe { gpu.device.allocate_memory(&alloc, None) });
    let memory = match allocated {
        Ok(m) => m,
        Err(e) => {
            gpu.release_allocation();
            // SAFETY: the buffer is unused and unbound.
            unsafe { gpu.device.destroy_buffer(buffer, None) };
            return Err(vk_error("vkAllocateMemory", e));
        }
    };
    // SAFETY: buffer and memory are fresh, the type fits the requirements, offset 0.
    let bound = unsafe { gpu.device.bind_buffer_memory(buffer, memory, 0) };
    let mapped = match bound {
        Ok(()) if map => {
            // SAFETY: the memory is host-visible (the type was chosen with the flag) and
            // not mapped yet.
            unsafe {
                gpu.device
                    .map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
            }
            .map(|p| Some(p as usize))
        }
        Ok(()) => Ok(None),
        Err(e) => Err(e),
    };
    match mapped {
        Ok(mapped) => Ok(Page {
            memory,
            buffer,
            mapped,
        }),
        Err(e) => {
            // SAFETY: nothing uses the fresh buffer or memory.
            unsafe {
                gpu.device.destroy_buffer(buffer, None);
                gpu.device.free_memory(memory, None);
            }
            gpu.release_allocation();
            Err(vk_error("vkBindBufferMemory/vkMapMemory", e))
        }
    }
}

/// Frees a page. The core frees only pages with no slice in use, behind the fences of
/// the work that used them.
pub(crate) fn destroy_page(gpu: &Gpu, page: Page) {
    // SAFETY: see above; unmapping happens implicitly with the free.
    unsafe {
        gpu.device.destroy_buffer(page.buffer, None);
        gpu.device.free_memory(page.memory, None);
    }
    gpu.release_allocation();
}

/// Copies `bytes` to the mapped address `at`.
pub(crate) fn write_mapped(at: usize, bytes: &[u8]) {
    // SAFETY: `at` is the mapped address of a live host-visible coherent page plus an
    // offset inside the slice the caller resolved for exactly `bytes.len()` bytes; the
    // staging slice is not read by the device until the copy recorded after this runs.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), at as *mut u8, bytes.len()) };
}

/// Makes the device's writes to a page of non-coherent memory visible to the host: the
/// whole mapping (offset 0 to its end, which `nonCoherentAtomSize` allows).
pub(crate) fn invalidate(gpu: &Gpu, page: &Page) -> Result<(), ServerError> {
    let range = [vk::MappedMemoryRange::default()
        .memory(page.memory)
        .offset(0)
        .size(vk::WHOLE_SIZE)];
    // SAFETY: the page's memory is mapped (whole) and live; the device finished writing it.
    unsafe { gpu.device.invalidate_mapped_memory_ranges(&range) }
        .map_err(|e| vk_error("vkInvalidateMappedMemoryRanges", e))
}

/// Copies from the mapped address `at` into `out`.
pub(crate) fn read_mapped(at: usize, out: &mut [u8]) {
    // SAFETY: `at` is a mapped address inside a live host-visible coherent page covering
    // `out.len()` bytes, and the device finished writing them (the caller waited).
    unsafe { std::ptr::copy_nonoverlapping(at as *const u8, out.as_mut_ptr(), out.len()) };
}

/// A timeline semaphore starting at 0.
pub(crate) fn timeline(gpu: &Gpu) -> Result<vk::Semaphore, ServerError> {
    let mut kind = vk::SemaphoreTypeCreateInfo::default()
        .semaphore_type(vk::SemaphoreType::TIMELINE)
        .initial_value(0);
    let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
    // SAFETY: `info` and its chain live across the call.
    unsafe { gpu.device.create_semaphore(&info, None) }
        .map_err(|e| vk_error("vkCreateSemaphore", e))
}

/// Waits until `semaphore` reaches `value`.
pub(crate) fn wait(gpu: &Gpu, semaphore: vk::Semaphore, value: u64) -> Result<(), ServerError> {
    let semaphores = [semaphore];
    let values = [value];
    let info = vk::SemaphoreWaitInfo::default()
        .semaphores(&semaphores)
        .values(&values);
    // SAFETY: the semaphore is live (its stream holds it); `info` lives across the call.
    unsafe { gpu.device.wait_semaphores(&info, u64::MAX) }
        .map_err(|e| vk_error("vkWaitSemaphores", e))
}

/// The value `semaphore` has reached.
pub(crate) fn reached(gpu: &Gpu, semaphore: vk::Semaphore) -> Result<u64, ServerError> {
    // SAFETY: the semaphore is live.
    unsafe { gpu.device.get_semaphore_counter_value(semaphore) }
        .map_err(|e| vk_error("vkGetSemaphoreCounterValue", e))
}

/// Signals `semaphore` to `value` from the host (a test standing in for another submitter's
/// submission it controls).
#[cfg(test)]
pub(crate) fn signal(gpu: &Gpu, semaphore: vk::Semaphore, value: u64) -> Result<(), ServerError> {
    let info = vk::SemaphoreSignalInfo::default()
        .semaphore(semaphore)
        .value(value);
    // SAFETY: the semaphore is a live timeline semaphore; `value` is above its current
    // value and every value pending on it (the caller's submitter submitted none); `info`
    // lives across the call.
    unsafe { gpu.device.signal_semaphore(&info) }.map_err(|e| vk_error("vkSignalSemaphore", e))
}

/// Destroys a semaphore nothing waits on or signals any more.
pub(crate) fn destroy_semaphore(gpu: &Gpu, semaphore: vk::Semaphore) {
    // SAFETY: the caller waited for every submission that signals it.
    unsafe { gpu.device.destroy_semaphore(semaphore, None) };
}

/// A command pool of the compute family whose buffers can be reset one by one.
pub(crate) fn command_pool(gpu: &Gpu) -> Result<vk::CommandPool, ServerError> {
    let info = vk::CommandPoolCreateInfo::default()
        .queue_family_index(gpu.family)
        .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
    // SAFETY: `info` lives across the call.
    unsafe { gpu.device.create_command_pool(&info, None) }
        .map_err(|e| vk_error("vkCreateCommandPool", e))
}

/// Destroys a pool whose buffers are no longer pending.
pub(crate) fn destroy_command_pool(gpu: &Gpu, pool: vk::CommandPool) {
    // SAFETY: the caller waited for every submission of the pool's buffers.
    unsafe { gpu.device.destroy_command_pool(pool, None) };
}

/// A command buffer from `pool` (held under its lock by the caller).
pub(crate) fn command_buffer(
    gpu: &Gpu,
    pool: vk::CommandPool,
    level: vk::CommandBufferLevel,
) -> Result<vk::CommandBuffer, ServerError> {
    fault(
        gpu,
        VulkanCall::AllocateCommandBuffers,
        "vkAllocateCommandBuffers",
    )?;
    let info = vk::CommandBufferAllocateInfo::default()
        .command_pool(pool)
        .level(level)
        .command_buffer_count(1);
    let mut buffer = vk::CommandBuffer::null();
    // SAFETY: the pool is live and externally synchronised by the caller's lock; `info`
    // asks for one buffer and `buffer` has room for it. (The raw entry point writes into
    // `buffer` rather than a new vector: no heap allocation per batch.)
    unsafe {
        (gpu.device.fp_v1_0().allocate_command_buffers)(gpu.device.handle(), &info, &mut buffer)
    }
    .result()
    .map_err(|e| vk_error("vkAllocateCommandBuffers", e))?;
    gpu.command_buffers.fetch_add(1, Ordering::Relaxed);
    Ok(buffer)
}

/// Frees a command buffer that is not pending.
pub(crate) fn free_command_buffer(gpu: &Gpu, pool: vk::CommandPool, buffer: vk::CommandBuffer) {
    // SAFETY: the caller holds the pool's lock and the buffer's work completed.
    unsafe { gpu.device.free_command_buffers(pool, &[buffer]) };
    gpu.command_buffers.fetch_sub(1, Ordering::Relaxed);
}

/// Starts recording a primary buffer for one submission.
pub(crate) fn begin_primary(gpu: &Gpu, buffer: vk::CommandBuffer) -> Result<(), ServerError> {
    fault(gpu, VulkanCall::BeginCommandBuffer, "vkBeginCommandBuffer")?;
    let info =
        vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
    // SAFETY: the buffer is in the initial state (fresh or reset) under the pool lock.
    unsafe { gpu.device.begin_command_buffer(buffer, &info) }
        .map_err(|e| vk_error("vkBeginCommandBuffer", e))
}

/// Starts recording a secondary buffer a graph replays: simultaneous use, so several
/// replays may be pending at once (`simultaneous = false` only for the canary test);
/// with `predicate`, what it records from here on runs inside conditional rendering on
/// that word ([`begin_conditional`]), which the caller ends before ending the buffer.
pub(crate) fn begin_secondary(
    gpu: &Gpu,
    buffer: vk::CommandBuffer,
    simultaneous: bool,
    predicate: Option<(vk::Buffer, u64)>,
) -> Result<(), ServerError> {
    fault(gpu, VulkanCall::BeginCommandBuffer, "vkBeginCommandBuffer")?;
    let inheritance = vk::CommandBufferInheritanceInfo::default();
    let flags = if simultaneous {
        vk::CommandBufferUsageFlags::SIMULTANEOUS_USE
    } else {
        vk::CommandBufferUsageFlags::empty()
    };
    let info = vk::CommandBufferBeginInfo::default()
        .flags(flags)
        .inheritance_info(&inheritance);
    // SAFETY: the buffer is fresh, under the pool lock; `info` lives across the call.
    unsafe { gpu.device.begin_command_buffer(buffer, &info) }
        .map_err(|e| vk_error("vkBeginCommandBuffer", e))?;
    if let Some(predicate) = predicate {
        begin_conditional(gpu, buffer, predicate);
    }
    Ok(())
}

/// Ends recording. On an error the buffer is not recording any more: it may only be
/// freed (an armed fault ends it, then fails).
pub(crate) fn end(gpu: &Gpu, buffer: vk::CommandBuffer) -> Result<(), ServerError> {
    // SAFETY: the buffer is recording, under the pool lock.
    unsafe { gpu.device.end_command_buffer(buffer) }
        .map_err(|e| vk_error("vkEndCommandBuffer", e))?;
    fault(gpu, VulkanCall::EndCommandBuffer, "vkEndCommandBuffer")
}

/// A full memory barrier between everything recorded before and after it in `buffer`:
/// compute and transfer writes are made visible to compute, transfer and the host.
pub(crate) fn barrier(gpu: &Gpu, buffer: vk::CommandBuffer) {
    let memory = [vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE)
        .dst_access_mask(
            vk::AccessFlags::SHADER_READ
                | vk::AccessFlags::SHADER_WRITE
                | vk::AccessFlags::TRANSFER_READ
                | vk::AccessFlags::TRANSFER_WRITE
                | vk::AccessFlags::HOST_READ,
        )];
    // SAFETY: the buffer is recording under the pool lock; the barrier array lives across
    // the call.
    unsafe {
        gpu.device.cmd_pipeline_barrier(
            buffer,
            vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
            vk::PipelineStageFlags::COMPUTE_SHADER
                | vk::PipelineStageFlags::TRANSFER
                | vk::PipelineStageFlags::HOST,
            vk::DependencyFlags::empty(),
            &memory,
            &[],
            &[],
        )
    };
}

/// A barrier as [`barrier`] is, and for what a loop replay adds (rule 30). With
/// conditional rendering enabled, the first scope takes its reads of the predicate too
/// (a kernel may then write it), and the second makes shader writes visible to them (the
/// next iteration's predicate). Without it (the indirect fallback), the same for the
/// indirect dispatches' reads of their group counts (`DRAW_INDIRECT`,
/// `INDIRECT_COMMAND_READ`), which a kernel or an update command writes.
pub(crate) fn loop_barrier(gpu: &Gpu, buffer: vk::CommandBuffer) {
    let (stage, access) = match gpu.conditional {
        Conditional::Enabled(_) => (
            vk::PipelineStageFlags::CONDITIONAL_RENDERING_EXT,
            vk::AccessFlags::CONDITIONAL_RENDERING_READ_EXT,
        ),
        Conditional::Missing(_) => (
            vk::PipelineStageFlags::DRAW_INDIRECT,
            vk::AccessFlags::INDIRECT_COMMAND_READ,
        ),
    };
    let memory = [vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE)
        .dst_access_mask(
            vk::AccessFlags::SHADER_READ
                | vk::AccessFlags::SHADER_WRITE
                | vk::AccessFlags::TRANSFER_READ
                | vk::AccessFlags::TRANSFER_WRITE
                | vk::AccessFlags::HOST_READ
                | access,
        )];
    // SAFETY: the buffer is recording under the pool lock; the barrier array lives across
    // the call; the conditional-rendering stage and access are used only on a device with
    // the `conditionalRendering` feature enabled (matched above), the indirect ones are
    // core Vulkan and valid on a compute queue.
    unsafe {
        gpu.device.cmd_pipeline_barrier(
            buffer,
            vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER | stage,
            vk::PipelineStageFlags::COMPUTE_SHADER
                | vk::PipelineStageFlags::TRANSFER
                | vk::PipelineStageFlags::HOST
                | stage,
            vk::DependencyFlags::empty(),
            &memory,
            &[],
            &[],
        )
    };
}

/// Begins conditional rendering in `buffer` on the `u32` at `predicate` (buffer,
/// offset): the dispatches recorded until [`end_conditional`] run only while that word
/// is non-zero. Nothing is recorded on a device without conditional rendering enabled
/// (where no window has a word to pass).
pub(crate) fn begin_conditional(
    gpu: &Gpu,
    buffer: vk::CommandBuffer,
    predicate: (vk::Buffer, u64),
) {
    let Conditional::Enabled(functions) = &gpu.conditional else {
        return;
    };
    let info = vk::ConditionalRenderingBeginInfoEXT::default()
        .buffer(predicate.0)
        .offset(predicate.1);
    // SAFETY: the extension is enabled (its functions were loaded from the device); the
    // buffer is recording under the pool lock, outside a render pass, with no
    // conditional rendering active (each block is ended before the next begins, and a
    // primary executes secondaries only outside one); the predicate buffer is a live
    // page created with the conditional-rendering usage, and the offset a multiple of
    // 4 inside it; `info` lives across the call.
    unsafe { (functions.fp().cmd_begin_conditional_rendering_ext)(buffer, &info) };
}

/// Ends the conditional rendering [`begin_conditional`] began in `buffer`.
pub(crate) fn end_conditional(gpu: &Gpu, buffer: vk::CommandBuffer) {
    let Conditional::Enabled(functions) = &gpu.conditional else {
        return;
    };
    // SAFETY: the buffer is recording under the pool lock, with the conditional
    // rendering it began active.
    unsafe { (functions.fp().cmd_end_conditional_rendering_ext)(buffer) };
}

/// Records a fill of the `len` bytes at `to` (buffer, offset; both multiples of 4) with
/// the `u32` `value`: a loop replay zeroing its flag and counter on the indirect fallback.
pub(crate) fn fill(
    gpu: &Gpu,
    buffer: vk::CommandBuffer,
    to: (vk::Buffer, u64),
    len: u64,
    value: u32,
) {
    // SAFETY: the buffer is a live page (the core pins it while work is pending) made
    // with the transfer-destination usage, the range inside it, offset and length
    // multiples of 4 (the core's flag and counter are 4-byte buffers); `buffer` is
    // recording under its pool lock, outside a render pass.
    unsafe { gpu.device.cmd_fill_buffer(buffer, to.0, to.1, len, value) };
}

/// Records a copy of `len` bytes.
pub(crate) fn copy(
    gpu: &Gpu,
    buffer: vk::CommandBuffer,
    from: (vk::Buffer, u64),
    to: (vk::Buffer, u64),
    len: u64,
) {
    let region = [vk::BufferCopy {
        src_offset: from.1,
        dst_offset: to.1,
        size: len,
    }];
    // SAFETY: both buffers are live pages (the core pins them while work is pending), the
    // ranges lie inside them, and `buffer` is recording under its pool lock.
    unsafe { gpu.device.cmd_copy_buffer(buffer, from.0, to.0, &region) };
}

/// Records a dispatch of `kernel`'s pipeline over `set`, binding the pipeline first when
/// `bind_pipeline` (the caller knows when the command buffer has it bound already).
pub(crate) fn dispatch(
    gpu: &Gpu,
    buffer: vk::CommandBuffer,
    kernel: &KernelObjects,
    bind_pipeline: bool,
    set: vk::DescriptorSet,
    push: &[u8],
    grid: [u32; 3],
) {
    bind_for_dispatch(gpu, buffer, kernel, bind_pipeline, set, push);
    // SAFETY: `buffer` is recording under its pool lock, with the pipeline, set and push
    // constants the dispatch needs bound above.
    unsafe { gpu.device.cmd_dispatch(buffer, grid[0], grid[1], grid[2]) };
}

/// As [`dispatch`], with the group counts read by the device when the dispatch runs
/// from the three `u32` at `counts` (buffer, offset): rule 30's indirect fallback, whose
/// loop replays zero them for the iterations after the flag's.
pub(crate) fn dispatch_indirect(
    gpu: &Gpu,
    buffer: vk::CommandBuffer,
    kernel: &KernelObjects,
    bind_pipeline: bool,
    set: vk::DescriptorSet,
    push: &[u8],
    counts: (vk::Buffer, u64),
) {
    bind_for_dispatch(gpu, buffer, kernel, bind_pipeline, set, push);
    // SAFETY: `buffer` is recording under its pool lock, with the pipeline, set and push
    // constants bound above; the counts buffer is a live page made with the indirect
    // usage (`create_counts`), and the offset a multiple of 4 with 12 bytes after it
    // inside the page.
    unsafe { gpu.device.cmd_dispatch_indirect(buffer, counts.0, counts.1) };
}

/// Binds what a dispatch of `kernel` over `set` needs, as [`dispatch`] says.
fn bind_for_dispatch(
    gpu: &Gpu,
    buffer: vk::CommandBuffer,
    kernel: &KernelObjects,
    bind_pipeline: bool,
    set: vk::DescriptorSet,
    push: &[u8],
) {
    // SAFETY: pipeline, layout and set are live (the kernel and the set's pool outlive
    // the submission), and `buffer` is recording under its pool lock; the push-constant
    // bytes fit the layout's range (the core checked the scalars' size against the
    // signature the layout was made from).
    unsafe {
        if bind_pipeline {
            gpu.device
                .cmd_bind_pipeline(buffer, vk::PipelineBindPoint::COMPUTE, kernel.pipeline);
        }
        gpu.device.cmd_bind_descriptor_sets(
            buffer,
            vk::PipelineBindPoint::COMPUTE,
            kernel.layout,
            0,
            &[set],
            &[],
        );
        if !push.is_empty() && push.len() as u32 <= kernel.push_bytes {
            gpu.device.cmd_push_constants(
                buffer,
                kernel.layout,
                vk::ShaderStageFlags::COMPUTE,
                0,
                push,
            );
        }
    }
}

/// Records a write of `bytes` (a multiple of 4, at most 65,536) at `to` (buffer, offset
/// a multiple of 4): an update of a dispatch's group counts (rule 26 on the indirect
/// fallback), ordered in the queue after everything submitted before it.
pub(crate) fn update_buffer(
    gpu: &Gpu,
    buffer: vk::CommandBuffer,
    to: (vk::Buffer, u64),
    bytes: &[u8],
) {
    // SAFETY: `buffer` is recording under its pool lock, outside a render pass; the
    // destination is a live page made with the transfer-destination usage, the range
    // inside it, offset and size multiples of 4 and the size at most 65,536.
    unsafe { gpu.device.cmd_update_buffer(buffer, to.0, to.1, bytes) };
}

/// Records the execution of `secondary` from `primary`.
pub(crate) fn execute(gpu: &Gpu, primary: vk::CommandBuffer, secondaries: &[vk::CommandBuffer]) {
    // SAFETY: the secondaries are executable (ended) and, for graphs, simultaneous-use;
    // the primary is recording; both pools are locked by the caller. (The canary executes
    // a non-simultaneous secondary twice on purpose, into a primary it never submits.)
    unsafe { gpu.device.cmd_execute_commands(primary, secondaries) };
}

/// Submits `buffer`, signalling `semaphore` to `value`, under the queue lock.
pub(crate) fn submit(
    gpu: &Gpu,
    buffer: vk::CommandBuffer,
    semaphore: vk::Semaphore,
    value: u64,
    waits: &[(vk::Semaphore, u64)],
) -> Result<(), ServerError> {
    let buffers = [buffer];
    let semaphores = [semaphore];
    let values = [value];
    let wait_semaphores: Vec<vk::Semaphore> = waits.iter().map(|w| w.0).collect();
    let wait_values: Vec<u64> = waits.iter().map(|w| w.1).collect();
    let wait_stages = vec![vk::PipelineStageFlags::ALL_COMMANDS; waits.len()];
    let mut timeline = vk::TimelineSemaphoreSubmitInfo::default()
        .signal_semaphore_values(&values)
        .wait_semaphore_values(&wait_values);
    let info = [vk::SubmitInfo::default()
        .command_buffers(&buffers)
        .signal_semaphores(&semaphores)
        .wait_semaphores(&wait_semaphores)
        .wait_dst_stage_mask(&wait_stages)
        .push_next(&mut timeline)];
    fault(gpu, VulkanCall::QueueSubmit, "vkQueueSubmit")?;
    let queue = lock(&gpu.queue);
    // SAFETY: the queue lock is held; the buffer is executable; every semaphore waited
    // for is live and its value was submitted before (a fence of its submitter flushed it);
    // every pointer lives across the call.
    unsafe { gpu.device.queue_submit(*queue, &info, vk::Fence::null()) }
        .map_err(|e| vk_error("vkQueueSubmit", e))?;
    gpu.submissions.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// A compute kernel's pipeline objects.
pub(crate) struct KernelObjects {
    pub(crate) module: vk::ShaderModule,
    pub(crate) set_layout: vk::DescriptorSetLayout,
    pub(crate) layout: vk::PipelineLayout,
    pub(crate) pipeline: vk::Pipeline,
    /// The push-constant bytes its layout takes (its scalars), 0 for none.
    pub(crate) push_bytes: u32,
}

/// Builds a compute pipeline from SPIR-V whose entry point is `entry`, whose set 0 has
/// `bindings` storage buffers at bindings `0..bindings`, and whose layout takes
/// `push_bytes` of push constants (its scalars; 0 for none). On an error nothing it made
/// is left alive.
pub(crate) fn kernel(
    gpu: &Gpu,
    spirv: &[u32],
    entry: &CStr,
    bindings: u32,
    push_bytes: u32,
) -> Result<KernelObjects, ServerError> {
    // What is made so far; `destroy_kernel` skips the null handles.
    let mut objects = KernelObjects {
        module: vk::ShaderModule::null(),
        set_layout: vk::DescriptorSetLayout::null(),
        layout: vk::PipelineLayout::null(),
        pipeline: vk::Pipeline::null(),
        push_bytes,
    };
    match build_kernel(gpu, spirv, entry, bindings, &mut objects) {
        Ok(()) => Ok(objects),
        Err(e) => {
            destroy_kernel(gpu, &objects);
            Err(e)
        }
    }
}

fn build_kernel(
    gpu: &Gpu,
    spirv: &[u32],
    entry: &CStr,
    bindings: u32,
    made: &mut KernelObjects,
) -> Result<(), ServerError> {
    fault(gpu, VulkanCall::CreateShaderModule, "vkCreateShaderModule")?;
    let info = vk::ShaderModuleCreateInfo::default().code(spirv);
    // SAFETY: the words came from naga's SPIR-V writer (builtins) or passed naga's SPIR-V
    // front end and validator with bindings that fit the layout below (user kernels,
    // `kernels::check_spirv`); `info` lives across the call.
    made.module = unsafe { gpu.device.create_shader_module(&info, None) }
        .map_err(|e| vk_error("vkCreateShaderModule", e))?;
    let slots: Vec<_> = (0..bindings)
        .map(|b| {
            vk::DescriptorSetLayoutBinding::default()
                .binding(b)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
        })
        .collect();
    fault(
        gpu,
        VulkanCall::CreateDescriptorSetLayout,
        "vkCreateDescriptorSetLayout",
    )?;
    let info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&slots);
    // SAFETY: `info` lives across the call.
    made.set_layout = unsafe { gpu.device.create_descriptor_set_layout(&info, None) }
        .map_err(|e| vk_error("vkCreateDescriptorSetLayout", e))?;
    fault(
        gpu,
        VulkanCall::CreatePipelineLayout,
        "vkCreatePipelineLayout",
    )?;
    let layouts = [made.set_layout];
    let ranges = [vk::PushConstantRange {
        stage_flags: vk::ShaderStageFlags::COMPUTE,
        offset: 0,
        size: made.push_bytes,
    }];
    let ranges = if made.push_bytes > 0 {
        &ranges[..]
    } else {
        &[]
    };
    let info = vk::PipelineLayoutCreateInfo::default()
        .set_layouts(&layouts)
        .push_constant_ranges(ranges);
    // SAFETY: the set layout is live; `info` lives across the call.
    made.layout = unsafe { gpu.device.create_pipeline_layout(&info, None) }
        .map_err(|e| vk_error("vkCreatePipelineLayout", e))?;
    fault(
        gpu,
        VulkanCall::CreateComputePipelines,
        "vkCreateComputePipelines",
    )?;
    let stage = vk::PipelineShaderStageCreateInfo::default()
        .stage(vk::ShaderStageFlags::COMPUTE)
        .module(made.module)
        .name(entry);
    let info = [vk::ComputePipelineCreateInfo::default()
        .stage(stage)
        .layout(made.layout)];
    // SAFETY: module and layout are live; `info` lives across the call.
    made.pipeline = unsafe {
        gpu.device
            .create_compute_pipelines(vk::PipelineCache::null(), &info, None)
    }
    .map_err(|(_, e)| vk_error("vkCreateComputePipelines", e))?[0];
    Ok(())
}

/// Destroys a kernel nothing pending uses.
pub(crate) fn destroy_kernel(gpu: &Gpu, k: &KernelObjects) {
    // SAFETY: the device is idle for the kernel (it is destroyed with the device's last
    // stream, after a wait); destroying a null handle (of a kernel half made) does nothing.
    unsafe {
        gpu.device.destroy_pipeline(k.pipeline, None);
        gpu.device.destroy_pipeline_layout(k.layout, None);
        gpu.device.destroy_descriptor_set_layout(k.set_layout, None);
        gpu.device.destroy_shader_module(k.module, None);
    }
}

/// A descriptor pool for `sets` sets of up to `per_set` storage buffers each.
pub(crate) fn descriptor_pool(
    gpu: &Gpu,
    sets: u32,
    per_set: u32,
) -> Result<vk::DescriptorPool, ServerError> {
    fault(
        gpu,
        VulkanCall::CreateDescriptorPool,
        "vkCreateDescriptorPool",
    )?;
    let sizes = [vk::DescriptorPoolSize {
        ty: vk::DescriptorType::STORAGE_BUFFER,
        descriptor_count: sets * per_set,
    }];
    let info = vk::DescriptorPoolCreateInfo::default()
        .max_sets(sets)
        .pool_sizes(&sizes);
    // SAFETY: `info` lives across the call.
    let pool = unsafe { gpu.device.create_descriptor_pool(&info, None) }
        .map_err(|e| vk_error("vkCreateDescriptorPool", e))?;
    gpu.descriptor_pools.fetch_add(1, Ordering::Relaxed);
    Ok(pool)
}

/// Destroys a descriptor pool whose sets no pending work uses.
pub(crate) fn destroy_descriptor_pool(gpu: &Gpu, pool: vk::DescriptorPool) {
    // SAFETY: see above.
    unsafe { gpu.device.destroy_descriptor_pool(pool, None) };
}

/// Makes every set of `pool` free again, once no pending work uses them.
pub(crate) fn reset_descriptor_pool(gpu: &Gpu, pool: vk::DescriptorPool) {
    // SAFETY: the caller waited for the work that used the pool's sets.
    let _ = unsafe {
        gpu.device
            .reset_descriptor_pool(pool, vk::DescriptorPoolResetFlags::empty())
    };
}

/// Buffers one descriptor set binds at most: a launch's buffers and its info words.
pub(crate) const MAX_BINDINGS: usize = capture_core::MAX_LAUNCH_BUFFERS + 1;

/// The most push-constant bytes a launch passes (Vulkan guarantees 128; a device may
/// allow more, up to this).
pub(crate) const MAX_PUSH_BYTES: usize = 256;

/// A set for `kernel` from `pool` pointing at `buffers` (buffer, offset, range), or
/// `None` when the pool is full.
pub(crate) fn descriptor_set(
    gpu: &Gpu,
    pool: vk::DescriptorPool,
    kernel: &KernelObjects,
    buffers: &[(vk::Buffer, u64, u64)],
) -> Result<Option<vk::DescriptorSet>, ServerError> {
    if buffers.len() > MAX_BINDINGS {
        return Err(ServerError::invalid(
            "kernel bindings",
            buffers.len(),
            format!("a descriptor set binds at most {MAX_BINDINGS} buffers"),
        ));
    }
    let layouts = [kernel.set_layout];
    let info = vk::DescriptorSetAllocateInfo::default()
        .descriptor_pool(pool)
        .set_layouts(&layouts);
    let mut set = vk::DescriptorSet::null();
    // SAFETY: the pool is used under its owner's lock; `info` and `set` live across the
    // call, which writes exactly one handle (`info` names one layout). The raw entry
    // point writes into `set` rather than a new vector: no heap allocation per launch.
    let allocated = unsafe {
        (gpu.device.fp_v1_0().allocate_descriptor_sets)(gpu.device.handle(), &info, &mut set)
    };
    match allocated {
        vk::Result::SUCCESS => {}
        vk::Result::ERROR_OUT_OF_POOL_MEMORY | vk::Result::ERROR_FRAGMENTED_POOL => {
            return Ok(None);
        }
        e => return Err(vk_error("vkAllocateDescriptorSets", e)),
    }
    write_descriptor_set(gpu, set, buffers);
    Ok(Some(set))
}

/// Points `set`'s storage bindings at `buffers`, in order. The set must be one no
/// pending or recording command buffer uses (a fresh one, or one whose last user's
/// submissions have all run): the caller keeps that, and `descriptor_set` calls it for a
/// set it just allocated.
pub(crate) fn write_descriptor_set(
    gpu: &Gpu,
    set: vk::DescriptorSet,
    buffers: &[(vk::Buffer, u64, u64)],
) {
    let mut infos = [vk::DescriptorBufferInfo::default(); MAX_BINDINGS];
    for (info, &(buffer, offset, range)) in infos.iter_mut().zip(buffers) {
        *info = vk::DescriptorBufferInfo {
            buffer,
            offset,
            range,
        };
    }
    let mut writes = [vk::WriteDescriptorSet::default(); MAX_BINDINGS];
    for (i, (write, info)) in writes
        .iter_mut()
        .zip(&infos)
        .take(buffers.len())
        .enumerate()
    {
        *write = vk::WriteDescriptorSet::default()
            .dst_set(set)
            .dst_binding(i as u32)
            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
            .buffer_info(std::slice::from_ref(info));
    }
    // SAFETY: no command buffer that may still execute uses the set (this function's
    // contract); the buffers are live pages; `writes` point into `infos`, alive here.
    unsafe {
        gpu.device
            .update_descriptor_sets(&writes[..buffers.len().min(MAX_BINDINGS)], &[])
    };
}
