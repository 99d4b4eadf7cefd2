//! `Lane`: one stream's command submission. Eager work goes into the stream's open
//! primary command buffer; a fence first submits the open batch, then names its timeline
//! value. While a capture records, work goes into the window's secondary command buffer
//! instead. Barriers sit at every boundary.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use ash::vk;
use capture_core::ServerError;

use crate::raw::{self, Gpu, KernelObjects};

/// Sets a descriptor pool holds before another is made.
const SETS_PER_POOL: u32 = 256;
/// Storage buffers a set may bind (launch buffers plus the info words).
const BUFFERS_PER_SET: u32 = 8;

/// A capture window's secondary command buffer and the descriptor pools its sets come
/// from.
pub(crate) struct Window {
    pub(crate) secondary: vk::CommandBuffer,
    pub(crate) pools: Vec<vk::DescriptorPool>,
}

pub(crate) struct Batch {
    pool: vk::CommandPool,
    open: Option<vk::CommandBuffer>,
    dirty: bool,
    sets: Vec<vk::DescriptorPool>,
    spare_sets: Vec<vk::DescriptorPool>,
    in_flight: VecDeque<(u64, vk::CommandBuffer, Vec<vk::DescriptorPool>)>,
    semaphore: vk::Semaphore,
    submitted: u64,
    /// Other lanes' timeline values the next submission waits for (rule 18).
    waits: Vec<(vk::Semaphore, u64)>,
    pub(crate) window: Option<Window>,
}

