//! `Submitter`: one stream's command submission. Eager work goes into the stream's open
//! primary command buffer, submitted every [`SubmitterConfig::submit_every`] eager commands,
//! at the end of every replay call and by every fence (which then names its timeline
//! value). Waits for other lanes ride in the next submission; a fence with waits but no
//! work pending submits them in a batch of their own, so a fence is always behind every
//! wait enqueued before it. While a capture records, work goes into the window's secondary command buffer
//! instead. Barriers sit at every boundary. A loop replay (rule 30) records the window's
//! secondaries `max` times, as `loops.rs` describes; on a device without conditional
//! rendering every dispatch a window records reads its group counts from a slot of the
//! window's own (`counts.rs`), which such a loop zeroes after the flag's iteration.
//!
//! A submission that fails (`vkEndCommandBuffer` or `vkQueueSubmit`) drops its batch:
//! the command buffer is freed, its descriptor pools are reset for reuse, and the next
//! work opens a fresh batch.
//!
//! At most [`MAX_IN_FLIGHT`] batches are pending at once: a submission past that waits
//! for the oldest to finish (a host outrunning its device blocks, as a driver's full
//! launch queue does, rather than growing without bound), so a submitter's bookkeeping for
//! them is sized when it opens and a steady stream of eager work allocates nothing,
//! however far the device lags. The error comes back from the fence that submitted, or, for a
//! submission the cadence or a replay made, from the next fence, so the core taints what
//! the stream wrote since its last good fence (rule 15).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use ash::vk;
use capture_core::ServerError;
use capture_core::backend::Lane;

use crate::counts::{CountPages, GroupCounts, Slot};
use crate::lane_order::LaneOrder;
use crate::loops::{self, LoopKit};
use crate::memory::MemoryUse;
use crate::predicates::{Predicates, Word};
use crate::raw::{self, Conditional, Gpu, KernelObjects};
use crate::sets::SetPools;
use crate::storage::VulkanSlice;
use crate::work::{Kept, VulkanRange, VulkanWork};

/// Batches a submitter keeps pending at once: with the default cadence, 1,024 eager commands
/// the device has not yet run.
pub(crate) const MAX_IN_FLIGHT: usize = 16;

/// How a submitter batches its work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SubmitterConfig {
    /// Eager commands (launches and copies) after which the open batch is submitted.
    pub(crate) submit_every: u32,
    /// Sets per descriptor pool.
    pub(crate) sets_per_pool: u32,
    /// The memory the `go` words of windows, or their dispatches' group counts, live in
    /// (rule 30; mapped and coherent).
    pub(crate) predicates: MemoryUse,
}

/// A capture window's secondary command buffers and the descriptor pools its sets come
/// from. A launch naming a slot (rule 26) is recorded in a secondary of its own between
/// the others, so an update records that one again; a replay executes them in order.
pub(crate) struct Window {
    /// The secondary being recorded; after `end`, the last of `cmds`.
    pub(crate) secondary: vk::CommandBuffer,
    /// The secondaries ended so far, in the order a replay executes them (after `end`,
    /// all of them).
    cmds: Vec<vk::CommandBuffer>,
    /// Beside each of `cmds`, the recorded launch it holds alone when it is an
    /// updatable one.
    nodes_of: Vec<Option<u64>>,
    /// Whether `end` ended the last secondary (it is then in `cmds`).
    ended: bool,
    pub(crate) sets: SetPools,
    /// The pipeline the secondary has bound, if known.
    bound: Option<vk::Pipeline>,
    /// What the user's work recorded into the secondary handed over
    /// ([`VulkanWorkCall::keep`](crate::VulkanWorkCall::keep)): dropped with the window,
    /// so with its graph's executable, behind the last replay's fence.
    kept: Vec<Kept>,
    /// Launches and work recorded so far: the next one's place (the core's `node`).
    nodes: u64,
    /// Secondaries an update replaced, each with the timeline value of the last
    /// submission that may execute it, and the set an update took for it (its own).
    retired: Vec<Retired>,
    /// Beside each of `cmds`, the set an update recorded it with, which no other launch
    /// shares: it goes to `free_sets` when the secondary retires.
    owned_sets: Vec<Option<(vk::DescriptorSetLayout, vk::DescriptorSet)>>,
    /// Sets of retired secondaries, which no pending submission can use: an update
    /// rewrites one of its layout before it allocates another, so a loop of rebinds
    /// holds as many sets as replays in flight, not one per update.
    free_sets: Vec<(vk::DescriptorSetLayout, vk::DescriptorSet)>,
    /// Where barriers go once the window forked branches (rule 28).
    order: LaneOrder,
    /// On a device with conditional rendering, the word every secondary of the window
    /// runs predicated on (rule 30's loop replays): 1 but in a loop after its flag.
    go: Option<Word>,
    /// On a device without conditional rendering, the group counts every dispatch of
    /// the window reads (rule 30's indirect fallback): zeroed in a loop after its flag.
    counts: Option<GroupCounts>,
}

impl Window {
    /// Every secondary, in the order a replay executes them (after `end`).
    pub(crate) fn secondaries(&self) -> &[vk::CommandBuffer] {
        &self.cmds
    }

