//! `VulkanBackend`: the core's backend traits over Vulkan compute. Eager launches go into
//! a stream's open primary command buffer; a capture records a simultaneous-use secondary
//! command buffer; a replay executes it from the stream's primary (K replays in one
//! submission, made at the end of the call).

use std::borrow::Cow;
use std::sync::Arc;

use ash::vk;
use capture_core::backend::Lane;
use capture_core::backend::{
    Backend, Builtins, DeviceStream, Dims, GraphDriver, KernelSignature, LaunchBuffer,
    LaunchLimits, LaunchParam, Param, StreamSetup,
};
use capture_core::{ArgValue, Builtin, GraphUpdates, MemoryKind, ProgrammaticLaunch, ServerError};

use crate::error::Unavailable;
use crate::executable::VulkanExecutable;
use crate::fault::VulkanCall;
use crate::kernels::{self, VulkanKernel, VulkanKernelSource};
use crate::memory::{self, MemoryChoice, MemoryMode};
use crate::options::{VulkanOptions, check_options};
use crate::raw::{self, Gpu, Open};
use crate::read_staging::ReadStaging;
use crate::storage::{VulkanSlice, VulkanStorage};
use crate::stream::{VulkanFence, VulkanStream};
use crate::submitter::{self, Submitter, SubmitterConfig};
use crate::work::{VulkanRange, VulkanWork};

/// A device's validation messages, held apart from the device (test hook).
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct ValidationLog(pub(crate) Arc<raw::Messages>);

impl ValidationLog {
    /// The messages collected so far, taken.
    pub fn take(&self) -> Vec<String> {
        self.0.take()
    }
}

/// A Vulkan device. Cloning gives another handle on the same device.
#[derive(Clone)]
pub struct VulkanBackend {
    gpu: Arc<Gpu>,
    memory: MemoryMode,
    choice: MemoryChoice,
    submitters: SubmitterConfig,
    limits: LaunchLimits,
}

impl std::fmt::Debug for VulkanBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VulkanBackend")
            .field("device", &self.gpu.name)
            .field("memory", &self.memory)
            .field("choice", &self.choice)
            .finish()
    }
}

impl VulkanBackend {
    /// Opens the best-ranked Vulkan device (discrete GPU, integrated GPU, virtual GPU,
    /// CPU), or the one `options.device` names, with a compute queue, Vulkan ≥ 1.2 and
    /// timeline semaphores.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] saying why: no loader, no driver, no suitable device, no device
    /// the selector names (listing the devices seen), a zero `submit_every` or
    /// `sets_per_pool`.
    pub fn new(options: VulkanOptions) -> Result<Self, Unavailable> {
        check_options(&options)?;
        let gpu = Gpu::open(Open {
            validation: options.validation,
            loader: options.loader.clone(),
            max_allocations: options.max_allocations,
            device: options.device.clone(),
            conditional_rendering: !options.indirect_loops,
        })?;
        Self::over(gpu, &options)
    }

    /// The backend over an opened or handed-over `gpu`, as `options` ask.
    pub(crate) fn over(gpu: Arc<Gpu>, options: &VulkanOptions) -> Result<Self, Unavailable> {
        // Loop replays (rule 30): conditional rendering where the device has it, the
        // indirect fallback elsewhere.
        let limits = launch_limits(&gpu.limits)?.with_loops(crate::loops::device_loops(&gpu));
        let choice = memory::choose(&gpu.memory, options.memory)
            .map_err(|why| crate::error::unavailable(format!("{}: {why}", gpu.name)))?;
        Ok(Self {
            gpu,
            memory: options.memory,
            choice,
            submitters: SubmitterConfig {
                submit_every: options.submit_every,
                sets_per_pool: options.sets_per_pool,
                // Mapped and coherent: device pages where the host maps them, else the
                // upload staging memory.
                predicates: if choice.pages.map {
                    choice.pages
                } else {
                    choice.upload
                },
            },
            limits,
        })
    }

    /// Runs `f` with the backend's queue while holding the queue lock, under which the
    /// backend makes every submission and queue wait: how a caller that handed its
    /// device over ([`VulkanBackend::from_external`]) submits work of its own to the same
    /// queue. The lock is the innermost of the backend's locks: `f` must not call into
    /// this backend or a `Device` over it (a call that submits would wait for the lock
    /// `f` holds). A panic in `f` leaves the lock usable.
    pub fn with_queue<R>(&self, f: impl FnOnce(vk::Queue) -> R) -> R {
        self.gpu.with_queue(f)
    }