/// One stream's submission state, shared with its fences and executables.
pub(crate) struct Lane {
    pub(crate) gpu: Arc<Gpu>,
    batch: Mutex<Batch>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

static LANES: Mutex<Vec<Weak<Lane>>> = Mutex::new(Vec::new());

/// Registers `lane` and returns the signal that finds it.
pub(crate) fn register(lane: &Arc<Lane>) -> usize {
    let mut lanes = lock(&LANES);
    match lanes.iter().position(|l| l.strong_count() == 0) {
        Some(free) => {
            lanes[free] = Arc::downgrade(lane);
            free
        }
        None => {
            lanes.push(Arc::downgrade(lane));
            lanes.len() - 1
        }
    }
}

/// The lane a signal names, while it lives.
pub(crate) fn find(signal: usize) -> Option<Arc<Lane>> {
    lock(&LANES).get(signal).and_then(Weak::upgrade)
}

impl Lane {
    pub(crate) fn new(gpu: Arc<Gpu>) -> Result<Arc<Self>, ServerError> {
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
            batch: Mutex::new(Batch {
                pool,
                open: None,
                dirty: false,
                sets: Vec::new(),
                spare_sets: Vec::new(),
                in_flight: VecDeque::new(),
                semaphore,
                submitted: 0,
                waits: Vec::new(),
                window: None,
            }),
        }))
    }

    pub(crate) fn batch(&self) -> MutexGuard<'_, Batch> {
        lock(&self.batch)
    }

    /// The command buffer work goes into now: the window's secondary while recording,
    /// else the open primary (begun if needed).
    fn target(&self, b: &mut Batch) -> Result<vk::CommandBuffer, ServerError> {
        if let Some(w) = &b.window {
            return Ok(w.secondary);
        }
        if let Some(open) = b.open {
            return Ok(open);
        }
        let cmd = raw::command_buffer(&self.gpu, b.pool, vk::CommandBufferLevel::PRIMARY)?;
        raw::begin_primary(&self.gpu, cmd)?;
        b.open = Some(cmd);
        Ok(cmd)
    }

    fn set(
        &self,
        b: &mut Batch,
        kernel: &KernelObjects,
        buffers: &[(vk::Buffer, u64, u64)],
    ) -> Result<vk::DescriptorSet, ServerError> {
        let recording = b.window.is_some();
        let current = if recording {
            b.window.as_ref().and_then(|w| w.pools.last().copied())
        } else {
            b.sets.last().copied()
        };
        if let Some(pool) = current
            && let Some(set) = raw::descriptor_set(&self.gpu, pool, kernel, buffers)?
        {
            return Ok(set);
        }
        let pool = match b.spare_sets.pop() {
            Some(p) if !recording => p,
            spare => {
                if let Some(p) = spare {
                    b.spare_sets.push(p);
                }
                raw::descriptor_pool(&self.gpu, SETS_PER_POOL, BUFFERS_PER_SET)?
            }
        };
        match &mut b.window {
            Some(w) => w.pools.push(pool),
            None => b.sets.push(pool),
        }
        raw::descriptor_set(&self.gpu, pool, kernel, buffers)?.ok_or_else(|| {
            ServerError::invalid(
                "kernel bindings",
                buffers.len(),
                "a fresh descriptor pool could not hold one set",
            )
        })
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
        raw::copy(&self.gpu, cmd, from, to, len);
        raw::barrier(&self.gpu, cmd);
        b.dirty |= b.window.is_none();
        Ok(())
    }

    /// Records a dispatch, then a barrier.
    pub(crate) fn dispatch(
        &self,
        kernel: &KernelObjects,
        buffers: &[(vk::Buffer, u64, u64)],
        grid: [u32; 3],
    ) -> Result<(), ServerError> {
        let mut b = self.batch();
        let cmd = self.target(&mut b)?;
        let set = self.set(&mut b, kernel, buffers)?;
        raw::dispatch(&self.gpu, cmd, kernel, set, grid);
        raw::barrier(&self.gpu, cmd);
        b.dirty |= b.window.is_none();
        Ok(())
    }

    /// Records `times` executions of `secondary` in the open primary, with barriers
    /// before, between and after (primary → secondary, replay → replay, secondary →
    /// eager or host).
    pub(crate) fn replay(
        &self,
        secondary: vk::CommandBuffer,
        times: u32,
    ) -> Result<(), ServerError> {
        // The core never replays on a recording stream (rule 16), so the target is the
        // open primary.
        let mut b = self.batch();
        let cmd = self.target(&mut b)?;
        raw::barrier(&self.gpu, cmd);
        for _ in 0..times {
            raw::execute(&self.gpu, cmd, secondary);
            raw::barrier(&self.gpu, cmd);
        }
        b.dirty = true;
        Ok(())
    }

    /// Submits the open batch, if it holds work, and returns the timeline value after
    /// which everything enqueued so far has run.
    pub(crate) fn flush(&self) -> Result<u64, ServerError> {
        let mut b = self.batch();
        if let (Some(cmd), true) = (b.open, b.dirty) {
            raw::end(&self.gpu, cmd)?;
            let value = b.submitted + 1;
            raw::submit(&self.gpu, cmd, b.semaphore, value, &b.waits)?;
            b.waits.clear();
            b.submitted = value;
            b.open = None;
            b.dirty = false;
            let sets = std::mem::take(&mut b.sets);
            b.in_flight.push_back((value, cmd, sets));
        }
        Ok(b.submitted)
    }

    /// Makes this lane's next submission wait, on the device, for `other`'s timeline to
    /// reach `value` (already submitted there: `other`'s fence flushed it).
    pub(crate) fn wait_for(&self, other: &Lane, value: u64) {
        if std::ptr::eq(self, other) {
            return;
        }
        // One lane's lock at a time: the other's semaphore is read, then this one's
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
        self.retire()
    }

    /// Submits and waits for everything enqueued so far.
    pub(crate) fn finish(&self) -> Result<(), ServerError> {
        let value = self.flush()?;
        self.wait(value)
    }

    fn retire(&self) -> Result<(), ServerError> {
        let mut b = self.batch();
        let reached = raw::reached(&self.gpu, b.semaphore)?;
        while b.in_flight.front().is_some_and(|(v, _, _)| *v <= reached) {
            let (_, cmd, sets) = b.in_flight.pop_front().expect("checked above");
            raw::free_command_buffer(&self.gpu, b.pool, cmd);
            for pool in sets {
                raw::reset_descriptor_pool(&self.gpu, pool);
                b.spare_sets.push(pool);
            }
        }
        Ok(())
    }

    /// Opens a capture window: a simultaneous-use secondary command buffer.
    pub(crate) fn begin(&self) -> Result<(), ServerError> {
        let mut b = self.batch();
        let secondary = raw::command_buffer(&self.gpu, b.pool, vk::CommandBufferLevel::SECONDARY)?;
        if let Err(e) = raw::begin_secondary(&self.gpu, secondary, true) {
            raw::free_command_buffer(&self.gpu, b.pool, secondary);
            return Err(e);
        }
        b.window = Some(Window {
            secondary,
            pools: Vec::new(),
        });
        Ok(())
    }

    /// Closes the window, returning its ended secondary and descriptor pools; `None` when
    /// no window was open.
    pub(crate) fn end(&self) -> Result<Option<Window>, ServerError> {
        let mut b = self.batch();
        let Some(window) = b.window.take() else {
            return Ok(None);
        };
        raw::end(&self.gpu, window.secondary)?;
        Ok(Some(window))
    }

    /// Frees a window's objects, once no pending work uses them.
    pub(crate) fn free(&self, window: Window) {
        let b = self.batch();
        raw::free_command_buffer(&self.gpu, b.pool, window.secondary);
        for pool in window.pools {
            raw::destroy_descriptor_pool(&self.gpu, pool);
        }
    }

    /// The open batch's command pool, for a one-off command buffer outside the batch
    /// (the validation canary).
    #[cfg(test)]
    pub(crate) fn pool(&self) -> vk::CommandPool {
        self.batch().pool
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        let _ = self.finish();
        self.gpu.idle();
        let b = lock(&self.batch);
        for (_, cmd, sets) in &b.in_flight {
            raw::free_command_buffer(&self.gpu, b.pool, *cmd);
            for pool in sets {
                raw::destroy_descriptor_pool(&self.gpu, *pool);
            }
        }
        for pool in b.sets.iter().chain(&b.spare_sets) {
            raw::destroy_descriptor_pool(&self.gpu, *pool);
        }
        if let Some(w) = &b.window {
            for pool in &w.pools {
                raw::destroy_descriptor_pool(&self.gpu, *pool);
            }
        }
        raw::destroy_command_pool(&self.gpu, b.pool);
        raw::destroy_semaphore(&self.gpu, b.semaphore);
    }
}