    /// The word its secondaries run predicated on, where the device has conditional
    /// rendering.
    pub(crate) fn go(&self) -> Option<Word> {
        self.go
    }

    fn push(&mut self, cmd: vk::CommandBuffer, node: Option<u64>) {
        self.cmds.push(cmd);
        self.nodes_of.push(node);
        self.owned_sets.push(None);
    }
}

/// A secondary an update replaced: the last submission that may execute it, and its
/// own set.
#[derive(Clone, Copy)]
struct Retired {
    value: u64,
    cmd: vk::CommandBuffer,
    set: Option<(vk::DescriptorSetLayout, vk::DescriptorSet)>,
}

/// A submitted batch: its timeline value, command buffer, descriptor pools, and what the
/// user's work recorded into it handed over.
struct InFlight {
    value: u64,
    cmd: vk::CommandBuffer,
    sets: Vec<vk::DescriptorPool>,
    kept: Vec<Kept>,
}

pub(crate) struct Batch {
    pool: vk::CommandPool,
    open: Option<vk::CommandBuffer>,
    /// The pipeline the open primary has bound, if known: a dispatch of the same one
    /// binds nothing (lavapipe records every command as an allocation of its own).
    bound: Option<vk::Pipeline>,
    dirty: bool,
    /// Eager commands in the open batch.
    commands: u32,
    sets: SetPools,
    spare_sets: Vec<vk::DescriptorPool>,
    /// Emptied pool lists of retired batches, for the next batches to fill.
    spare_lists: Vec<Vec<vk::DescriptorPool>>,
    in_flight: VecDeque<InFlight>,
    /// What the user's work recorded into the open primary handed over: goes with it
    /// when it is submitted, dropped when it retires.
    kept: Vec<Kept>,
    semaphore: vk::Semaphore,
    submitted: u64,
    /// Other lanes' timeline values the next submission waits for (rule 18).
    waits: Vec<(vk::Semaphore, u64)>,
    /// A submission that failed where no caller could be told: the next fence says so.
    failed: Option<ServerError>,
    pub(crate) window: Option<Window>,
    /// What this stream's loop replays share (rule 30), made at its first.
    loops: Option<LoopKit>,
    /// The `go` words of this stream's windows (rule 30).
    predicates: Predicates,
    /// The chunks of group counts of this stream's windows (rule 30's indirect fallback).
    counts: CountPages,
}

/// One stream's submission state, shared with its fences and executables.
pub(crate) struct Submitter {
    pub(crate) gpu: Arc<Gpu>,
    config: SubmitterConfig,
    batch: Mutex<Batch>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

static SUBMITTERS: Mutex<Vec<Weak<Submitter>>> = Mutex::new(Vec::new());

/// Registers `submitter` and returns the signal that finds it.
pub(crate) fn register(submitter: &Arc<Submitter>) -> usize {
    let mut lanes = lock(&SUBMITTERS);
    match lanes.iter().position(|l| l.strong_count() == 0) {
        Some(free) => {
            lanes[free] = Arc::downgrade(submitter);
            free
        }
        None => {
            lanes.push(Arc::downgrade(submitter));
            lanes.len() - 1
        }
    }
}

/// The submitter a signal names, while it lives.
pub(crate) fn find(signal: usize) -> Option<Arc<Submitter>> {
    lock(&SUBMITTERS).get(signal).and_then(Weak::upgrade)
}

impl Submitter {
    pub(crate) fn new(gpu: Arc<Gpu>, config: SubmitterConfig) -> Result<Arc<Self>, ServerError> {
        let pool = raw::command_pool(&gpu)?;
        let semaphore = match raw::timeline(&gpu) {
            Ok(s) => s,
            Err(e) => {
                raw::destroy_command_pool(&gpu, pool);
                return Err(e);
            }
        };
        Ok(Arc::new(Self {
            gpu,
            config,
            batch: Mutex::new(Batch {
                pool,
                open: None,
                bound: None,
                dirty: false,
                commands: 0,
                sets: SetPools::default(),
                // Room for every batch that may be pending and the one being filled,
                // each list with room for the pools a full batch draws.
                spare_sets: Vec::with_capacity((MAX_IN_FLIGHT + 1) * pools_per_batch(config)),
                spare_lists: (0..=MAX_IN_FLIGHT)
                    .map(|_| Vec::with_capacity(pools_per_batch(config)))
                    .collect(),
                in_flight: VecDeque::with_capacity(MAX_IN_FLIGHT + 1),
                kept: Vec::new(),
                semaphore,
                submitted: 0,
                waits: Vec::new(),
                failed: None,
                window: None,
                loops: None,
                predicates: Predicates::default(),
                counts: CountPages::default(),
            }),
        }))
    }

    pub(crate) fn batch(&self) -> MutexGuard<'_, Batch> {
        lock(&self.batch)
    }

    /// The command buffer work goes into now: the window's secondary while recording,
    /// else the open primary (begun if needed; freed again if it cannot begin).
    fn target(&self, b: &mut Batch) -> Result<vk::CommandBuffer, ServerError> {
        if let Some(w) = &b.window {
            return Ok(w.secondary);
        }
        self.primary(b)
    }

