//! capture-vulkan: Vulkan compute through ash (loaded at run time, nothing linked),
//! replayed through reusable secondary command buffers.
//!
//! Design choices:
//! - **Vulkan ≥ 1.2 with timeline semaphores**, or a typed [`Unavailable`] error saying
//!   why. One compute queue, shared by every pooled stream behind the queue lock. The
//!   device: the best-ranked one (discrete GPU, integrated, virtual, CPU), or the one
//!   [`VulkanOptions::device`] (`CAPTURE_VULKAN_DEVICE`) names.
//! - **Pages are `VkDeviceMemory` with one `VkBuffer` each**. The device's
//!   `maxStorageBufferRange`, offset alignment and workgroup counts are declared to the
//!   core as its launch limits; the core refuses a launch outside them. Where pages and
//!   staging live is a [`MemoryChoice`] made from the device's memory properties:
//!   mapped device-local pages on unified memory or resizable BAR, else device-local
//!   pages with staging; [`MemoryMode::ForcedStaging`] treats device pages as
//!   device-only, so every read goes through a staging copy.
//! - **Eager work** goes into the stream's primary command buffer, submitted every
//!   [`VulkanOptions::submit_every`] commands; a fence first submits the open batch, then
//!   names its timeline value. **A capture** records a
//!   simultaneous-use secondary command buffer, each launch binding its pipeline and a
//!   descriptor set from pools the graph owns; **a replay** executes it from the primary,
//!   K replays in one submission, made at once. Barriers sit at every boundary.
//! - **Loop replays** (rule 30, `Device::replay_until`): Vulkan has no device-side loop,
//!   so the graph is recorded `max` times in one submission and the iterations after the
//!   one that set the stop flag are discarded by conditional rendering
//!   (`VK_EXT_conditional_rendering`, enabled where the device offers its
//!   `conditionalRendering` feature): every capture window's secondaries run predicated
//!   on a word of the window's own, which a small setter kernel clears once the flag is
//!   set. Conditional rendering predicates dispatches only, so a recorded copy or the
//!   user's own work is refused in a window that names a stop flag. A device without
//!   the feature (or one handed over without
//!   [`ExternalDevice::conditional_rendering`], or opened with
//!   [`VulkanOptions::indirect_loops`], `CAPTURE_VULKAN_INDIRECT_LOOPS=1`) takes the
//!   fallback instead ([`LoopEmulation`]): every dispatch a window records is an
//!   indirect dispatch reading its group counts from a slot of the window's own, which
//!   small kernels zero after the flag's iteration and restore when the loop ends (copies
//!   and the user's work are refused there too). An iteration
//!   after the flag's is still recorded and walked: on lavapipe it costs about as much
//!   as a plain replay of the graph, up to as much as an iteration that runs for a small
//!   step (the crate's README has the figures).
//! - **Kernels** are SPIR-V compute pipelines: the builtins are WGSL turned into SPIR-V
//!   by naga on first use (cached); users bring their own SPIR-V with a binding layout,
//!   checked by naga's SPIR-V front end before any driver sees it.
//! - **Validation as a judge**: tests enable the Khronos validation layer with
//!   synchronisation validation whenever it is installed and assert it said nothing.
//! - **A device of the caller's** ([`VulkanBackend::from_external`], an `unsafe fn`
//!   whose `# Safety` list says what the caller guarantees): a runtime that already owns
//!   an instance, a device and a compute queue hands them over in an [`ExternalDevice`];
//!   what can be checked (Vulkan 1.2, timeline-semaphore support, a compute family, the
//!   queue index) is refused as [`Unavailable`]. The backend destroys only what it made
//!   and shares the queue lock with the caller ([`VulkanBackend::with_queue`], or the
//!   caller's own lock handed over). The crate re-exports the [`ash`] it is built on.
//! - Unsafe code lives in `raw.rs` only, each block with a `// SAFETY:` line.
//!
//! This crate has no features.

mod adopt;
mod counts;
mod device;
mod driver;
mod error;
mod executable;
mod fault;
mod import;
mod kernels;
mod lane_order;
mod loops;
mod memory;
mod options;
mod predicates;
mod raw;
mod read_staging;
mod sets;
mod storage;
mod stream;
mod submitter;
mod work;

pub use ash;
pub use device::DeviceSelector;
#[doc(hidden)]
pub use driver::ValidationLog;
pub use driver::VulkanBackend;
pub use error::{Unavailable, VulkanError, VulkanMessage};
pub use executable::VulkanExecutable;
#[doc(hidden)]
pub use fault::VulkanCall;
pub use import::VulkanExternal;
pub use kernels::{VulkanKernel, VulkanKernelSource, builtin_wgsl, compile_wgsl};
pub use loops::LoopEmulation;
pub use memory::{MemoryChoice, MemoryMode, PagePlacement};
pub use options::{
    DEFAULT_SETS_PER_POOL, DEFAULT_SUBMIT_EVERY, DEVICE_ENV, ExternalDevice, INDIRECT_LOOPS_ENV,
    VulkanOptions,
};
pub use storage::{VulkanSlice, VulkanStorage};
pub use stream::{VulkanFence, VulkanStream};
pub use work::{VulkanRange, VulkanWork, VulkanWorkCall};
