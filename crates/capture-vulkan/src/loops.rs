//! Loop replays (rule 30) on Vulkan, which has no device-side loop: the emulation the
//! design documents, on one of two paths chosen when the device is opened
//! ([`LoopEmulation`]). On a device with conditional rendering (`VK_EXT_conditional_rendering`)
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
//! instead, which needs the `conditionalRendering` feature alone. A device takes this
//! path only with that feature enabled; a device handed over only where the caller says
//! it enabled it
//! ([`ExternalDevice::conditional_rendering`](crate::ExternalDevice::conditional_rendering)).
//! Elsewhere loops take the indirect fallback below.
//!
//! **The indirect fallback.** On a device without conditional rendering (or one whose
//! options force the fallback, [`VulkanOptions::indirect_loops`](crate::VulkanOptions)),
//! every dispatch a capture window records is `vkCmdDispatchIndirect`, reading its group
//! counts from a slot of the window's own (`counts.rs`: written with the recorded grid,
//! a pristine copy beside it), and a loop replay records:
//!
//! ```text
//! barrier; fill flag = 0, counter = 0; barrier
//! max × { stepper, indirect from the window's own slot: counter += 1
//!         execute the graph's secondaries
//!         barrier
//!         per chunk of counts: zeroer (zero): if flag != 0, every live slot = 0
//!         barrier }
//! per chunk of counts: zeroer (restore): every live slot = its pristine copy; barrier
//! ```
//!
//! Once an iteration leaves the flag set, the zeroers clear every group count of the
//! window, the step's own included, so every later iteration dispatches nothing (its
//! step too: the counter holds the iterations that ran); the restore leaves the counts as
//! recorded, so a plain replay runs everything. The stepper binds the counter alone (it
//! runs beside the iteration's first commands, which may write the flag), never writes
//! the slot it reads, nor the zeroers a slot they read; each barrier carries the zeroers' writes to
//! the next iteration's indirect reads (`DRAW_INDIRECT`, `INDIRECT_COMMAND_READ`) and
//! orders those reads before the next write. Zeroed counts stop dispatches only, so a
//! copy or the user's own work is refused in a loop body here too.
//!
//! What an iteration after the flag's costs: it is recorded, so the host pays for
//! recording it and the device for walking its commands with every dispatch discarded
//! or empty (the crate's README has the figures on lavapipe); on the fallback it also
//! runs the zeroers (a group of 64 invocations per chunk of 128 slots).

use std::sync::Arc;

use ash::vk;
use capture_core::{DeviceLoops, KernelSignature, Param, ServerError};

use crate::counts::{Chunk, GroupCounts};
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

/// Why a recorded copy may not be in a loop body on the indirect fallback.
const COPY_IN_BODY_INDIRECT: &str = "a Vulkan loop replay without conditional rendering \
     discards the iterations after the flag's by zeroing the group counts of their indirect \
     dispatches, which stops dispatches only: a recorded copy would run in every iteration, \
     those after the flag's too";

/// Why the user's own work may not be in a loop body on the indirect fallback.
const WORK_IN_BODY_INDIRECT: &str = "a Vulkan loop replay without conditional rendering \
     discards the iterations after the flag's by zeroing the group counts of the dispatches \
     the backend records, which stops those only: the user's own work may record copies, \
     fills, dispatches or other commands that would run in every iteration, those after the \
     flag's too";

/// How a device's loop replays (rule 30) discard the iterations after the flag's,
/// chosen when it is opened ([`VulkanBackend::loop_emulation`](crate::VulkanBackend::loop_emulation)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoopEmulation {
    /// Conditional rendering (`VK_EXT_conditional_rendering` with its
    /// `conditionalRendering` feature): every capture window's secondaries run
    /// predicated on a word a setter kernel clears.
    ConditionalRendering,
    /// The fallback: every dispatch a capture window records is an indirect dispatch
    /// whose group counts a small kernel zeroes; the reason conditional rendering is not
    /// used (missing, or forced off by [`VulkanOptions::indirect_loops`](crate::VulkanOptions::indirect_loops)).
    IndirectDispatch(&'static str),
}

