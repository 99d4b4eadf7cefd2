//! Loop replays (rule 30) on Vulkan, which has no device-side loop: the emulation the
//! design documents. On a device with conditional rendering (`VK_EXT_conditional_rendering`)
//! every capture window's secondaries run inside conditional rendering on a `go` word of
//! the window's own (`predicates.rs`: 1, so a plain replay runs everything). A loop
//! replay records the graph `max` times into the stream's open primary, with the loop
//! setter (a kernel of the backend's own) after each iteration, and submits it as one
//! replay call does:
//!
//! ```text
//! barrier; setter (init): flag = 0, counter = 0, go = 1; barrier
//! max × { execute the graph's secondaries (each inside conditional rendering on go)
//!         barrier
//!         conditional rendering on go { setter (step): counter += 1, go = (flag == 0) }
//!         barrier }
//! setter (reset): go = 1; barrier
//! ```
//!
//! Once an iteration leaves the flag set, `go` is 0, and every dispatch of the iterations
//! recorded after it (the secondaries' and the setter's) is discarded: each iteration is
//! the whole graph or nothing, and the counter holds the iterations that ran. `go`
//! changes only in the setter, the last dispatch of its block and outside the
//! secondaries' blocks, so no implementation's way of latching the predicate changes
//! what a block runs; each barrier carries the setter's write to the next block's
//! predicate read (and orders the predicate reads before the setter's next write).
//!
//! Conditional rendering predicates dispatches only: a copy, a fill or anything else the
//! user's own work records would run in every recorded iteration, the ones after the
//! flag's too, so the device declares both refused in a loop body (the core refuses them
//! in a window that names a stop flag). What else a graph's secondaries hold runs in
//! every iteration and touches no memory: pipeline barriers, pipeline and descriptor
//! binds, push constants.
//!
//! The iterations execute secondaries, and conditional rendering begun in a primary
//! reaches a secondary only with the `inheritedConditionalRendering` feature, which
//! lavapipe lacks: so each secondary begins and ends its own block on its window's word
//! instead, which needs the `conditionalRendering` feature alone. A device runs loops
//! only with that feature enabled; a device handed over only where the caller says it
//! enabled it
//! ([`ExternalDevice::conditional_rendering`](crate::ExternalDevice::conditional_rendering)).
//! Elsewhere it declares loops unsupported rather than faking them.
//!
//! What an iteration after the flag's costs: it is recorded, so the host pays for
//! recording it and the device for walking its commands with every dispatch discarded
//! (the crate's README has the figures on lavapipe).

use std::sync::Arc;

use ash::vk;
use capture_core::{DeviceLoops, KernelSignature, Param, ServerError};

use crate::kernels::{self, VulkanKernel, VulkanKernelSource};
use crate::predicates::{self, Word};
use crate::raw::{self, Conditional, Gpu, KernelObjects};
use crate::storage::VulkanSlice;

/// Why a recorded copy may not be in a loop body on Vulkan.
const COPY_IN_BODY: &str = "a Vulkan loop replay discards the iterations after the flag's by \
     conditional rendering, which predicates dispatches only: a recorded copy would run in \
     every iteration, those after the flag's too";

/// Why the user's own work may not be in a loop body on Vulkan.
const WORK_IN_BODY: &str = "a Vulkan loop replay discards the iterations after the flag's by \
     conditional rendering, which predicates dispatches only: the user's own work may record \
     copies, fills or other commands that would run in every iteration, those after the \
     flag's too";

/// Whether `gpu` runs loop replays, and what a loop body may not hold there.
pub(crate) fn device_loops(gpu: &Gpu) -> DeviceLoops {
    match &gpu.conditional {
        Conditional::Enabled(_) => DeviceLoops::Supported {
            copies: Some(COPY_IN_BODY),
            work: Some(WORK_IN_BODY),
        },
        Conditional::Missing(why) => DeviceLoops::Unsupported(why),
    }
}

