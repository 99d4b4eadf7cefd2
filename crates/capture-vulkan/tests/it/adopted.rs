//! A device of the caller's handed to the backend (`VulkanBackend::from_external`): the
//! test makes its own instance and device with ash, as a runtime would (validation on,
//! timeline semaphores enabled), captures and replays a chain of builtins on them,
//! submits work of its own to the same queue under the shared queue lock while the
//! backend lives, and after the backend is gone still uses the device, then destroys it
//! itself. The caller's messenger must see nothing: the layer reports any object the
//! backend left alive when the caller destroys the device, and any use of a device the
//! backend destroyed. The checks `from_external` makes are refused as `Unavailable`. Loop
//! replays run by conditional rendering only where the caller says it enabled it, on
//! the indirect fallback elsewhere. The
//! whole scenario suite also runs over one device of the caller's (`external` in
//! `main.rs`).

use std::ffi::{CStr, c_void};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use capture_core::{Arg, Builtin, StreamId};
use capture_suite::scenarios::{Harness, N, map, ramp, splat, suite_lock};
use capture_vulkan::ash::{self, vk};
use capture_vulkan::{DEVICE_ENV, ExternalDevice, MemoryMode, VulkanBackend, VulkanOptions};

use crate::support;

const S: StreamId = StreamId::new(0);
const VALIDATION: &CStr = c"VK_LAYER_KHRONOS_validation";

/// What the caller's messenger collected.
#[derive(Default)]
struct Messages(Mutex<Vec<String>>);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The caller's debug callback: appends warnings and errors to its `Messages`.
///
/// # Safety
///
/// Called by the layer with a valid callback-data pointer and the `Messages` pointer the
/// messenger was created with, which outlives the messenger.
// SAFETY: the contract is the list above, which the layer keeps.
unsafe extern "system" fn collect(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _kind: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    if data.is_null() || user.is_null() {
        return vk::FALSE;
    }
    // SAFETY: the function's contract: both pointers are valid for the call.
    let (text, messages) = unsafe {
        let text = (*data)
            .message_as_c_str()
            .map(|m| m.to_string_lossy().into_owned())
            .unwrap_or_default();
        (text, &*(user as *const Messages))
    };
    lock(&messages.0).push(format!("{severity:?}: {text}"));
    vk::FALSE
}

/// What a runtime owns: a loader, an instance (with the validation layer and a messenger
/// of its own when the layer is installed), a device with one queue of a compute family.
struct Caller {
    entry: ash::Entry,
    instance: ash::Instance,
    api_version: u32,
    debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    messages: Arc<Messages>,
    physical: vk::PhysicalDevice,
    name: String,
    device: ash::Device,
    family: u32,
    /// How many queues the family offers (the device was made with one).
    family_queues: u32,
    queue: vk::Queue,
    /// Whether the device was made with conditional rendering enabled (what the backend
    /// is told in `ExternalDevice::conditional_rendering`).
    conditional: bool,
}

/// The physical device `CAPTURE_VULKAN_DEVICE` names (an index, or a piece of the name,
/// in any case), else the first one.
fn pick(names: &[String]) -> Option<usize> {
    match std::env::var(DEVICE_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty())
    {
        None => (!names.is_empty()).then_some(0),
        Some(v) => match v.trim().parse::<usize>() {
            Ok(i) => (i < names.len()).then_some(i),
            Err(_) => {
                let piece = v.trim().to_lowercase();
                names.iter().position(|n| n.to_lowercase().contains(&piece))
            }
        },
    }
}

impl Caller {
    /// Opens the caller's device: an instance for `api_version`, a device with one queue
    /// of the first compute family, and timeline semaphores enabled when `timeline`.
    /// `None` (after a `SKIP:` line) when Vulkan cannot be had and is not required.
    fn open(what: &str, api_version: u32, timeline: bool) -> Option<Caller> {
        Self::open_with(what, api_version, timeline, false)
    }