    /// The family of the backend's queue ([`VulkanBackend::with_queue`]): the one a
    /// command pool for the caller's own submissions to that queue is created for.
    pub fn queue_family(&self) -> u32 {
        self.gpu.family
    }

    /// How this device's loop replays (rule 30) discard the iterations after the flag's:
    /// conditional rendering where the device offers it, else (or where
    /// [`VulkanOptions::indirect_loops`] forces it) indirect dispatches whose group counts
    /// a kernel zeroes.
    pub fn loop_emulation(&self) -> crate::LoopEmulation {
        crate::loops::emulation(&self.gpu)
    }

    /// The logical device, for the caller's own objects on it: buffers to import
    /// ([`VulkanExternal`](crate::VulkanExternal)), pipelines its own work records
    /// ([`VulkanWork`](crate::VulkanWork)). Destroying the backend's objects through it,
    /// or the device itself, is the caller's undefined behaviour.
    pub fn ash_device(&self) -> &ash::Device {
        &self.gpu.device
    }

    /// The physical device's memory types and heaps, to pick memory for a buffer of the
    /// caller's own.
    pub fn memory_properties(&self) -> vk::PhysicalDeviceMemoryProperties {
        self.gpu.memory
    }

    /// The device's name.
    pub fn device_name(&self) -> &str {
        &self.gpu.name
    }

    /// The device's Vulkan version: major, minor, patch.
    pub fn api_version(&self) -> (u32, u32, u32) {
        let v = self.gpu.api_version;
        (
            vk::api_version_major(v),
            vk::api_version_minor(v),
            vk::api_version_patch(v),
        )
    }

    /// Whether this backend enabled the validation layer (never for a device handed
    /// over by [`VulkanBackend::from_external`], whose instance is the caller's).
    pub fn validation_enabled(&self) -> bool {
        self.gpu.validation
    }

