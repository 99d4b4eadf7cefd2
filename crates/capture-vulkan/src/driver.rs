//! `VulkanBackend`: the core's backend traits over Vulkan compute. Eager launches go into
//! a stream's open primary command buffer; a capture records a simultaneous-use secondary
//! command buffer; a replay executes it from the stream's primary (K replays in one
//! submission) and submits at the next fence.

use std::borrow::Cow;
use std::sync::Arc;

use ash::vk;
use capture_core::backend::{
    Backend, Builtins, GraphDriver, Grid, KernelSignature, LaunchBuffer, LaunchLimits, StreamSetup,
};
use capture_core::{Builtin, MemoryKind, ServerError};

use crate::error::Unavailable;
use crate::executable::VulkanExecutable;
use crate::kernels::{self, VulkanKernel, VulkanKernelSource};
use crate::lane::{self, Lane};
use crate::raw::{self, Gpu, Open};
use crate::storage::{VulkanSlice, VulkanStorage};
use crate::stream::{VulkanFence, VulkanStream};

/// Where device pages live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryMode {
    /// Host-visible device memory: reads map the page after a wait.
    HostVisible,
    /// Pages are treated as device-only: never mapped, so every read goes through a
    /// staging copy (as on a discrete GPU).
    ForcedStaging,
}

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
}

impl VulkanOptions {
    /// No validation; the memory mode from `CAPTURE_VK_FORCE_STAGING=1`.
    pub fn from_env() -> Self {
        let forced = std::env::var("CAPTURE_VK_FORCE_STAGING").is_ok_and(|v| v == "1");
        Self {
            loader: None,
            validation: false,
            memory: if forced {
                MemoryMode::ForcedStaging
            } else {
                MemoryMode::HostVisible
            },
        }
    }
}

/// A Vulkan device. Cloning gives another handle on the same device.
#[derive(Clone)]
pub struct VulkanBackend {
    gpu: Arc<Gpu>,
    memory: MemoryMode,
    limits: LaunchLimits,
}

impl std::fmt::Debug for VulkanBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VulkanBackend")
            .field("device", &self.gpu.name)
            .field("memory", &self.memory)
            .finish()
    }
}

impl VulkanBackend {
    /// Opens the first Vulkan device with a compute queue, Vulkan ≥ 1.2 and timeline
    /// semaphores.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] saying why: no loader, no driver, no suitable device.
    pub fn new(options: VulkanOptions) -> Result<Self, Unavailable> {
        let gpu = Gpu::open(Open {
            validation: options.validation,
            loader: options.loader,
        })?;
        let limits = launch_limits(&gpu.limits)?;
        Ok(Self {
            gpu,
            memory: options.memory,
            limits,
        })
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

    /// Whether the validation layer is enabled.
    pub fn validation_enabled(&self) -> bool {
        self.gpu.validation
    }

    /// Where device pages live.
    pub fn memory_mode(&self) -> MemoryMode {
        self.memory
    }

    /// The validation layer's warnings and errors since the last call.
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
        let lane = Lane::new(Arc::clone(&self.gpu))?;
        let pool = lane.pool();
        let _batch = lane.batch();
        let secondary = raw::command_buffer(&self.gpu, pool, vk::CommandBufferLevel::SECONDARY)?;
        raw::begin_secondary(&self.gpu, secondary, false)?;
        raw::end(&self.gpu, secondary)?;
        let primary = raw::command_buffer(&self.gpu, pool, vk::CommandBufferLevel::PRIMARY)?;
        raw::begin_primary(&self.gpu, primary)?;
        raw::execute(&self.gpu, primary, secondary);
        raw::execute(&self.gpu, primary, secondary);
        raw::end(&self.gpu, primary)?;
        raw::free_command_buffer(&self.gpu, pool, primary);
        raw::free_command_buffer(&self.gpu, pool, secondary);
        Ok(self.take_validation_messages())
    }
}

/// What the device binds and runs, from its limits: storage-buffer offsets at multiples
/// of `minStorageBufferOffsetAlignment` (the specification caps it at 256, the core's
/// slice alignment), at most `maxStorageBufferRange` bytes a binding, at most
/// `maxComputeWorkGroupCount` workgroups per dimension.
fn launch_limits(limits: &vk::PhysicalDeviceLimits) -> Result<LaunchLimits, Unavailable> {
    LaunchLimits::new(
        limits.min_storage_buffer_offset_alignment.max(1),
        u64::from(limits.max_storage_buffer_range),
        limits.max_compute_work_group_count,
    )
    .map_err(|e| crate::error::unavailable(format!("the device's limits do not fit: {e}")))
}

fn slice_args(
    buffers: &[LaunchBuffer<VulkanSlice>],
    info: Option<&VulkanSlice>,
) -> Vec<(vk::Buffer, u64, u64)> {
    buffers
        .iter()
        .map(|b| &b.resource)
        .chain(info)
        .map(|s| (s.buffer, s.offset, s.len))
        .collect()
}