    /// As [`open`](Self::open), the device made with `VK_EXT_conditional_rendering`
    /// and its `conditionalRendering` feature enabled when `conditional` (what a loop
    /// replay runs on).
    fn open_with(
        what: &str,
        api_version: u32,
        timeline: bool,
        conditional: bool,
    ) -> Option<Caller> {
        match Self::try_open(api_version, timeline, conditional) {
            Ok(caller) => Some(caller),
            Err(why) if support::required() => panic!("CAPTURE_REQUIRE_VULKAN is set and {why}"),
            Err(why) => {
                println!("SKIP: {what}: {why}");
                None
            }
        }
    }

    fn try_open(api_version: u32, timeline: bool, conditional: bool) -> Result<Caller, String> {
        // SAFETY: loading the system loader runs its initialisers, which have no
        // preconditions.
        let entry = unsafe { ash::Entry::load() }.map_err(|e| format!("no Vulkan loader: {e}"))?;
        // SAFETY: `entry` holds a loaded loader; the query takes no pointers of ours.
        let layers = unsafe { entry.enumerate_instance_layer_properties() }.unwrap_or_default();
        let validation = layers
            .iter()
            .any(|l| l.layer_name_as_c_str().is_ok_and(|n| n == VALIDATION));
        if support::layer_required() {
            assert!(
                validation,
                "CAPTURE_REQUIRE_VULKAN=1 but the Khronos validation layer is not installed"
            );
        }
        let layer_names = if validation {
            vec![VALIDATION.as_ptr()]
        } else {
            Vec::new()
        };
        let extensions = if validation {
            vec![
                ash::ext::debug_utils::NAME.as_ptr(),
                ash::ext::validation_features::NAME.as_ptr(),
            ]
        } else {
            Vec::new()
        };
        let app = vk::ApplicationInfo::default()
            .application_name(c"a runtime")
            .api_version(api_version);
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
        // SAFETY: every pointer in `info` lives until the call returns.
        let instance = unsafe { entry.create_instance(&info, None) }
            .map_err(|e| format!("vkCreateInstance failed: {e}"))?;
        let messages = Arc::new(Messages::default());
        let debug = validation.then(|| {
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
                .pfn_user_callback(Some(collect))
                .user_data(Arc::as_ptr(&messages) as *mut c_void);
            // SAFETY: `messages` outlives the messenger (`destroy` destroys it first).
            let messenger = unsafe { utils.create_debug_utils_messenger(&info, None) }
                .expect("the debug messenger");
            (utils, messenger)
        });
        let fail = |instance: &ash::Instance, debug: &Option<_>, why: String| {
            // SAFETY: nothing but the messenger was made from the instance; it goes first.
            unsafe {
                if let Some((utils, m)) = debug {
                    ash::ext::debug_utils::Instance::destroy_debug_utils_messenger(utils, *m, None);
                }
                instance.destroy_instance(None);
            }
            why
        };
        // SAFETY: the instance is live; the returned handles are plain values.
        let physicals = unsafe { instance.enumerate_physical_devices() }.unwrap_or_default();
        let names: Vec<String> = physicals
            .iter()
            .map(|&p| {
                // SAFETY: `p` came from this instance.
                let props = unsafe { instance.get_physical_device_properties(p) };
                props
                    .device_name_as_c_str()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
            .collect();
        let Some(at) = pick(&names) else {
            let why = format!("no Vulkan device matches {DEVICE_ENV} among {names:?}");
            return Err(fail(&instance, &debug, why));
        };
        let physical = physicals[at];
        // SAFETY: `physical` came from this instance.
        let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
        let Some(family) = families
            .iter()
            .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
        else {
            let why = format!("{}: no compute queue", names[at]);
            return Err(fail(&instance, &debug, why));
        };
        let priorities = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family as u32)
            .queue_priorities(&priorities)];
        let mut v12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
        let mut rendering = vk::PhysicalDeviceConditionalRenderingFeaturesEXT::default()
            .conditional_rendering(true);
        let extensions = [ash::ext::conditional_rendering::NAME.as_ptr()];
        let mut info = vk::DeviceCreateInfo::default().queue_create_infos(&queues);
        if timeline {
            info = info.push_next(&mut v12);
        }
        if conditional {
            info = info
                .enabled_extension_names(&extensions)
                .push_next(&mut rendering);
        }
        // SAFETY: every pointer in `info` lives until the call returns.
        let device = match unsafe { instance.create_device(physical, &info, None) } {
            Ok(d) => d,
            Err(e) => return Err(fail(&instance, &debug, format!("vkCreateDevice: {e}"))),
        };
        // SAFETY: the device was made with one queue of `family`.
        let queue = unsafe { device.get_device_queue(family as u32, 0) };
        Ok(Caller {
            entry,
            instance,
            api_version,
            debug,
            messages,
            physical,
            name: names[at].clone(),
            device,
            family: family as u32,
            family_queues: families[family].queue_count,
            queue,
            conditional,
        })
    }