    /// The device's kind: "discrete GPU", "integrated GPU", "virtual GPU", "CPU" or
    /// "other".
    pub fn device_kind(&self) -> &'static str {
        crate::device::kind_name(self.gpu.kind)
    }

    /// The memory mode asked for.
    pub fn memory_mode(&self) -> MemoryMode {
        self.memory
    }

    /// The memory the mode chose on this device: where pages live, and the staging
    /// memory types (its `Display` says it in words).
    pub fn memory_choice(&self) -> MemoryChoice {
        self.choice
    }

    /// Test hook: the call of kind `call` after `skip` more successful ones returns
    /// `code` instead of reaching the driver (`vkEndCommandBuffer`: after reaching it).
    #[doc(hidden)]
    pub fn fail_call(&self, call: VulkanCall, skip: u32, code: vk::Result) {
        self.gpu.faults.arm(call, skip, code);
    }

    /// Test hook: the validation messages of this device, readable after the device is
    /// gone (the layer reports objects left alive when the device is destroyed).
    #[doc(hidden)]
    pub fn validation_log(&self) -> ValidationLog {
        ValidationLog(Arc::clone(&self.gpu.messages))
    }

    /// Test hook: successful `vkQueueSubmit` calls on this device so far.
    #[doc(hidden)]
    pub fn submissions(&self) -> u64 {
        self.gpu
            .submissions
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Test hook: command buffers allocated on this device and not yet freed.
    #[doc(hidden)]
    pub fn live_command_buffers(&self) -> u64 {
        self.gpu
            .command_buffers
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Test hook: descriptor pools created on this device so far.
    #[doc(hidden)]
    pub fn descriptor_pools_created(&self) -> u64 {
        self.gpu
            .descriptor_pools
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The validation layer's warnings and errors since the last call (none for a
    /// device handed over: the caller's own messenger hears them).
    pub fn take_validation_messages(&self) -> Vec<String> {
        self.gpu.take_messages()
    }

    /// Records a secondary command buffer *without* simultaneous use and executes it into
    /// one primary twice (two `vkCmdExecuteCommands`): invalid usage the validation layer
    /// must report (VUID-vkCmdExecuteCommands-pCommandBuffers-00092), a canary that the
    /// layer is really watching. Returns what it reported.
    ///
    /// # Errors
    ///
    /// A failed Vulkan call.
    #[cfg(test)]
    pub(crate) fn canary_execute_twice(&self) -> Result<Vec<String>, ServerError> {
        let submitter = Submitter::new(Arc::clone(&self.gpu), self.submitters)?;
        let pool = submitter.pool();
        let _batch = submitter.batch();
        let secondary = raw::command_buffer(&self.gpu, pool, vk::CommandBufferLevel::SECONDARY)?;
        raw::begin_secondary(&self.gpu, secondary, false, None)?;
        raw::end(&self.gpu, secondary)?;
        let primary = raw::command_buffer(&self.gpu, pool, vk::CommandBufferLevel::PRIMARY)?;
        raw::begin_primary(&self.gpu, primary)?;
        raw::execute(&self.gpu, primary, &[secondary]);
        raw::execute(&self.gpu, primary, &[secondary]);
        raw::end(&self.gpu, primary)?;
        raw::free_command_buffer(&self.gpu, pool, primary);
        raw::free_command_buffer(&self.gpu, pool, secondary);
        Ok(self.take_validation_messages())
    }
}

/// What the device binds and runs, from its limits: storage-buffer offsets at multiples
/// of `minStorageBufferOffsetAlignment` (the specification caps it at 256, the core's
/// slice alignment), at most `maxStorageBufferRange` bytes a binding, at most
/// `maxComputeWorkGroupCount` workgroups per dimension, blocks (workgroups) of at most
/// `maxComputeWorkGroupSize` and `maxComputeWorkGroupInvocations` threads (a shader fixes
/// its own: a launch's block must match it), no dynamic shared memory (a shader declares
/// its workgroup memory), scalars in at most `maxPushConstantsSize` bytes of push
/// constants, `maxPerStageDescriptorStorageBuffers` buffers less one for the info
/// words, and no programmatic dependent launch (Vulkan has no such dispatch: a barrier
/// sits between every two dispatches of a stream).
fn launch_limits(limits: &vk::PhysicalDeviceLimits) -> Result<LaunchLimits, Unavailable> {
    let buffers = (limits.max_per_stage_descriptor_storage_buffers as usize)
        .saturating_sub(1)
        .min(raw::MAX_BINDINGS - 1);
    Ok(LaunchLimits::new(
        limits.min_storage_buffer_offset_alignment.max(1),
        u64::from(limits.max_storage_buffer_range),
        limits.max_compute_work_group_count,
    )
    .map_err(|e| crate::error::unavailable(format!("the device's limits do not fit: {e}")))?
    .with_block(
        limits.max_compute_work_group_size,
        limits.max_compute_work_group_invocations,
    )
    .with_shared(0)
    .with_params(
        limits
            .max_push_constants_size
            .min(raw::MAX_PUSH_BYTES as u32),
        0,
        buffers,
    )
    .with_programmatic(ProgrammaticLaunch::Unsupported(
        "Vulkan runs no programmatic dependent launch (CUDA on compute capability 9.0 or \
         later does)",
    ))
    .with_graph_updates(GraphUpdates::Supported))
}

/// A launch's bindings, on the stack: its buffers' slices, then its info words' slice;
/// and its scalars, laid out as push constants.
struct Bindings {
    slices: [(vk::Buffer, u64, u64); raw::MAX_BINDINGS],
    len: usize,
    push: [u8; raw::MAX_PUSH_BYTES],
    push_len: usize,
}

impl Bindings {
    fn as_slice(&self) -> &[(vk::Buffer, u64, u64)] {
        &self.slices[..self.len]
    }

    fn push(&self) -> &[u8] {
        &self.push[..self.push_len]
    }
}

fn slice_args(
    params: &[LaunchParam<VulkanSlice>],
    info: Option<&VulkanSlice>,
) -> Result<Bindings, ServerError> {
    let mut bindings = Bindings {
        slices: [(vk::Buffer::null(), 0, 0); raw::MAX_BINDINGS],
        len: 0,
        push: [0; raw::MAX_PUSH_BYTES],
        push_len: 0,
    };
    let buffers = params.iter().filter_map(LaunchParam::buffer);
    for s in buffers.map(|b| &b.resource).chain(info) {
        let slot = bindings.slices.get_mut(bindings.len).ok_or_else(|| {
            ServerError::invalid(
                "kernel bindings",
                params.len(),
                format!("a launch binds at most {} buffers", raw::MAX_BINDINGS - 1),
            )
        })?;
        *slot = (s.buffer, s.offset, s.len);
        bindings.len += 1;
    }
    let mut end = 0u32;
    for p in params {
        if let LaunchParam::Scalar(v) = p {
            let at = Param::scalar_offset(end, v.len() as u16) as usize;
            let bytes = v.bytes();
            let slot = bindings.push.get_mut(at..at + bytes.len()).ok_or_else(|| {
                ServerError::invalid(
                    "scalars",
                    ArgValue::Bytes((at + bytes.len()) as u64),
                    format!(
                        "a launch passes at most {} bytes of push constants",
                        raw::MAX_PUSH_BYTES
                    ),
                )
            })?;
            slot.copy_from_slice(bytes);
            end = (at + bytes.len()) as u32;
        }
    }
    bindings.push_len = (end as usize).div_ceil(4) * 4;
    Ok(bindings)
}

/// Copies `bytes` into the mapped `staging` slice and records the copy of exactly those
/// bytes to `destination`; a slice shorter than `bytes` is refused before anything is
/// written or recorded.
fn write_staged(
    submitter: &Submitter,
    staging: &VulkanSlice,
    destination: &VulkanSlice,
    bytes: &[u8],
) -> Result<(), ServerError> {
    let at = staging
        .mapped
        .ok_or_else(|| ServerError::graph_state("write", "host staging must be mapped memory"))?;
    let len = bytes.len() as u64;
    for (what, slice) in [("host staging", staging), ("destination", destination)] {
        if slice.len < len {
            return Err(ServerError::invalid(
                "write",
                ArgValue::Bytes(len),
                format!("the {what} slice holds {} bytes", slice.len),
            ));
        }
    }
    raw::write_mapped(at, bytes);
    submitter.copy(
        (staging.buffer, staging.offset),
        (destination.buffer, destination.offset),
        len,
    )
}

/// Tells the stream's window which lane the operation being recorded is on (rule 28:
/// the core's `lane` argument).
fn enter_lane(stream: &mut VulkanStream, lane: Lane) {
    if stream.capturing().is_recording() {
        stream.submitter.enter_lane(lane);
    }
}

impl GraphDriver for VulkanBackend {
    type Stream = VulkanStream;
    type Executable = VulkanExecutable;

    fn begin(stream: &mut VulkanStream) -> Result<(), ServerError> {
        stream.submitter.begin()
    }

    fn instantiate(
        stream: &mut VulkanStream,
        doomed: Option<ServerError>,
    ) -> Result<VulkanExecutable, ServerError> {
        // Closing the secondary is the driver capture's close: always first.
        let window = stream.submitter.end()?;
        match (window, doomed) {
            (Some(window), None) => Ok(VulkanExecutable {
                submitter: Arc::clone(&stream.submitter),
                window: Some(window),
            }),
            (Some(window), Some(doomed)) => {
                // Never submitted: nothing pending uses it.
                stream.submitter.free(window);
                Err(doomed)
            }
            (None, doomed) => Err(doomed.unwrap_or_else(|| {
                ServerError::graph_state("instantiate", "no secondary command buffer was recording")
            })),
        }
    }

    fn upload(
        _stream: &mut VulkanStream,
        _executable: &VulkanExecutable,
    ) -> Result<(), ServerError> {
        Ok(())
    }

    fn replay(
        stream: &mut VulkanStream,
        executable: &VulkanExecutable,
        times: u32,
    ) -> Result<(), ServerError> {
        let secondaries = executable
            .secondaries()
            .ok_or_else(|| ServerError::graph_state("replay", "the executable was freed"))?;
        stream.submitter.replay(secondaries, times)
    }

    /// The emulation `loops.rs` describes: the graph recorded `max` times, the
    /// iterations after the flag's discarded by conditional rendering, or on the
    /// indirect fallback emptied by zeroed group counts.
    fn replay_loop(
        stream: &mut VulkanStream,
        executable: &VulkanExecutable,
        max: u32,
        flag: &VulkanSlice,
        counter: &VulkanSlice,
    ) -> Result<(), ServerError> {
        let window = executable
            .window
            .as_ref()
            .ok_or_else(|| ServerError::graph_state("replay", "the executable was freed"))?;
        stream.submitter.replay_loop(window, max, flag, counter)
    }

    fn allocation_breaks_capture() -> bool {
        false
    }

    fn thread_affine() -> bool {
        false
    }
}

impl Backend for VulkanBackend {
    type KernelSource = VulkanKernelSource;
    type Kernel = VulkanKernel;
    type Work = VulkanWork;

    fn create_stream(&self, setup: &StreamSetup) -> Result<VulkanStream, ServerError> {
        let submitter = Submitter::new(Arc::clone(&self.gpu), self.submitters)?;
        let signal = submitter::register(&submitter);
        let gpu = || Arc::clone(&self.gpu);
        let device = VulkanStorage::new(gpu(), MemoryKind::Device, self.choice.pages);
        let host = VulkanStorage::new(gpu(), MemoryKind::Host, self.choice.upload);
        Ok(VulkanStream {
            readback: self.choice.readback,
            read_staging: ReadStaging::default(),
            submitter,
            signal,
            state: setup.state(device, host),
        })
    }

    fn kernel_name(source: &VulkanKernelSource) -> Cow<'static, str> {
        source.name().clone()
    }

    fn signature(source: &VulkanKernelSource) -> KernelSignature {
        source.signature()
    }

    fn launch_limits(&self) -> LaunchLimits {
        self.limits
    }

    fn load(
        stream: &mut VulkanStream,
        source: &VulkanKernelSource,
    ) -> Result<VulkanKernel, ServerError> {
        kernels::load(&stream.submitter.gpu, source)
    }

    fn launch(
        stream: &mut VulkanStream,
        lane: Lane,
        kernel: &VulkanKernel,
        dims: &Dims,
        params: &[LaunchParam<VulkanSlice>],
        info: Option<&VulkanSlice>,
    ) -> Result<(), ServerError> {
        let args = slice_args(params, info)?;
        enter_lane(stream, lane);
        stream.submitter.dispatch(
            &kernel.objects,
            args.as_slice(),
            args.push(),
            dims.grid_shape(),
        )
    }

    /// Recorded in a secondary of its own, so an update can record it again.
    fn launch_updatable(
        stream: &mut VulkanStream,
        lane: Lane,
        kernel: &VulkanKernel,
        dims: &Dims,
        params: &[LaunchParam<VulkanSlice>],
        info: Option<&VulkanSlice>,
    ) -> Result<(), ServerError> {
        let args = slice_args(params, info)?;
        enter_lane(stream, lane);
        stream.submitter.dispatch_updatable(
            &kernel.objects,
            args.as_slice(),
            args.push(),
            dims.grid_shape(),
        )
    }

    /// A new secondary for the launch, with a descriptor set for its buffers from the
    /// graph's own pools: push constants, descriptors and dispatch sizes are fixed once
    /// recorded, so nothing a pending replay uses is rewritten.
    fn update_launch(
        stream: &mut VulkanStream,
        executable: &mut VulkanExecutable,
        node: u64,
        kernel: &VulkanKernel,
        dims: &Dims,
        params: &[LaunchParam<VulkanSlice>],
        info: Option<&VulkanSlice>,
    ) -> Result<(), ServerError> {
        let args = slice_args(params, info)?;
        let window = executable
            .window
            .as_mut()
            .ok_or_else(|| ServerError::graph_state("update", "the executable was freed"))?;
        stream.submitter.update(
            window,
            node,
            &kernel.objects,
            args.as_slice(),
            args.push(),
            dims.grid_shape(),
        )
    }

    fn work_name(work: &VulkanWork) -> Cow<'static, str> {
        work.name()
    }

    fn run_work(
        stream: &mut VulkanStream,
        lane: Lane,
        work: &VulkanWork,
        buffers: &[LaunchBuffer<VulkanSlice>],
    ) -> Result<(), ServerError> {
        let mut ranges = [VulkanRange {
            buffer: vk::Buffer::null(),
            offset: 0,
            size: 0,
            access: capture_core::Access::Read,
        }; raw::MAX_BINDINGS];
        for (r, b) in ranges.iter_mut().zip(buffers) {
            *r = VulkanRange {
                buffer: b.resource.buffer,
                offset: b.resource.offset,
                size: b.resource.len,
                access: b.access,
            };
        }
        enter_lane(stream, lane);
        stream
            .submitter
            .work(work, &ranges[..buffers.len().min(raw::MAX_BINDINGS)])
    }

    fn write(
        stream: &mut VulkanStream,
        lane: Lane,
        staging: &VulkanSlice,
        destination: &VulkanSlice,
        bytes: &[u8],
    ) -> Result<(), ServerError> {
        enter_lane(stream, lane);
        write_staged(&stream.submitter, staging, destination, bytes)
    }

    fn read(
        stream: &mut VulkanStream,
        source: &VulkanSlice,
        out: &mut [u8],
    ) -> Result<(), ServerError> {
        stream.submitter.finish()?;
        if let Some(at) = source.mapped {
            raw::read_mapped(at, out);
            return Ok(());
        }
        // A device-only page: copy it to the stream's read-back page first.
        let gpu = Arc::clone(&stream.submitter.gpu);
        let readback = stream.readback;
        let len = out.len() as u64;
        let staged = stream.read_staging.page_for(&gpu, len, &readback)?;
        let page = staged.page();
        let result = stream
            .submitter
            .copy((source.buffer, source.offset), (page.buffer, 0), len)
            .and_then(|()| stream.submitter.finish())
            .and_then(|()| {
                if readback.needs_invalidate() {
                    raw::invalidate(&gpu, page)?;
                }
                if let Some(at) = page.mapped {
                    raw::read_mapped(at, out);
                }
                Ok(())
            });
        staged.done(&gpu);
        result
    }

    /// The window's secondary orders its lanes itself: barriers only where a lane
    /// follows what was recorded since the last one.
    fn fork_lane(stream: &mut VulkanStream, from: Lane, to: Lane) -> Result<(), ServerError> {
        stream.submitter.fork_lane(from, to);
        Ok(())
    }

    fn join_lane(stream: &mut VulkanStream, from: Lane, into: Lane) -> Result<(), ServerError> {
        stream.submitter.join_lane(from, into);
        Ok(())
    }

    fn wait_for(stream: &mut VulkanStream, fence: &VulkanFence) -> Result<(), ServerError> {
        fence.order(&stream.submitter)
    }

    fn sync(stream: &mut VulkanStream) -> Result<(), ServerError> {
        stream.submitter.finish()
    }
}