/// How `gpu` emulates loops.
pub(crate) fn emulation(gpu: &Gpu) -> LoopEmulation {
    match &gpu.conditional {
        Conditional::Enabled(_) => LoopEmulation::ConditionalRendering,
        Conditional::Missing(why) => LoopEmulation::IndirectDispatch(why),
    }
}

/// Whether `gpu` runs loop replays (every device does, on one path or the other), and
/// what a loop body may not hold there.
pub(crate) fn device_loops(gpu: &Gpu) -> DeviceLoops {
    match emulation(gpu) {
        LoopEmulation::ConditionalRendering => DeviceLoops::Supported {
            copies: Some(COPY_IN_BODY),
            work: Some(WORK_IN_BODY),
        },
        LoopEmulation::IndirectDispatch(_) => DeviceLoops::Supported {
            copies: Some(COPY_IN_BODY_INDIRECT),
            work: Some(WORK_IN_BODY_INDIRECT),
        },
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

/// The indirect fallback's stepper, over the counter: counts an iteration (dispatched
/// indirect from the window's own slot, so only while the counts run). One invocation.
const STEPPER: &str = "
@group(0) @binding(0) var<storage, read_write> counter: array<u32>;
@compute @workgroup_size(1)
fn main() {
    counter[0] = counter[0] + 1u;
}
";

/// The stepper's parameter: the counter.
const STEPPER_SIGNATURE: KernelSignature = KernelSignature::of(&[Param::READ_WRITE]);

/// The indirect fallback's zeroer, over the flag and a chunk of group counts (its live
/// words, then as many pristine ones): mode 0 zeroes the live words once the flag is
/// set, mode 1 restores them from the pristine ones. One group of 64 invocations (within
/// every device's limits), each taking every 64th live word.
const ZEROER: &str = "
struct Params { mode: u32 }
var<immediate> p: Params;
@group(0) @binding(0) var<storage, read> flag: array<u32>;
@group(0) @binding(1) var<storage, read_write> counts: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) i: u32) {
    let live = arrayLength(&counts) / 2u;
    if (p.mode == 0u) {
        if (flag[0] == 0u) {
            return;
        }
        for (var at = i; at < live; at += 64u) {
            counts[at] = 0u;
        }
    } else {
        for (var at = i; at < live; at += 64u) {
            counts[at] = counts[live + at];
        }
    }
}
";

/// The zeroer's parameters: the flag, the chunk; its mode.
const ZEROER_SIGNATURE: KernelSignature =
    KernelSignature::of(&[Param::READ, Param::READ_WRITE, Param::scalar::<u32>()]);

/// The zeroer's mode that zeroes the live counts once the flag is set.
const ZERO: u32 = 0;
/// The zeroer's mode that restores the live counts.
const RESTORE: u32 = 1;

/// What a stream's loop replays share, made at its first: the setter's pipeline, or on
/// the indirect fallback the stepper's and the zeroer's.
pub(crate) enum LoopKit {
    /// Conditional rendering's setter.
    Conditional { setter: VulkanKernel },
    /// The indirect fallback's stepper and zeroer.
    Indirect {
        stepper: VulkanKernel,
        zeroer: VulkanKernel,
    },
}

impl LoopKit {
    /// The kernels of `gpu`'s path, loaded.
    pub(crate) fn new(gpu: &Arc<Gpu>) -> Result<Self, ServerError> {
        let load = |name, wgsl, signature| {
            kernels::load(gpu, &VulkanKernelSource::internal(name, wgsl, signature))
        };
        Ok(match emulation(gpu) {
            LoopEmulation::ConditionalRendering => Self::Conditional {
                setter: load("capture_loop_setter", SETTER, SETTER_SIGNATURE)?,
            },
            LoopEmulation::IndirectDispatch(_) => Self::Indirect {
                stepper: load("capture_loop_stepper", STEPPER, STEPPER_SIGNATURE)?,
                zeroer: load("capture_loop_zeroer", ZEROER, ZEROER_SIGNATURE)?,
            },
        })
    }