    /// The caller's objects, for the backend, with `queue_lock` (the caller's own lock,
    /// or `None` for the backend's).
    fn external(&self, queue_lock: Option<Arc<Mutex<vk::Queue>>>) -> ExternalDevice {
        ExternalDevice {
            entry: self.entry.clone(),
            instance: self.instance.clone(),
            instance_api_version: self.api_version,
            physical_device: self.physical,
            device: self.device.clone(),
            queue_family: self.family,
            queue_index: 0,
            queue_lock,
            conditional_rendering: self.conditional,
        }
    }

    /// Work of the caller's own on its device: a fresh host-visible buffer of 64 words
    /// filled with `word` by a command buffer of its own, submitted through `submit`
    /// (which hands `go` the queue under whatever lock the caller must hold), waited for
    /// on a fence; then everything it made is destroyed. Returns the words read back.
    fn own_work(&self, word: u32, submit: impl FnOnce(&dyn Fn(vk::Queue))) -> Vec<u32> {
        let d = &self.device;
        const LEN: u64 = 256;
        // SAFETY: every create-info lives across its call, the device is live, and every
        // object is used only by this function, which destroys it after the fence wait.
        let (buffer, memory, mapped, pool, cmd, fence) = unsafe {
            let buffer = d
                .create_buffer(
                    &vk::BufferCreateInfo::default()
                        .size(LEN)
                        .usage(vk::BufferUsageFlags::TRANSFER_DST)
                        .sharing_mode(vk::SharingMode::EXCLUSIVE),
                    None,
                )
                .expect("buffer");
            let needs = d.get_buffer_memory_requirements(buffer);
            let props = self
                .instance
                .get_physical_device_memory_properties(self.physical);
            let host =
                vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
            let kind = (0..props.memory_type_count)
                .find(|&i| {
                    needs.memory_type_bits & (1 << i) != 0
                        && props.memory_types[i as usize].property_flags.contains(host)
                })
                .expect("host-visible coherent memory");
            let memory = d
                .allocate_memory(
                    &vk::MemoryAllocateInfo::default()
                        .allocation_size(needs.size)
                        .memory_type_index(kind),
                    None,
                )
                .expect("memory");
            d.bind_buffer_memory(buffer, memory, 0).expect("bind");
            let mapped = d
                .map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
                .expect("map") as *const u32;
            let pool = d
                .create_command_pool(
                    &vk::CommandPoolCreateInfo::default().queue_family_index(self.family),
                    None,
                )
                .expect("command pool");
            let cmd = d
                .allocate_command_buffers(
                    &vk::CommandBufferAllocateInfo::default()
                        .command_pool(pool)
                        .level(vk::CommandBufferLevel::PRIMARY)
                        .command_buffer_count(1),
                )
                .expect("command buffer")[0];
            d.begin_command_buffer(
                cmd,
                &vk::CommandBufferBeginInfo::default()
                    .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
            )
            .expect("begin");
            d.cmd_fill_buffer(cmd, buffer, 0, LEN, word);
            let to_host = [vk::MemoryBarrier::default()
                .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
                .dst_access_mask(vk::AccessFlags::HOST_READ)];
            d.cmd_pipeline_barrier(
                cmd,
                vk::PipelineStageFlags::TRANSFER,
                vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &to_host,
                &[],
                &[],
            );
            d.end_command_buffer(cmd).expect("end");
            let fence = d
                .create_fence(&vk::FenceCreateInfo::default(), None)
                .expect("fence");
            (buffer, memory, mapped, pool, cmd, fence)
        };
        let buffers = [cmd];
        let go = |queue: vk::Queue| {
            let info = [vk::SubmitInfo::default().command_buffers(&buffers)];
            // SAFETY: `submit` calls this with the queue under the lock the caller must
            // hold; the command buffer is executable and `info` lives across the call.
            unsafe { d.queue_submit(queue, &info, fence) }.expect("vkQueueSubmit");
        };
        submit(&go);
        // SAFETY: the fence was submitted above; after the wait nothing uses the objects,
        // the mapping covers 64 words the device wrote and the barrier made visible.
        unsafe {
            d.wait_for_fences(&[fence], true, u64::MAX).expect("fence");
            let words = std::slice::from_raw_parts(mapped, (LEN / 4) as usize).to_vec();
            d.destroy_fence(fence, None);
            d.destroy_command_pool(pool, None);
            d.destroy_buffer(buffer, None);
            d.free_memory(memory, None);
            words
        }
    }