impl Builtins for VulkanBackend {
    fn builtin(kernel: Builtin) -> VulkanKernelSource {
        VulkanKernelSource::builtin(kernel)
    }
}

/// A validating backend for this file's tests and whether Vulkan is required; `None`
/// (after a `SKIP:` line naming `what`) when none opens and none is required.
#[cfg(test)]
fn test_backend(what: &str) -> Option<(VulkanBackend, bool)> {
    let device = std::env::var("CAPTURE_REQUIRE_VULKAN").is_ok_and(|v| v == "1" || v == "device");
    let layer = std::env::var("CAPTURE_REQUIRE_VULKAN").is_ok_and(|v| v == "1");
    match VulkanBackend::new(VulkanOptions {
        validation: true,
        ..VulkanOptions::from_env()
    }) {
        Ok(b) => Some((b, layer)),
        Err(e) if device => panic!("CAPTURE_REQUIRE_VULKAN is set and {e}"),
        Err(e) => {
            println!("SKIP: {what}: {e}");
            None
        }
    }
}

#[cfg(test)]
mod canary {

    /// The canary: misuse the validation layer must report, so a silent layer cannot
    /// pass for a clean run.
    #[test]
    fn executing_a_non_simultaneous_secondary_twice_is_reported() {
        let Some((backend, required)) = super::test_backend("canary") else {
            return;
        };
        if !backend.validation_enabled() {
            assert!(
                !required,
                "CAPTURE_REQUIRE_VULKAN=1 but the validation layer is not enabled"
            );
            println!("SKIP: canary: the validation layer is not installed");
            return;
        }
        let messages = backend.canary_execute_twice().expect("the canary records");
        assert!(
            messages
                .iter()
                .any(|m| m.contains("VUID-vkCmdExecuteCommands-pCommandBuffers-00092")),
            "the layer did not report the canary:\n{}",
            messages.join("\n")
        );
    }
}