    /// The open primary, begun if needed (freed again if it cannot begin).
    fn primary(&self, b: &mut Batch) -> Result<vk::CommandBuffer, ServerError> {
        if let Some(open) = b.open {
            return Ok(open);
        }
        let cmd = raw::command_buffer(&self.gpu, b.pool, vk::CommandBufferLevel::PRIMARY)?;
        if let Err(e) = raw::begin_primary(&self.gpu, cmd) {
            raw::free_command_buffer(&self.gpu, b.pool, cmd);
            return Err(e);
        }
        b.open = Some(cmd);
        b.bound = None;
        Ok(cmd)
    }

    /// What the command buffer work goes into now has bound: the window's, or the open
    /// primary's.
    fn bound(b: &mut Batch) -> &mut Option<vk::Pipeline> {
        match &mut b.window {
            Some(w) => &mut w.bound,
            None => &mut b.bound,
        }
    }

    fn set(
        &self,
        b: &mut Batch,
        kernel: &KernelObjects,
        buffers: &[(vk::Buffer, u64, u64)],
    ) -> Result<vk::DescriptorSet, ServerError> {
        let per_pool = self.config.sets_per_pool;
        match &mut b.window {
            // A window's pools go with its graph: fresh ones, never the batch's spares.
            Some(w) => w.sets.set(&self.gpu, per_pool, None, kernel, buffers),
            None => b.sets.set(
                &self.gpu,
                per_pool,
                Some(&mut b.spare_sets),
                kernel,
                buffers,
            ),
        }
    }

    /// Before an operation recorded into `cmd`: inside a window that forked, the
    /// barrier its lane's order asks for (rule 28), and the operation counted on its
    /// lane. Whether the operation needs its own barrier after it (eager work, and a
    /// window before its first fork).
    fn barrier_before(&self, b: &mut Batch, cmd: vk::CommandBuffer) -> bool {
        let Some(w) = &mut b.window else {
            return true;
        };
        if w.order.trailing() {
            return true;
        }
        if w.order.needs_barrier() {
            raw::barrier(&self.gpu, cmd);
            w.order.barrier();
        }
        w.order.recorded();
        false
    }

    /// The next operation the window records is on `lane` (rule 28).
    pub(crate) fn enter_lane(&self, lane: Lane) {
        if let Some(w) = &mut self.batch().window {
            w.order.enter(lane);
        }
    }

    /// Barriers the open window recorded since its first fork.
    #[cfg(test)]
    pub(crate) fn lane_barriers(&self) -> Option<u32> {
        self.batch().window.as_ref().map(|w| w.order.taken())
    }

    /// The window opens lane `to` off `from`.
    pub(crate) fn fork_lane(&self, from: Lane, to: Lane) {
        if let Some(w) = &mut self.batch().window {
            w.order.fork(from, to);
        }
    }

    /// The window joins lane `from` into `into`.
    pub(crate) fn join_lane(&self, from: Lane, into: Lane) {
        if let Some(w) = &mut self.batch().window {
            w.order.join(from, into);
        }
    }

    /// Counts an eager command recorded in the open batch, submitting the batch when it
    /// holds [`SubmitterConfig::submit_every`] of them.
    fn recorded(&self, b: &mut Batch) {
        if b.window.is_some() {
            return;
        }
        b.dirty = true;
        b.commands += 1;
        if b.commands >= self.config.submit_every {
            self.submit_now(b);
        }
    }

    /// Records a copy, then a barrier.
    pub(crate) fn copy(
        &self,
        from: (vk::Buffer, u64),
        to: (vk::Buffer, u64),
        len: u64,
    ) -> Result<(), ServerError> {
        let mut b = self.batch();
        let cmd = self.target(&mut b)?;
        let trailing = self.barrier_before(&mut b, cmd);
        raw::copy(&self.gpu, cmd, from, to, len);
        if trailing {
            raw::barrier(&self.gpu, cmd);
        }
        self.recorded(&mut b);
        Ok(())
    }

    /// Records a dispatch, then a barrier.
    pub(crate) fn dispatch(
        &self,
        kernel: &KernelObjects,
        buffers: &[(vk::Buffer, u64, u64)],
        push: &[u8],
        grid: [u32; 3],
    ) -> Result<(), ServerError> {
        let mut b = self.batch();
        let cmd = self.target(&mut b)?;
        let set = self.set(&mut b, kernel, buffers)?;
        let slot = self.slot(&mut b, grid)?;
        let bound = Self::bound(&mut b);
        let bind = *bound != Some(kernel.pipeline);
        *bound = Some(kernel.pipeline);
        let trailing = self.barrier_before(&mut b, cmd);
        record_dispatch(&self.gpu, cmd, kernel, bind, set, push, grid, slot);
        if trailing {
            raw::barrier(&self.gpu, cmd);
        }
        if let Some(w) = &mut b.window {
            w.nodes += 1;
        }
        self.recorded(&mut b);
        Ok(())
    }