    /// Destroys the device, the messenger and the instance (in that order: the layer
    /// reports objects left alive on the device as it goes), then unloads the loader, and
    /// returns what the messenger collected.
    fn destroy(self) -> Vec<String> {
        // SAFETY: the backend is gone and nothing of the caller's is pending (every
        // `own_work` waited for its fence); the messenger goes before its instance.
        unsafe {
            self.device.device_wait_idle().expect("idle");
            self.device.destroy_device(None);
            if let Some((utils, m)) = &self.debug {
                utils.destroy_debug_utils_messenger(*m, None);
            }
            self.instance.destroy_instance(None);
        }
        drop(self.entry);
        std::mem::take(&mut *lock(&self.messages.0))
    }
}

/// The backend over the caller's device, with the caller's `queue_lock` (or its own).
fn adopt(caller: &Caller, queue_lock: Option<Arc<Mutex<vk::Queue>>>) -> VulkanBackend {
    // SAFETY: the caller's instance (created for `caller.api_version`) and device (with
    // timeline semaphores and one queue of the family) outlive the backend: each test
    // drops the backend and everything over it before `Caller::destroy`; the caller
    // submits to the queue only under the queue lock while the backend lives.
    unsafe { VulkanBackend::from_external(caller.external(queue_lock), options()) }
        .expect("the backend runs on the caller's device")
}

/// One device of the caller's for the whole scenario suite (`external` in `main.rs`),
/// made on first use and kept for the process's life, as a runtime's would be.
static SHARED: OnceLock<Result<Caller, String>> = OnceLock::new();

fn shared() -> &'static Result<Caller, String> {
    SHARED.get_or_init(|| Caller::try_open(vk::API_VERSION_1_2, true, false))
}

/// A backend over the suite's shared device of the caller's, or why there is none.
pub(crate) fn shared_backend() -> Result<VulkanBackend, String> {
    match shared() {
        Ok(caller) => Ok(adopt(caller, None)),
        Err(why) if support::required() => panic!("CAPTURE_REQUIRE_VULKAN is set and {why}"),
        Err(why) => Err(why.clone()),
    }
}

