//! `VulkanWork`: the user's own work inside the rules on Vulkan: commands of its own
//! (`vkCmdFillBuffer`, `vkCmdCopyBuffer`, a dispatch of its own pipeline) recorded into
//! the command buffer the backend is recording (a primary outside a window, the graph's
//! secondary inside one), with the backend's barriers before and after, over the
//! declared ranges. The core treats it as a launch over those ranges
//! (`Device::foreign_work`).
//!
//! What the commands touch cannot be checked, so making one is `unsafe`: its
//! `# Safety` list is the contract.

use std::any::Any;
use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use ash::vk;
use capture_core::Access;

/// One declared range, as the user's work sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VulkanRange {
    /// The buffer holding it.
    pub buffer: vk::Buffer,
    /// Where the range starts in it, in bytes.
    pub offset: u64,
    /// Its length in bytes.
    pub size: u64,
    /// What the work may do to it.
    pub access: Access,
}

/// What the user's work is called with: the device, the command buffer being recorded,
/// and the declared ranges in argument order.
pub struct VulkanWorkCall<'a> {
    pub(crate) device: &'a ash::Device,
    pub(crate) cmd: vk::CommandBuffer,
    pub(crate) ranges: &'a [VulkanRange],
    kept: RefCell<&'a mut Vec<Kept>>,
}

impl<'a> VulkanWorkCall<'a> {
    /// The logical device, to record commands with (`device.cmd_fill_buffer(...)`).
    pub fn device(&self) -> &'a ash::Device {
        self.device
    }

    /// The command buffer being recorded: a primary outside a window, the graph's
    /// secondary inside one (recorded once, executed on every replay).
    pub fn command_buffer(&self) -> vk::CommandBuffer {
        self.cmd
    }

    /// The declared ranges, in argument order.
    pub fn ranges(&self) -> &'a [VulkanRange] {
        self.ranges
    }

    /// Hands `object` over for as long as what this call records may run: objects made
    /// for this recording alone, such as a descriptor set written with this call's
    /// [`ranges`](Self::ranges) and the pool it came from (wrapped in a type whose `Drop`
    /// destroys them). Outside a window it is dropped once the submission holding this
    /// command buffer has run; inside one it goes with the graph, dropped behind the
    /// fence of the graph's last replay, when its executable is. Objects every recording
    /// shares (a pipeline and its layout) go to [`VulkanWork::keep`] once instead.
    ///
    /// The work runs once per eager use and twice in a capture (the warmup, then the
    /// recording), so it makes and hands over a set each time; each goes with the command
    /// buffer that call recorded into.
    pub fn keep(&self, object: Arc<dyn Any + Send + Sync>) {
        self.kept.borrow_mut().push(object);
    }
}

impl fmt::Debug for VulkanWorkCall<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VulkanWorkCall")
            .field("cmd", &self.cmd)
            .field("ranges", &self.ranges)
            .field("kept", &self.kept.borrow().len())
            .finish()
    }
}

/// An object the user's work handed over for as long as what it recorded may run.
pub(crate) type Kept = Arc<dyn Any + Send + Sync>;

type Body = dyn Fn(&VulkanWorkCall<'_>) -> Result<(), String> + Send + Sync;

/// The user's own work on Vulkan (`Device::foreign_work`'s work): a named closure that
/// records commands, and the objects they reference (pipelines, layouts, descriptor
/// sets), which the device (and each graph that records it) keeps until its last run's
/// fence.
#[derive(Clone)]
pub struct VulkanWork {
    name: Cow<'static, str>,
    body: Arc<Body>,
    keep: Vec<Arc<dyn Any + Send + Sync>>,
}

impl VulkanWork {
    /// Work named `name` (in traces and errors) running `body`, which records commands
    /// into `call.command_buffer()` over `call.ranges()`. An `Err` fails the work:
    /// outside a window its outputs are claimed with it, inside one it dooms the window.
    ///
    /// # Safety
    ///
    /// Each time `body` runs, the caller guarantees that what it records:
    /// - touches only the declared ranges (`call.ranges()`), each only as its `access`
    ///   allows, in compute-shader or transfer stages (the backend's barriers cover
    ///   those);
    /// - goes only into `call.command_buffer()`: no submit, no wait, no host access to
    ///   device memory, no render pass, and nothing a secondary command buffer may not
    ///   hold (inside a window the buffer is a secondary); no conditional rendering of
    ///   its own (inside a window, on a device with conditional rendering, the buffer
    ///   records inside the backend's, which predicates the work's dispatches on a word
    ///   that is 1 but in a loop replay, where no work is recorded);
    /// - leaves the buffer as it found it for the backend: binds no descriptor sets or
    ///   pipelines the backend relies on (the backend binds its own before each of its
    ///   dispatches);
    /// - references only objects that live as long as the work: the caller's for the
    ///   device's life, handed to [`keep`](Self::keep), or (made for one recording)
    ///   handed to [`VulkanWorkCall::keep`] by the call that records them.
    // SAFETY: the contract is the list above; building the value does nothing unsafe,
    // the backend calls `body` only as `Device::foreign_work` documents.
    pub unsafe fn new(
        name: impl Into<Cow<'static, str>>,
        body: impl Fn(&VulkanWorkCall<'_>) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.into(),
            body: Arc::new(body),
            keep: Vec::new(),
        }
    }

    /// The same work, also keeping `object` (a pipeline and its layout, a descriptor
    /// set's pool) alive for as long as the device or a graph may still run the work.
    pub fn keep(mut self, object: Arc<dyn Any + Send + Sync>) -> Self {
        self.keep.push(object);
        self
    }

    /// Its name.
    pub fn name(&self) -> Cow<'static, str> {
        self.name.clone()
    }

    pub(crate) fn call(
        &self,
        device: &ash::Device,
        cmd: vk::CommandBuffer,
        ranges: &[VulkanRange],
        kept: &mut Vec<Kept>,
    ) -> Result<(), String> {
        (self.body)(&VulkanWorkCall {
            device,
            cmd,
            ranges,
            kept: RefCell::new(kept),
        })
    }
}

impl fmt::Debug for VulkanWork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VulkanWork({}, keeps {})", self.name, self.keep.len())
    }
}