    /// As [`dispatch`](Self::dispatch), for a launch naming a slot: while a window
    /// records, in a secondary of its own (the one before ended, a fresh one begun
    /// after), so [`update`](Self::update) can record it again.
    pub(crate) fn dispatch_updatable(
        &self,
        kernel: &KernelObjects,
        buffers: &[(vk::Buffer, u64, u64)],
        push: &[u8],
        grid: [u32; 3],
    ) -> Result<(), ServerError> {
        let mut b = self.batch();
        if b.window.is_none() {
            drop(b);
            return self.dispatch(kernel, buffers, push, grid);
        }
        let set = self.set(&mut b, kernel, buffers)?;
        let slot = self.slot(&mut b, grid)?;
        let go = b.window.as_ref().and_then(Window::go);
        let alone = self.recorded_alone(&b, go, kernel, set, push, grid, slot)?;
        let next = match self.fresh_secondary(&b, go) {
            Ok(next) => next,
            Err(e) => {
                raw::free_command_buffer(&self.gpu, b.pool, alone);
                return Err(e);
            }
        };
        let w = b.window.as_mut().expect("checked above");
        // A launch recorded alone is ordered after everything before it, and what
        // follows after it (its own barrier): a full step between the lanes.
        if w.order.pending() {
            raw::barrier(&self.gpu, w.secondary);
        }
        w.order.barrier();
        if let Err(e) = close_secondary(&self.gpu, w.secondary, go) {
            // The window is doomed by the failure; what it holds is freed with it.
            w.push(alone, None);
            w.push(next, None);
            return Err(e);
        }
        let before = std::mem::replace(&mut w.secondary, next);
        w.push(before, None);
        w.push(alone, Some(w.nodes));
        if let (Some(counts), Some(slot)) = (&mut w.counts, slot) {
            counts.remember(w.nodes, slot, grid);
        }
        w.nodes += 1;
        w.bound = None;
        Ok(())
    }

    /// A fresh simultaneous-use secondary, begun (inside conditional rendering on `go`,
    /// when given).
    fn fresh_secondary(
        &self,
        b: &Batch,
        go: Option<Word>,
    ) -> Result<vk::CommandBuffer, ServerError> {
        let cmd = raw::command_buffer(&self.gpu, b.pool, vk::CommandBufferLevel::SECONDARY)?;
        if let Err(e) = raw::begin_secondary(&self.gpu, cmd, true, go.map(|w| w.at())) {
            raw::free_command_buffer(&self.gpu, b.pool, cmd);
            return Err(e);
        }
        Ok(cmd)
    }

    /// The slot a dispatch of `grid` the open window records reads its group counts
    /// from, written, on a device without conditional rendering (rule 30's indirect
    /// fallback); `None` elsewhere, and for eager work.
    fn slot(&self, b: &mut Batch, grid: [u32; 3]) -> Result<Option<Slot>, ServerError> {
        let Batch { window, counts, .. } = b;
        match window.as_mut().and_then(|w| w.counts.as_mut()) {
            Some(window) => window
                .slot(counts, &self.gpu, &self.config.predicates, grid)
                .map(Some),
            None => Ok(None),
        }
    }

    /// A secondary holding one dispatch of `kernel` (its pipeline bound) and the
    /// barrier after it, ended (the dispatch predicated on its window's `go`, if any, or
    /// reading its group counts from `slot`, if any).
    #[allow(clippy::too_many_arguments)]
    fn recorded_alone(
        &self,
        b: &Batch,
        go: Option<Word>,
        kernel: &KernelObjects,
        set: vk::DescriptorSet,
        push: &[u8],
        grid: [u32; 3],
        slot: Option<Slot>,
    ) -> Result<vk::CommandBuffer, ServerError> {
        let cmd = self.fresh_secondary(b, go)?;
        record_dispatch(&self.gpu, cmd, kernel, true, set, push, grid, slot);
        raw::barrier(&self.gpu, cmd);
        if let Err(e) = close_secondary(&self.gpu, cmd, go) {
            raw::free_command_buffer(&self.gpu, b.pool, cmd);
            return Err(e);
        }
        Ok(cmd)
    }