#[cfg(test)]
mod lane_barriers {
    use super::*;

    /// A window that forked puts a barrier where a lane follows what was recorded since
    /// the last one, and only there (rule 28): two branches' copies share an interval, a
    /// lane's second copy and the copy after the join get one each. The replay gives
    /// the bytes the chain of copies carries.
    #[test]
    fn a_forked_window_barriers_only_where_a_lane_follows() {
        let Some((backend, _)) = super::test_backend("submitter barriers") else {
            return;
        };
        let gpu = &backend.gpu;
        let submitter = Submitter::new(Arc::clone(gpu), backend.submitters).expect("submitter");
        let page = || raw::create_page(gpu, 256, &backend.choice.upload).expect("page");
        let [a, b, c, d, e, f] = [page(), page(), page(), page(), page(), page()];
        let at = |p: &raw::Page| p.mapped.expect("host-visible");
        raw::write_mapped(at(&a), &[5u8; 256]);
        raw::write_mapped(at(&c), &[9u8; 256]);
        let lanes = [0, 1].map(|i| Lane::nth(i).expect("a lane"));
        submitter.begin().expect("window");
        submitter.fork_lane(lanes[0], lanes[1]);
        submitter.enter_lane(lanes[1]);
        submitter
            .copy((a.buffer, 0), (b.buffer, 0), 256)
            .expect("copy");
        submitter.enter_lane(lanes[0]);
        submitter
            .copy((c.buffer, 0), (d.buffer, 0), 256)
            .expect("copy");
        assert_eq!(
            submitter.lane_barriers(),
            Some(0),
            "siblings share an interval"
        );
        submitter.enter_lane(lanes[1]);
        submitter
            .copy((b.buffer, 0), (e.buffer, 0), 256)
            .expect("copy");
        assert_eq!(
            submitter.lane_barriers(),
            Some(1),
            "a submitter follows its own copy"
        );
        submitter.join_lane(lanes[1], lanes[0]);
        submitter.enter_lane(lanes[0]);
        submitter
            .copy((e.buffer, 0), (f.buffer, 0), 256)
            .expect("copy");
        assert_eq!(
            submitter.lane_barriers(),
            Some(2),
            "the join orders what follows"
        );
        let window = submitter.end().expect("end").expect("a window");
        submitter.replay(window.secondaries(), 1).expect("replay");
        submitter.finish().expect("ran");
        let mut out = [0u8; 256];
        raw::read_mapped(at(&f), &mut out);
        assert_eq!(out, [5u8; 256], "the branch's chain reached the join");
        raw::read_mapped(at(&d), &mut out);
        assert_eq!(out, [9u8; 256]);
        submitter.free(window);
        drop(submitter);
        let messages = backend.take_validation_messages();
        assert!(messages.is_empty(), "{}", messages.join("\n"));
    }
}