/// Panics if the caller's messenger heard anything during the scenario.
pub(crate) fn assert_shared_quiet(_: &VulkanBackend) {
    if let Ok(caller) = shared() {
        assert_quiet(&std::mem::take(&mut *lock(&caller.messages.0)));
    }
}

/// The options a device handed over takes: the defaults, with the indirect loop
/// fallback where the environment forces it (`CAPTURE_VULKAN_INDIRECT_LOOPS=1`).
fn options() -> VulkanOptions {
    VulkanOptions {
        memory: MemoryMode::Auto,
        indirect_loops: VulkanOptions::from_env().indirect_loops,
        ..VulkanOptions::default()
    }
}

fn assert_quiet(messages: &[String]) {
    assert!(
        messages.is_empty(),
        "the caller's validation layer reported {} message(s):\n{}",
        messages.len(),
        messages.join("\n")
    );
}

#[test]
fn a_device_handed_over_captures_and_replays_and_stays_the_callers() {
    let _suite = suite_lock();
    let Some(caller) = Caller::open("adopted", vk::API_VERSION_1_2, true) else {
        return;
    };
    let backend = adopt(&caller, None);
    assert_eq!(backend.device_name(), caller.name);
    let h = Harness::new(backend.clone()).expect("device");
    // The chain: y = x + 1, z = 2y, w += z, recorded once, replayed three times.
    let x = h.buffer(S, &ramp(0.0)).expect("x");
    let y = h.dev.alloc(S, N * 4).expect("y");
    let z = h.dev.alloc(S, N * 4).expect("z");
    let w = h.buffer(S, &splat(0.0)).expect("w");
    let info = |k: Builtin, a| k.info(N, a);
    let chain = |d: &capture_core::Device<_>| {
        d.launch(
            S,
            h.kernel(Builtin::AddScalar),
            [1, 1, 1],
            &[Arg::read(&x), Arg::write(&y)],
            &info(Builtin::AddScalar, 1.0),
        )?;
        d.launch(
            S,
            h.kernel(Builtin::MulScalar),
            [1, 1, 1],
            &[Arg::read(&y), Arg::write(&z)],
            &info(Builtin::MulScalar, 2.0),
        )?;
        d.launch(
            S,
            h.kernel(Builtin::Axpy),
            [1, 1, 1],
            &[Arg::read(&z), Arg::read_write(&w)],
            &info(Builtin::Axpy, 1.0),
        )
    };
    let g = h.dev.capture(S, |d| chain(d)).expect("graph");
    h.dev.replay(S, &g, 1).expect("replay");
    // The caller's own work on the same queue, under the backend's queue lock, between
    // replays still queued.
    let words = caller.own_work(0xA5A5_A5A5, |go| backend.with_queue(go));
    assert!(words.iter().all(|&v| v == 0xA5A5_A5A5), "{words:x?}");
    h.dev.replay(S, &g, 2).expect("replay");
    // Warmup wrote w = z once, three replays added z three times: w = 4z = 8(x + 1).
    h.expect(S, &w, &map(&ramp(0.0), |v| 8.0 * (v + 1.0)));
    h.expect(S, &z, &map(&ramp(0.0), |v| 2.0 * (v + 1.0)));
    h.dev.drop_graph(g).expect("drop");
    drop((x, y, z, w));
    drop(h);
    assert!(!backend.validation_enabled());
    assert!(backend.take_validation_messages().is_empty());
    drop(backend);
    // The device, its queue and its loader are still the caller's.
    let words = caller.own_work(0x0102_0304, |go| go(caller.queue));
    assert!(words.iter().all(|&v| v == 0x0102_0304), "{words:x?}");
    assert_quiet(&caller.destroy());
}