    /// Records updatable launch `node` of the sealed `window` again, over `buffers`,
    /// `push` and `grid` (rule 26): a new secondary in its place, so replays submitted
    /// from here on run it; the one it replaces is freed once the submissions that may
    /// execute it have run. Never rewrites a command buffer or a set a pending replay
    /// uses.
    pub(crate) fn update(
        &self,
        window: &mut Window,
        node: u64,
        kernel: &KernelObjects,
        buffers: &[(vk::Buffer, u64, u64)],
        push: &[u8],
        grid: [u32; 3],
    ) -> Result<(), ServerError> {
        let mut b = self.batch();
        let Some(at) = window.nodes_of.iter().position(|n| *n == Some(node)) else {
            return Err(ServerError::driver(
                "update",
                crate::error::VulkanMessage(format!(
                    "recorded launch {node} was not recorded as updatable"
                )),
            ));
        };
        // What no pending submission may execute any more goes first: its command
        // buffer freed, its own set back to the free list this update may take.
        let reached = raw::reached(&self.gpu, b.semaphore)?;
        let pool = b.pool;
        let free_sets = &mut window.free_sets;
        window.retired.retain(|r| {
            let done = r.value <= reached;
            if done {
                raw::free_command_buffer(&self.gpu, pool, r.cmd);
                free_sets.extend(r.set);
            }
            !done
        });
        let per_pool = self.config.sets_per_pool;
        let set = window
            .sets
            .owned(&self.gpu, per_pool, &mut window.free_sets, kernel, buffers)?;
        // On the indirect fallback the launch keeps its slot; a grid that changes is
        // written there by a command in this stream's primary, submitted at once, so
        // what was queued before keeps the old grid and what is queued after reads the
        // new one (rule 26). The new secondary is recorded first: a failure before the
        // write leaves the launch as it was.
        let slot = match &mut window.counts {
            Some(counts) => match counts.updatable(node) {
                Some((slot, held)) => Some((slot, *held != grid)),
                None => {
                    window.free_sets.push((kernel.set_layout, set));
                    return Err(ServerError::graph_state(
                        "update",
                        "the updatable launch has no group counts of its own",
                    ));
                }
            },
            None => None,
        };
        let cmd = match self.recorded_alone(
            &b,
            window.go,
            kernel,
            set,
            push,
            grid,
            slot.map(|(slot, _)| slot),
        ) {
            Ok(cmd) => cmd,
            Err(e) => {
                // Recorded nowhere: the set is free again.
                window.free_sets.push((kernel.set_layout, set));
                return Err(e);
            }
        };
        if let Some((slot, true)) = slot {
            if let Err(e) = self.regrid(&mut b, slot, grid) {
                // Never submitted: the secondary goes, and the set is free again.
                raw::free_command_buffer(&self.gpu, b.pool, cmd);
                window.free_sets.push((kernel.set_layout, set));
                return Err(e);
            }
            if let Some((_, held)) = window.counts.as_mut().and_then(|c| c.updatable(node)) {
                *held = grid;
            }
        }
        let old = std::mem::replace(&mut window.cmds[at], cmd);
        let old_set = window.owned_sets[at].replace((kernel.set_layout, set));
        window.retired.push(Retired {
            value: b.submitted,
            cmd: old,
            set: old_set,
        });
        Ok(())
    }

    /// Writes `grid` into both copies of `slot` by a command in the open primary, between
    /// barriers that order it after every use of the counts submitted before it and
    /// before every read after it, and submits it (rule 26 on the indirect fallback). A
    /// submission that fails dropped the write: the update fails, and the next fence
    /// reports the failure too (the batch's other work went with it).
    fn regrid(&self, b: &mut Batch, slot: Slot, grid: [u32; 3]) -> Result<(), ServerError> {
        let cmd = self.primary(b)?;
        let bytes = Slot::bytes(grid);
        raw::loop_barrier(&self.gpu, cmd);
        raw::update_buffer(&self.gpu, cmd, slot.at(), &bytes);
        raw::update_buffer(&self.gpu, cmd, slot.pristine(), &bytes);
        raw::loop_barrier(&self.gpu, cmd);
        b.dirty = true;
        match self.submit(b) {
            Ok(()) => {
                // Recycling is a courtesy here: a wait recycles too.
                let _ = self.retire_locked(b);
                Ok(())
            }
            Err(e) => {
                b.failed.get_or_insert_with(|| e.clone());
                Err(e)
            }
        }
    }

    /// Records the user's own `work` over `ranges` into the command buffer being
    /// recorded, between barriers: what ran before is visible to it, and what it wrote
    /// to what runs after.
    pub(crate) fn work(
        &self,
        work: &VulkanWork,
        ranges: &[VulkanRange],
    ) -> Result<(), ServerError> {
        let mut b = self.batch();
        let cmd = self.target(&mut b)?;
        raw::barrier(&self.gpu, cmd);
        if let Some(w) = &mut b.window {
            // The work is ordered after everything before it and before what follows,
            // whatever lane it is on.
            w.order.barrier();
        }
        let mut kept = Vec::new();
        let ran = work.call(&self.gpu.device, cmd, ranges, &mut kept);
        // What it handed over lives as long as the command buffer it recorded into may
        // run: the window's (its graph's), or the open primary's.
        match &mut b.window {
            Some(w) => w.kept.append(&mut kept),
            None => b.kept.append(&mut kept),
        }
        // The work may bind pipelines of its own.
        *Self::bound(&mut b) = None;
        if let Some(w) = &mut b.window {
            w.nodes += 1;
        }
        raw::barrier(&self.gpu, cmd);
        // Recorded (or half recorded) either way: the batch holds it.
        self.recorded(&mut b);
        ran.map_err(|why| {
            ServerError::driver(
                "work",
                crate::error::VulkanMessage(format!("work {} failed: {why}", work.name())),
            )
        })
    }