#[cfg(test)]
mod staged_write {
    use super::*;

    /// A write longer than its staging slice: today's core never asks for one, so the
    /// backend is driven directly. The device must copy exactly the bytes staged, so the
    /// write is refused before anything is staged or recorded.
    #[test]
    fn a_write_longer_than_its_staging_slice_is_refused_and_nothing_is_recorded() {
        let Some((backend, _)) = super::test_backend("staged write") else {
            return;
        };
        let gpu = &backend.gpu;
        let submitter = Submitter::new(Arc::clone(gpu), backend.submitters).expect("submitter");
        let staging = raw::create_page(gpu, 256, &backend.choice.upload).expect("staging");
        let target = raw::create_page(gpu, 1024, &backend.choice.pages).expect("target");
        let slice = |page: &raw::Page, len| VulkanSlice {
            buffer: page.buffer,
            offset: 0,
            len,
            mapped: page.mapped,
        };
        let bytes = vec![7u8; 512];
        let before = backend.submissions();
        let err = write_staged(
            &submitter,
            &slice(&staging, 256),
            &slice(&target, 1024),
            &bytes,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("512 bytes: the host staging slice holds 256 bytes"),
            "{err}"
        );
        let err = write_staged(
            &submitter,
            &slice(&staging, 256),
            &slice(&target, 128),
            &bytes[..256],
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("256 bytes: the destination slice holds 128 bytes"),
            "{err}"
        );
        submitter.finish().expect("nothing to submit");
        assert_eq!(
            backend.submissions(),
            before,
            "a refused write recorded work"
        );
        // A write that fits copies exactly its bytes.
        write_staged(
            &submitter,
            &slice(&staging, 256),
            &slice(&target, 1024),
            &bytes[..200],
        )
        .expect("fits");
        submitter.finish().expect("copied");
        drop(submitter);
        raw::destroy_page(gpu, staging);
        raw::destroy_page(gpu, target);
        let messages = backend.take_validation_messages();
        assert!(messages.is_empty(), "{}", messages.join("\n"));
    }
}