#[test]
fn the_caller_submits_under_its_own_lock_while_the_backend_works() {
    let _suite = suite_lock();
    let Some(caller) = Caller::open("adopted", vk::API_VERSION_1_3, true) else {
        return;
    };
    let queue_lock = Arc::new(Mutex::new(caller.queue));
    let backend = adopt(&caller, Some(Arc::clone(&queue_lock)));
    let h = Harness::new(backend.clone()).expect("device");
    let x = h.buffer(S, &ramp(0.0)).expect("x");
    let y = h.buffer(S, &splat(0.0)).expect("y");
    let g = h
        .dev
        .capture(S, |d| {
            d.launch(
                S,
                h.kernel(Builtin::Axpy),
                [1, 1, 1],
                &[Arg::read(&x), Arg::read_write(&y)],
                &Builtin::Axpy.info(N, 1.0),
            )
        })
        .expect("graph");
    const ROUNDS: u32 = 16;
    std::thread::scope(|s| {
        // The caller's thread: its own submissions, under its own lock, or (every other
        // round) under the same lock taken through the backend.
        s.spawn(|| {
            for round in 0..ROUNDS {
                let word = 0x1000 + round;
                let words = if round % 2 == 0 {
                    caller.own_work(word, |go| go(*lock(&queue_lock)))
                } else {
                    caller.own_work(word, |go| backend.with_queue(go))
                };
                assert!(
                    words.iter().all(|&v| v == word),
                    "round {round}: {words:x?}"
                );
            }
        });
        // The backend's: eager launches and replays, each call submitting.
        for _ in 0..ROUNDS {
            h.add(S, &x, &x, 0.0).expect("launch");
            h.dev.replay(S, &g, 1).expect("replay");
            h.dev.sync(S).expect("sync");
        }
    });
    // Warmup added x once, the replays ROUNDS times.
    h.expect(S, &y, &map(&ramp(0.0), |v| v * (1.0 + ROUNDS as f32)));
    h.dev.drop_graph(g).expect("drop");
    drop((x, y));
    drop(h);
    drop(backend);
    let words = caller.own_work(7, |go| go(*lock(&queue_lock)));
    assert!(words.iter().all(|&v| v == 7), "{words:x?}");
    assert_quiet(&caller.destroy());
}

/// The refusal `from_external` gives `external` with `options`, which must be a typed
/// `Unavailable`.
fn refusal(external: ExternalDevice, options: VulkanOptions) -> String {
    // SAFETY: the handles are the caller's live ones (only the checked fields are
    // wrong), and a refused call creates nothing.
    match unsafe { VulkanBackend::from_external(external, options) } {
        Ok(b) => panic!("{} was handed over", b.device_name()),
        Err(e) => {
            assert_eq!(e.backend(), "Vulkan");
            e.why().to_owned()
        }
    }
}

#[test]
fn an_instance_made_for_vulkan_1_0_is_refused() {
    let _suite = suite_lock();
    let Some(caller) = Caller::open("adopted", vk::API_VERSION_1_0, false) else {
        return;
    };
    let why = refusal(caller.external(None), options());
    assert_eq!(
        why,
        "the instance was created for Vulkan 1.0, 1.2 is needed"
    );
    assert_quiet(&caller.destroy());
}