    /// Records `times` executions of `secondary` in the open primary, with barriers
    /// before, between and after (primary → secondary, replay → replay, secondary →
    /// eager or host), and submits them: one submission per replay call.
    pub(crate) fn replay(
        &self,
        secondaries: &[vk::CommandBuffer],
        times: u32,
    ) -> Result<(), ServerError> {
        // The core never replays on a recording stream (rule 16), so the target is the
        // open primary.
        let mut b = self.batch();
        let cmd = self.target(&mut b)?;
        raw::barrier(&self.gpu, cmd);
        for _ in 0..times {
            raw::execute(&self.gpu, cmd, secondaries);
            raw::barrier(&self.gpu, cmd);
        }
        // What the primary has bound is undefined after executing a secondary.
        b.bound = None;
        b.dirty = true;
        self.submit_now(&mut b);
        Ok(())
    }

    /// Records a loop replay (rule 30) of the sealed `window`, up to `max` iterations,
    /// over the stop flag `flag` and the iteration counter `counter`, in the open primary
    /// (see `loops.rs`), and submits it: one submission per loop replay call, as for a
    /// replay. The stream's loop kit is made at its first loop. On a device with
    /// conditional rendering the window's secondaries run predicated on its `go` word;
    /// elsewhere its dispatches read group counts of its own, which the loop zeroes.
    pub(crate) fn replay_loop(
        &self,
        window: &Window,
        max: u32,
        flag: &VulkanSlice,
        counter: &VulkanSlice,
    ) -> Result<(), ServerError> {
        if window.go.is_none() && window.counts.is_none() {
            return Err(ServerError::graph_state(
                "loop replay",
                "the graph was captured without a word to predicate its iterations on or \
                 group counts to zero",
            ));
        }
        // The core never replays on a recording stream (rule 16), so the target is the
        // open primary.
        let mut b = self.batch();
        let kit = match b.loops.take() {
            Some(kit) => kit,
            None => LoopKit::new(&self.gpu)?,
        };
        let recorded = self.target(&mut b).and_then(|cmd| {
            // The kernels' sets come from the batch's pools, as an eager launch's do:
            // they go with the batch, and a loop of loops reuses them.
            match (window.go, &window.counts) {
                (Some(go), _) => {
                    let bindings = LoopKit::bindings(flag, counter, go);
                    let setter = kit.setter()?;
                    let set = self.set(&mut b, setter, &bindings)?;
                    loops::record(&self.gpu, cmd, setter, set, window.secondaries(), go, max);
                }
                (None, Some(counts)) => {
                    let (stepper, zeroer) = kit.indirect()?;
                    let step = self.set(&mut b, stepper, &LoopKit::step_bindings(counter))?;
                    let mut chunks = Vec::with_capacity(counts.chunks().len());
                    for chunk in counts.chunks() {
                        let bindings = LoopKit::chunk_bindings(flag, chunk);
                        chunks.push(self.set(&mut b, zeroer, &bindings)?);
                    }
                    let sets = loops::IndirectSets { step, chunks };
                    let secondaries = window.secondaries();
                    loops::record_indirect(
                        &self.gpu,
                        cmd,
                        &kit,
                        &sets,
                        secondaries,
                        counts,
                        (flag, counter),
                        max,
                    )?;
                }
                (None, None) => unreachable!("checked above"),
            }
            Ok(())
        });
        b.loops = Some(kit);
        recorded?;
        // What the primary has bound is undefined after executing a secondary.
        b.bound = None;
        b.dirty = true;
        self.submit_now(&mut b);
        Ok(())
    }

    /// Submits the open batch where no caller waits for the answer: a failure is kept
    /// for the next fence; a success recycles what already ran.
    fn submit_now(&self, b: &mut Batch) {
        match self.submit(b) {
            Ok(()) => {
                // Recycling is a courtesy here: a wait recycles too.
                let _ = self.retire_locked(b);
            }
            Err(e) => {
                b.failed.get_or_insert(e);
            }
        }
    }

    /// Ends and submits the open batch, if it holds work or waits. On an error the batch
    /// is dropped: its command buffer freed (it never became pending), its descriptor
    /// pools reset for reuse; the waits stay for the next submission.
    fn submit(&self, b: &mut Batch) -> Result<(), ServerError> {
        if !(b.open.is_some() && b.dirty) {
            if b.waits.is_empty() {
                return Ok(());
            }
            // A wait with no work after it is still this stream's work: the core counts
            // the stream as following what it waits for, so the fence, sync or read that
            // flushes here must come after it (rule 18). It goes out in a batch of its
            // own, a barrier the wait holds back and the timeline signal after it;
            // otherwise the fence would name the last value submitted, which nothing
            // orders after the other stream.
            let cmd = self.primary(b)?;
            raw::barrier(&self.gpu, cmd);
            b.dirty = true;
        }
        let Some(cmd) = b.open else {
            return Ok(());
        };
        let value = b.submitted + 1;
        let sent = raw::end(&self.gpu, cmd)
            .and_then(|()| raw::submit(&self.gpu, cmd, b.semaphore, value, &b.waits));
        b.open = None;
        b.bound = None;
        b.dirty = false;
        b.commands = 0;
        let sets = b.sets.take(b.spare_lists.pop().unwrap_or_default());
        let kept = std::mem::take(&mut b.kept);
        match sent {
            Ok(()) => {
                b.waits.clear();
                b.submitted = value;
                b.in_flight.push_back(InFlight {
                    value,
                    cmd,
                    sets,
                    kept,
                });
                if b.in_flight.len() > MAX_IN_FLIGHT {
                    // Back-pressure: the oldest batch finishes before another goes out.
                    // Its waits name values other lanes already submitted, so it ends.
                    let oldest = b.in_flight.front().map_or(value, |f| f.value);
                    raw::wait(&self.gpu, b.semaphore, oldest)?;
                    self.retire_locked(b)?;
                }
                Ok(())
            }
            Err(e) => {
                raw::free_command_buffer(&self.gpu, b.pool, cmd);
                recycle(&self.gpu, b, sets);
                // Never pending: what its work handed over goes now.
                drop(kept);
                Err(e)
            }
        }
    }