#[cfg(test)]
mod wait_only {
    use super::*;

    /// A submitter told to wait for another submitter's timeline, with no work enqueued after the
    /// wait (what `begin` leaves behind: the core then counts the stream as following
    /// the other one, and a host read on it waits for its own fence only). The fence
    /// taken next must be behind the wait. The other submitter is signalled from the host, so
    /// nothing here depends on timing: before the host signals it, the fence is not
    /// reached, and after the fence's wait returns, the other submitter's value is.
    #[test]
    fn a_fence_after_a_wait_with_no_work_is_behind_the_wait() {
        let Some((backend, _)) = super::test_backend("wait-only fence") else {
            return;
        };
        let gpu = &backend.gpu;
        let submitter = Submitter::new(Arc::clone(gpu), backend.submitters).expect("submitter");
        let other = Submitter::new(Arc::clone(gpu), backend.submitters).expect("other submitter");
        submitter.wait_for(&other, 1);
        let before = backend.submissions();
        let value = submitter.flush().expect("flush");
        assert!(
            value > submitter.reached().expect("reached"),
            "the fence after the wait names timeline value {value}, which the submitter has \
             already reached: the wait was never submitted, so nothing orders the fence \
             after the other submitter"
        );
        assert_eq!(
            backend.submissions(),
            before + 1,
            "the wait went out on its own"
        );
        other.signal_from_host(1).expect("signal");
        submitter.wait(value).expect("the wait is satisfied");
        assert!(other.reached().expect("reached") >= 1);
        assert_eq!(
            submitter.flush().expect("flush"),
            value,
            "a wait is submitted once"
        );
        drop((submitter, other));
        // The layer's own bookkeeping may time out while the host holds the batches back
        // on a loaded machine ("most likely a validation bug", it says): not a misuse.
        let messages: Vec<String> = backend
            .take_validation_messages()
            .into_iter()
            .filter(|m| !m.contains("UNASSIGNED-VkSemaphore-state-timeout"))
            .collect();
        assert!(messages.is_empty(), "{}", messages.join("\n"));
    }
}