impl GraphDriver for VulkanBackend {
    type Stream = VulkanStream;
    type Executable = VulkanExecutable;

    fn begin(stream: &mut VulkanStream) -> Result<(), ServerError> {
        stream.lane.begin()
    }

    fn instantiate(
        stream: &mut VulkanStream,
        doomed: Option<ServerError>,
    ) -> Result<VulkanExecutable, ServerError> {
        // Closing the secondary is the driver capture's close: always first.
        let window = stream.lane.end()?;
        match (window, doomed) {
            (Some(window), None) => Ok(VulkanExecutable {
                lane: Arc::clone(&stream.lane),
                window: Some(window),
            }),
            (Some(window), Some(doomed)) => {
                // Never submitted: nothing pending uses it.
                stream.lane.free(window);
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
        let secondary = executable
            .secondary()
            .ok_or_else(|| ServerError::graph_state("replay", "the executable was freed"))?;
        stream.lane.replay(secondary, times)
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

    fn create_stream(&self, setup: &StreamSetup) -> Result<VulkanStream, ServerError> {
        let lane = Lane::new(Arc::clone(&self.gpu))?;
        let signal = lane::register(&lane);
        let visible =
            vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let gpu = || Arc::clone(&self.gpu);
        let device = match self.memory {
            MemoryMode::HostVisible => VulkanStorage::new(gpu(), MemoryKind::Device, visible, true),
            MemoryMode::ForcedStaging => VulkanStorage::new(
                gpu(),
                MemoryKind::Device,
                vk::MemoryPropertyFlags::DEVICE_LOCAL,
                false,
            ),
        };
        let host = VulkanStorage::new(gpu(), MemoryKind::Host, visible, true);
        Ok(VulkanStream {
            lane,
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
        kernels::load(&stream.lane.gpu, source)
    }

    fn launch(
        stream: &mut VulkanStream,
        kernel: &VulkanKernel,
        grid: Grid,
        buffers: &[LaunchBuffer<VulkanSlice>],
        info: Option<&VulkanSlice>,
    ) -> Result<(), ServerError> {
        let args = slice_args(buffers, info);
        stream.lane.dispatch(&kernel.objects, &args, grid)
    }

    fn write(
        stream: &mut VulkanStream,
        staging: &VulkanSlice,
        destination: &VulkanSlice,
        bytes: &[u8],
    ) -> Result<(), ServerError> {
        let at = staging.mapped.ok_or_else(|| {
            ServerError::graph_state("write", "host staging must be mapped memory")
        })?;
        raw::write_mapped(at, &bytes[..bytes.len().min(staging.len as usize)]);
        stream.lane.copy(
            (staging.buffer, staging.offset),
            (destination.buffer, destination.offset),
            bytes.len() as u64,
        )
    }

    fn read(
        stream: &mut VulkanStream,
        source: &VulkanSlice,
        out: &mut [u8],
    ) -> Result<(), ServerError> {
        stream.lane.finish()?;
        if let Some(at) = source.mapped {
            raw::read_mapped(at, out);
            return Ok(());
        }
        // A device-only page: copy it to a host-visible page first.
        let gpu = Arc::clone(&stream.lane.gpu);
        let visible =
            vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let page = raw::create_page(&gpu, out.len() as u64, visible, true)?;
        let result = stream
            .lane
            .copy(
                (source.buffer, source.offset),
                (page.buffer, 0),
                out.len() as u64,
            )
            .and_then(|()| stream.lane.finish());
        if result.is_ok()
            && let Some(at) = page.mapped
        {
            raw::read_mapped(at, out);
        }
        raw::destroy_page(&gpu, page);
        result
    }

    fn wait_for(stream: &mut VulkanStream, fence: &VulkanFence) -> Result<(), ServerError> {
        fence.order(&stream.lane)
    }

    fn sync(stream: &mut VulkanStream) -> Result<(), ServerError> {
        stream.lane.finish()
    }
}

impl Builtins for VulkanBackend {
    fn builtin(kernel: Builtin) -> VulkanKernelSource {
        VulkanKernelSource::builtin(kernel)
    }
}

#[cfg(test)]
mod canary {
    use super::*;

    /// The canary: misuse the validation layer must report, so a silent layer cannot
    /// pass for a clean run.
    #[test]
    fn executing_a_non_simultaneous_secondary_twice_is_reported() {
        let required = std::env::var("CAPTURE_REQUIRE_VULKAN").is_ok_and(|v| v == "1");
        let backend = match VulkanBackend::new(VulkanOptions {
            loader: None,
            validation: true,
            memory: MemoryMode::HostVisible,
        }) {
            Ok(b) => b,
            Err(e) if required => panic!("CAPTURE_REQUIRE_VULKAN=1 and {e}"),
            Err(e) => {
                println!("SKIP: canary: {e}");
                return;
            }
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