#[test]
fn a_queue_or_options_the_backend_cannot_use_are_refused() {
    let _suite = suite_lock();
    let Some(caller) = Caller::open("adopted", vk::API_VERSION_1_2, true) else {
        return;
    };
    let name = caller.name.clone();
    let family = caller.family;
    let cases: Vec<(&str, ExternalDevice, VulkanOptions, String)> = vec![
        (
            "a family past the last",
            ExternalDevice {
                queue_family: 64,
                ..caller.external(None)
            },
            options(),
            format!("{name}: there is no queue family 64 (the device has "),
        ),
        (
            "a queue past the family's",
            ExternalDevice {
                queue_index: caller.family_queues,
                ..caller.external(None)
            },
            options(),
            format!(
                "{name}: queue family {family} has {} queue(s), so no queue {}",
                caller.family_queues, caller.family_queues
            ),
        ),
        (
            "a lock holding another queue",
            caller.external(Some(Arc::new(Mutex::new(vk::Queue::null())))),
            options(),
            format!("{name}: the queue lock holds another queue than queue 0 of family {family}"),
        ),
        (
            "validation asked for",
            caller.external(None),
            VulkanOptions {
                validation: true,
                ..options()
            },
            "VulkanOptions::validation says what VulkanBackend::new opens".into(),
        ),
        (
            "a zero cadence",
            caller.external(None),
            VulkanOptions {
                submit_every: 0,
                ..options()
            },
            "VulkanOptions::submit_every must be at least 1".into(),
        ),
    ];
    for (case, external, options, expected) in cases {
        let why = refusal(external, options);
        assert!(why.starts_with(&expected), "{case}: {why}");
    }
    // Nothing was made, and the device is as the caller left it.
    let words = caller.own_work(9, |go| go(caller.queue));
    assert!(words.iter().all(|&v| v == 9), "{words:x?}");
    assert_quiet(&caller.destroy());
}

/// A device handed over runs loop replays (rule 30) by conditional rendering only where
/// the caller says it enabled it, and on the indirect fallback without its word (or
/// where `VulkanOptions::indirect_loops` forces it): either way a loop stops after the
/// flag's iteration. The caller's messenger hears nothing either way.
#[test]
fn a_device_handed_over_loops_by_conditional_rendering_only_where_the_caller_enabled_it() {
    use capture_core::{Device, DeviceConfig};
    use capture_vulkan::LoopEmulation;

    let _suite = suite_lock();
    for (conditional, asked) in [(false, false), (true, false), (true, true)] {
        // Forced here, or for the whole run (`CAPTURE_VULKAN_INDIRECT_LOOPS=1`).
        let forced = asked || options().indirect_loops;
        let Some(caller) =
            Caller::open_with("adopted: loops", vk::API_VERSION_1_2, true, conditional)
        else {
            return;
        };
        // SAFETY: the caller's objects are valid and outlive the backend (dropped first).
        let backend = unsafe {
            VulkanBackend::from_external(
                caller.external(None),
                VulkanOptions {
                    indirect_loops: forced,
                    ..options()
                },
            )
        }
        .expect("adopted");
        match backend.loop_emulation() {
            LoopEmulation::ConditionalRendering => assert!(conditional && !forced),
            LoopEmulation::IndirectDispatch(why) => {
                assert!(!conditional || forced);
                // Without the caller's word, that is the reason, forced or not.
                let named = if conditional {
                    "indirect_loops"
                } else {
                    "ExternalDevice::conditional_rendering"
                };
                assert!(why.contains(named), "{why}");
            }
        }
        {
            let dev = Device::new(backend.clone(), DeviceConfig::new()).expect("device");
            let count = crate::loops::count(&dev);
            let (x, done) = (
                crate::loops::filled(&dev, &[0]),
                crate::loops::filled(&dev, &[0]),
            );
            let step = |d: &Device<VulkanBackend>, flag: Arg| {
                d.launch(
                    S,
                    &count,
                    [1, 1, 1],
                    &[Arg::read_write(&x), flag, Arg::scalar(5u32)],
                    &[],
                )
            };
            let graph = dev
                .capture(S, |d| step(d, Arg::write(&done).stop_flag()))
                .expect("a loop's graph"); // warmup: x = 1
            let counter = dev.replay_until(S, &graph, 100).expect("loop");
            assert_eq!(crate::loops::word(&dev, &counter), 4);
            assert_eq!(crate::loops::word(&dev, &x), 5);
            // A plain replay after the loop runs whole.
            dev.replay(S, &graph, 2).expect("replay");
            assert_eq!(crate::loops::word(&dev, &x), 7);
            dev.sync(S).expect("sync");
        }
        drop(backend);
        assert_quiet(&caller.destroy());
    }
}