    /// Submits the open batch, if it holds work or waits, and returns the timeline value
    /// after which everything enqueued so far (waits included) has run; or the error of this submission or of
    /// an earlier one no caller was told of.
    pub(crate) fn flush(&self) -> Result<u64, ServerError> {
        let mut b = self.batch();
        let sent = self.submit(&mut b);
        if let Some(earlier) = b.failed.take() {
            return Err(earlier);
        }
        sent.map(|()| b.submitted)
    }

    /// Makes this submitter's next submission wait, on the device, for `other`'s timeline to
    /// reach `value` (already submitted there: `other`'s fence flushed it). The wait
    /// counts as enqueued work: the next flush submits it even with no work after it, so
    /// every later fence of this submitter is behind it.
    pub(crate) fn wait_for(&self, other: &Submitter, value: u64) {
        if std::ptr::eq(self, other) {
            return;
        }
        // One submitter's lock at a time: the other's semaphore is read, then this one's
        // batch is locked.
        let semaphore = other.batch().semaphore;
        let mut b = self.batch();
        match b.waits.iter_mut().find(|(s, _)| *s == semaphore) {
            Some(wait) => wait.1 = wait.1.max(value),
            None => b.waits.push((semaphore, value)),
        }
    }

    /// Waits for `value`, then recycles the batches it covers.
    pub(crate) fn wait(&self, value: u64) -> Result<(), ServerError> {
        let semaphore = self.batch().semaphore;
        raw::wait(&self.gpu, semaphore, value)?;
        self.retire_locked(&mut self.batch())
    }

    /// Submits and waits for everything enqueued so far.
    pub(crate) fn finish(&self) -> Result<(), ServerError> {
        let value = self.flush()?;
        self.wait(value)
    }

    /// Frees the command buffers of the batches that ran and resets their pools.
    fn retire_locked(&self, b: &mut Batch) -> Result<(), ServerError> {
        let reached = raw::reached(&self.gpu, b.semaphore)?;
        while b.in_flight.front().is_some_and(|f| f.value <= reached) {
            let done = b.in_flight.pop_front().expect("checked above");
            raw::free_command_buffer(&self.gpu, b.pool, done.cmd);
            recycle(&self.gpu, b, done.sets);
            drop(done.kept);
        }
        Ok(())
    }

    /// Opens a capture window: a simultaneous-use secondary command buffer, recording
    /// inside conditional rendering on a `go` word of the window's own where the device
    /// has conditional rendering (rule 30).
    pub(crate) fn begin(&self) -> Result<(), ServerError> {
        let mut b = self.batch();
        // Where the device has conditional rendering, the window's secondaries run
        // predicated on a word of its own (rule 30).
        // Elsewhere its dispatches read group counts of its own.
        let memory = &self.config.predicates;
        let (go, counts) = match self.gpu.conditional {
            Conditional::Enabled(_) => (Some(b.predicates.take(&self.gpu, memory)?), None),
            Conditional::Missing(_) => {
                let counts = GroupCounts::new(&mut b.counts, &self.gpu, memory)?;
                (None, Some(counts))
            }
        };
        let secondary = match self.fresh_secondary(&b, go) {
            Ok(secondary) => secondary,
            Err(e) => {
                if let Some(go) = go {
                    b.predicates.give(go);
                }
                if let Some(counts) = counts {
                    counts.give(&mut b.counts);
                }
                return Err(e);
            }
        };
        b.window = Some(Window {
            secondary,
            cmds: Vec::new(),
            nodes_of: Vec::new(),
            ended: false,
            sets: SetPools::default(),
            bound: None,
            kept: Vec::new(),
            nodes: 0,
            retired: Vec::new(),
            owned_sets: Vec::new(),
            free_sets: Vec::new(),
            order: LaneOrder::default(),
            go,
            counts,
        });
        Ok(())
    }

    /// Closes the window, returning its ended secondary and descriptor pools; `None` when
    /// no window was open. When the secondary cannot end, the window is freed (nothing
    /// submitted it) and the error returned.
    pub(crate) fn end(&self) -> Result<Option<Window>, ServerError> {
        let mut b = self.batch();
        let Some(window) = b.window.take() else {
            return Ok(None);
        };
        let mut window = window;
        if window.order.pending() {
            raw::barrier(&self.gpu, window.secondary);
            window.order.barrier();
        }
        if let Err(e) = close_secondary(&self.gpu, window.secondary, window.go) {
            self.free_locked(&mut b, window);
            return Err(e);
        }
        let last = window.secondary;
        window.push(last, None);
        window.ended = true;
        Ok(Some(window))
    }