/// The loop setter, over the flag, the counter and the page of `go` words, `go` the
/// word at `p.word`: mode 0 starts a loop (`flag = 0`, `counter = 0`, `go = 1`), mode 1
/// ends an iteration (`counter += 1`, `go = flag == 0`), mode 2 ends the loop
/// (`go = 1`). One invocation.
const SETTER: &str = "
struct Params { mode: u32, word: u32 }
var<immediate> p: Params;
@group(0) @binding(0) var<storage, read_write> flag: array<u32>;
@group(0) @binding(1) var<storage, read_write> counter: array<u32>;
@group(0) @binding(2) var<storage, read_write> go: array<u32>;
@compute @workgroup_size(1)
fn main() {
    if (p.mode == 0u) {
        flag[0] = 0u;
        counter[0] = 0u;
        go[p.word] = 1u;
    } else if (p.mode == 1u) {
        counter[0] = counter[0] + 1u;
        go[p.word] = select(0u, 1u, flag[0] == 0u);
    } else {
        go[p.word] = 1u;
    }
}
";

/// The setter's parameters: the flag, the counter, the `go` page; its mode and word.
const SETTER_SIGNATURE: KernelSignature = KernelSignature::of(&[
    Param::READ_WRITE,
    Param::READ_WRITE,
    Param::READ_WRITE,
    Param::scalar::<u32>(),
    Param::scalar::<u32>(),
]);

/// The setter's mode that starts a loop.
const INIT: u32 = 0;
/// The setter's mode that ends an iteration.
const STEP: u32 = 1;
/// The setter's mode that ends a loop.
const RESET: u32 = 2;

/// What a stream's loop replays share, made at its first: the setter's pipeline.
pub(crate) struct LoopKit {
    setter: VulkanKernel,
}

impl LoopKit {
    /// The setter loaded.
    pub(crate) fn new(gpu: &Arc<Gpu>) -> Result<Self, ServerError> {
        let source = VulkanKernelSource::internal("capture_loop_setter", SETTER, SETTER_SIGNATURE);
        Ok(Self {
            setter: kernels::load(gpu, &source)?,
        })
    }

    /// The setter's pipeline objects.
    pub(crate) fn setter(&self) -> &KernelObjects {
        &self.setter.objects
    }

    /// What the setter's set binds for a loop over `flag` and `counter` whose `go` word
    /// is `go`.
    pub(crate) fn bindings(
        flag: &VulkanSlice,
        counter: &VulkanSlice,
        go: Word,
    ) -> [(vk::Buffer, u64, u64); 3] {
        [
            (flag.buffer, flag.offset, flag.len),
            (counter.buffer, counter.offset, counter.len),
            (go.buffer, 0, predicates::PAGE_BYTES),
        ]
    }
}

/// Records a loop replay of `secondaries` (recorded inside conditional rendering on
/// `go`) into the primary `cmd`, up to `max` iterations (see the module's header), the
/// setter's descriptor set `set` binding the flag, the counter and `go`'s page. The
/// device has conditional rendering (the caller declared loops only where it does).
pub(crate) fn record(
    gpu: &Gpu,
    cmd: vk::CommandBuffer,
    kit: &LoopKit,
    set: vk::DescriptorSet,
    secondaries: &[vk::CommandBuffer],
    go: Word,
    max: u32,
) {
    let setter = kit.setter();
    let push = |mode: u32| {
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&mode.to_le_bytes());
        bytes[4..].copy_from_slice(&go.index.to_le_bytes());
        bytes
    };
    let (init, step, reset) = (push(INIT), push(STEP), push(RESET));
    raw::loop_barrier(gpu, cmd);
    raw::dispatch(gpu, cmd, setter, true, set, &init, [1, 1, 1]);
    raw::loop_barrier(gpu, cmd);
    for _ in 0..max {
        raw::execute(gpu, cmd, secondaries);
        raw::loop_barrier(gpu, cmd);
        raw::begin_conditional(gpu, cmd, go.at());
        // What the primary had bound is undefined after executing secondaries.
        raw::dispatch(gpu, cmd, setter, true, set, &step, [1, 1, 1]);
        raw::end_conditional(gpu, cmd);
        raw::loop_barrier(gpu, cmd);
    }
    raw::dispatch(gpu, cmd, setter, true, set, &reset, [1, 1, 1]);
    raw::loop_barrier(gpu, cmd);
}