    /// The setter's pipeline objects (conditional rendering's path).
    pub(crate) fn setter(&self) -> Result<&KernelObjects, ServerError> {
        match self {
            Self::Conditional { setter } => Ok(&setter.objects),
            Self::Indirect { .. } => Err(wrong_path()),
        }
    }

    /// The stepper's and the zeroer's pipeline objects (the indirect fallback's).
    pub(crate) fn indirect(&self) -> Result<(&KernelObjects, &KernelObjects), ServerError> {
        match self {
            Self::Indirect { stepper, zeroer } => Ok((&stepper.objects, &zeroer.objects)),
            Self::Conditional { .. } => Err(wrong_path()),
        }
    }

    /// What the stepper's set binds for a loop over `counter`.
    pub(crate) fn step_bindings(counter: &VulkanSlice) -> [(vk::Buffer, u64, u64); 1] {
        [(counter.buffer, counter.offset, counter.len)]
    }

    /// What a zeroer's set binds for a loop over `flag` and the window's `chunk`.
    pub(crate) fn chunk_bindings(flag: &VulkanSlice, chunk: &Chunk) -> [(vk::Buffer, u64, u64); 2] {
        [(flag.buffer, flag.offset, flag.len), chunk.binding()]
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

/// A graph was captured on one path and looped on the other (never: a device's path is
/// fixed when it is opened).
fn wrong_path() -> ServerError {
    ServerError::graph_state(
        "loop replay",
        "the loop kit was made for the other way of discarding iterations",
    )
}

/// Records a loop replay of `secondaries` (recorded inside conditional rendering on
/// `go`) into the primary `cmd`, up to `max` iterations (see the module's header), the
/// setter's descriptor set `set` binding the flag, the counter and `go`'s page. The
/// device has conditional rendering (the window has a `go` word only where it does).
pub(crate) fn record(
    gpu: &Gpu,
    cmd: vk::CommandBuffer,
    setter: &KernelObjects,
    set: vk::DescriptorSet,
    secondaries: &[vk::CommandBuffer],
    go: Word,
    max: u32,
) {
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

/// The descriptor sets an indirect loop replay binds: the stepper's (the counter), and a zeroer's for each of the window's chunks of counts, in order.
pub(crate) struct IndirectSets {
    /// The stepper's set.
    pub(crate) step: vk::DescriptorSet,
    /// Beside each chunk, its zeroer's set.
    pub(crate) chunks: Vec<vk::DescriptorSet>,
}

/// Records a loop replay of `secondaries` (whose dispatches read their group counts
/// from `counts`) into the primary `cmd`, up to `max` iterations, on the indirect
/// fallback (see the module's header), over the stop flag `flag` and the iteration
/// counter `counter`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn record_indirect(
    gpu: &Gpu,
    cmd: vk::CommandBuffer,
    kit: &LoopKit,
    sets: &IndirectSets,
    secondaries: &[vk::CommandBuffer],
    counts: &GroupCounts,
    (flag, counter): (&VulkanSlice, &VulkanSlice),
    max: u32,
) -> Result<(), ServerError> {
    let (stepper, zeroer) = kit.indirect()?;
    let push = |mode: u32| mode.to_le_bytes();
    let zeroers = |mode: u32| {
        for (i, &set) in sets.chunks.iter().enumerate() {
            raw::dispatch(gpu, cmd, zeroer, i == 0, set, &push(mode), [1, 1, 1]);
        }
    };
    let step = counts.step().at();
    raw::loop_barrier(gpu, cmd);
    raw::fill(gpu, cmd, (flag.buffer, flag.offset), flag.len, 0);
    raw::fill(gpu, cmd, (counter.buffer, counter.offset), counter.len, 0);
    raw::loop_barrier(gpu, cmd);
    for _ in 0..max {
        // What the primary had bound is undefined after executing secondaries.
        raw::dispatch_indirect(gpu, cmd, stepper, true, sets.step, &[], step);
        raw::execute(gpu, cmd, secondaries);
        raw::loop_barrier(gpu, cmd);
        zeroers(ZERO);
        raw::loop_barrier(gpu, cmd);
    }
    zeroers(RESTORE);
    raw::loop_barrier(gpu, cmd);
    Ok(())
}