    /// Frees a window's objects, once no pending work uses them.
    pub(crate) fn free(&self, window: Window) {
        self.free_locked(&mut self.batch(), window);
    }

    fn free_locked(&self, b: &mut Batch, mut window: Window) {
        if let Some(go) = window.go {
            b.predicates.give(go);
        }
        if let Some(counts) = window.counts.take() {
            counts.give(&mut b.counts);
        }
        if !window.ended {
            raw::free_command_buffer(&self.gpu, b.pool, window.secondary);
        }
        for &cmd in &window.cmds {
            raw::free_command_buffer(&self.gpu, b.pool, cmd);
        }
        for r in &window.retired {
            raw::free_command_buffer(&self.gpu, b.pool, r.cmd);
        }
        for &pool in window.sets.pools() {
            raw::destroy_descriptor_pool(&self.gpu, pool);
        }
    }

    /// The value this submitter's timeline has reached.
    #[cfg(test)]
    pub(crate) fn reached(&self) -> Result<u64, ServerError> {
        raw::reached(&self.gpu, self.batch().semaphore)
    }

    /// Signals this submitter's timeline from the host, standing in for a submission of a
    /// submitter that submits none itself.
    #[cfg(test)]
    pub(crate) fn signal_from_host(&self, value: u64) -> Result<(), ServerError> {
        raw::signal(&self.gpu, self.batch().semaphore, value)
    }

    /// Batches submitted and not yet retired.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.batch().in_flight.len()
    }

    /// The open batch's command pool, for a one-off command buffer outside the batch
    /// (the validation canary).
    #[cfg(test)]
    pub(crate) fn pool(&self) -> vk::CommandPool {
        self.batch().pool
    }
}

/// Ends a window's secondary `cmd`, and first the conditional rendering it runs in on
/// `go`, if any. On an error the buffer may only be freed.
fn close_secondary(gpu: &Gpu, cmd: vk::CommandBuffer, go: Option<Word>) -> Result<(), ServerError> {
    if go.is_some() {
        raw::end_conditional(gpu, cmd);
    }
    raw::end(gpu, cmd)
}

/// Records a dispatch of `kernel` over `set`: with its group counts read from `slot`
/// where one is given (rule 30's indirect fallback), else `grid`.
#[allow(clippy::too_many_arguments)]
fn record_dispatch(
    gpu: &Gpu,
    cmd: vk::CommandBuffer,
    kernel: &KernelObjects,
    bind: bool,
    set: vk::DescriptorSet,
    push: &[u8],
    grid: [u32; 3],
    slot: Option<Slot>,
) {
    match slot {
        Some(slot) => raw::dispatch_indirect(gpu, cmd, kernel, bind, set, push, slot.at()),
        None => raw::dispatch(gpu, cmd, kernel, bind, set, push, grid),
    }
}

/// Descriptor pools one full batch draws when no set is reused (capped: a very long
/// cadence grows its lists once instead).
fn pools_per_batch(config: SubmitterConfig) -> usize {
    (config.submit_every.div_ceil(config.sets_per_pool) as usize).clamp(1, 64)
}

/// Resets the pools of a batch no pending work uses into the spares, and keeps their
/// emptied list for a later batch.
fn recycle(gpu: &Gpu, b: &mut Batch, mut sets: Vec<vk::DescriptorPool>) {
    for pool in sets.drain(..) {
        raw::reset_descriptor_pool(gpu, pool);
        b.spare_sets.push(pool);
    }
    b.spare_lists.push(sets);
}

impl Drop for Submitter {
    fn drop(&mut self) {
        let _ = self.finish();
        self.gpu.idle();
        let mut b = lock(&self.batch);
        // The setter goes (its pipeline destroyed) and the words' pages with it.
        b.loops = None;
        b.predicates.destroy(&self.gpu);
        b.counts.destroy(&self.gpu);
        for done in &b.in_flight {
            raw::free_command_buffer(&self.gpu, b.pool, done.cmd);
            for pool in &done.sets {
                raw::destroy_descriptor_pool(&self.gpu, *pool);
            }
        }
        for pool in b.sets.pools().iter().chain(&b.spare_sets) {
            raw::destroy_descriptor_pool(&self.gpu, *pool);
        }
        if let Some(w) = &b.window {
            for pool in w.sets.pools() {
                raw::destroy_descriptor_pool(&self.gpu, *pool);
            }
        }
        raw::destroy_command_pool(&self.gpu, b.pool);
        raw::destroy_semaphore(&self.gpu, b.semaphore);
        // What the user's work handed over goes while the device surely lives (the
        // submitter's `gpu` is dropped before its batch).
        drop(b);
        let mut b = lock(&self.batch);
        b.kept.clear();
        b.in_flight.clear();
        if let Some(w) = &mut b.window {
            w.kept.clear();
        }
    }
}