#[cfg(test)]
mod in_flight_bound {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::submitter::MAX_IN_FLIGHT;

    /// A device that falls behind holds the host back instead of letting pending batches
    /// pile up: with [`MAX_IN_FLIGHT`] batches pending (each waiting for another submitter's
    /// timeline, which only the host moves), the next submission returns only once the
    /// oldest has run. Nothing depends on timing: the flag is set before the host
    /// signals, and the oldest batch cannot run before that signal.
    #[test]
    fn a_submission_past_the_bound_waits_for_the_oldest_batch() {
        let Some((backend, _)) = super::test_backend("in-flight bound") else {
            return;
        };
        let gpu = &backend.gpu;
        let submitter = Submitter::new(Arc::clone(gpu), backend.submitters).expect("submitter");
        let other = Submitter::new(Arc::clone(gpu), backend.submitters).expect("other submitter");
        for k in 1..=MAX_IN_FLIGHT as u64 {
            submitter.wait_for(&other, k);
            submitter.flush().expect("a pending batch");
        }
        assert_eq!(
            submitter.pending(),
            MAX_IN_FLIGHT,
            "every batch is still pending"
        );
        let signalled = Arc::new(AtomicBool::new(false));
        let host = {
            let (other, signalled) = (Arc::clone(&other), Arc::clone(&signalled));
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(200));
                signalled.store(true, Ordering::SeqCst);
                other.signal_from_host(1).expect("signal");
            })
        };
        submitter.wait_for(&other, MAX_IN_FLIGHT as u64 + 1);
        submitter.flush().expect("the batch past the bound");
        // Read before anything else can move the timeline; asserted once the lanes are
        // released, so a failure does not leave them waiting forever.
        let held_back = signalled.load(Ordering::SeqCst);
        let pending = submitter.pending();
        host.join().expect("the host thread");
        other
            .signal_from_host(MAX_IN_FLIGHT as u64 + 1)
            .expect("signal");
        submitter.finish().expect("everything ran");
        assert!(
            held_back,
            "a batch past the bound went out while the oldest of {MAX_IN_FLIGHT} was still \
             pending: nothing holds the host back"
        );
        assert!(pending <= MAX_IN_FLIGHT, "{pending} pending");
        drop((submitter, other));
        let messages = backend.take_validation_messages();
        assert!(messages.is_empty(), "{}", messages.join("\n"));
    }
}
