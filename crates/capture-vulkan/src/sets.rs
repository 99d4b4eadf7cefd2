//! `SetPools`: descriptor sets carved from descriptor pools of a fixed number of sets
//! each. When the last pool has handed out its sets (counted here, not left to the
//! driver: lavapipe never reports `VK_ERROR_OUT_OF_POOL_MEMORY`) or the driver says it
//! is full, another pool joins: a reset spare when one is offered, else a new one.
//!
//! A set once written is never updated again, so a launch that binds exactly what a
//! recent launch of the same layout bound reuses its set (the last [`CACHED_SETS`] are
//! remembered): a decode-shaped chain ping-ponging between a few buffers allocates and
//! writes a handful of sets per batch, not one per launch. The memory is forgotten with
//! the pools, when they are handed over.

use ash::vk;
use capture_core::ServerError;

use crate::raw::{self, Gpu, KernelObjects};

/// Storage buffers a set may bind (launch buffers plus the info words).
pub(crate) const BUFFERS_PER_SET: u32 = 8;

/// Sets remembered for reuse per batch or window.
pub(crate) const CACHED_SETS: usize = 8;

/// A written set and what it binds.
#[derive(Debug, Clone, Copy)]
struct Cached {
    layout: vk::DescriptorSetLayout,
    buffers: [(vk::Buffer, u64, u64); raw::MAX_BINDINGS],
    len: usize,
    set: vk::DescriptorSet,
}

/// The descriptor pools one batch or one capture window takes its sets from.
#[derive(Debug, Default)]
pub(crate) struct SetPools {
    pools: Vec<vk::DescriptorPool>,
    /// Sets handed out from the last pool.
    used: u32,
    /// The last sets written from these pools, newest last.
    recent: Vec<Cached>,
}

impl SetPools {
    /// A set for `kernel` pointing at `buffers`, from the last pool while it has room,
    /// else from a pool added now: one of `spare` (reset pools of `per_pool` sets) when
    /// given, else a new one of `per_pool` sets.
    pub(crate) fn set(
        &mut self,
        gpu: &Gpu,
        per_pool: u32,
        spare: Option<&mut Vec<vk::DescriptorPool>>,
        kernel: &KernelObjects,
        buffers: &[(vk::Buffer, u64, u64)],
    ) -> Result<vk::DescriptorSet, ServerError> {
        if let Some(hit) = self
            .recent
            .iter()
            .rev()
            .find(|c| c.layout == kernel.set_layout && &c.buffers[..c.len] == buffers)
        {
            return Ok(hit.set);
        }
        let set = self.fresh(gpu, per_pool, spare, kernel, buffers)?;
        if buffers.len() <= raw::MAX_BINDINGS {
            if self.recent.len() == CACHED_SETS {
                self.recent.remove(0);
            }
            let mut cached = Cached {
                layout: kernel.set_layout,
                buffers: [(vk::Buffer::null(), 0, 0); raw::MAX_BINDINGS],
                len: buffers.len(),
                set,
            };
            cached.buffers[..buffers.len()].copy_from_slice(buffers);
            if self.recent.capacity() == 0 {
                self.recent.reserve_exact(CACHED_SETS);
            }
            self.recent.push(cached);
        }
        Ok(set)
    }

    /// A set for `kernel` pointing at `buffers` that no other launch shares: one of
    /// `free` (sets of the same layout whose last users have run) rewritten, else a new
    /// one, never one of the cached sets. What an update of a slot's launch takes, so
    /// the set can go back to `free` once the secondary it was recorded in retires.
    pub(crate) fn owned(
        &mut self,
        gpu: &Gpu,
        per_pool: u32,
        free: &mut Vec<(vk::DescriptorSetLayout, vk::DescriptorSet)>,
        kernel: &KernelObjects,
        buffers: &[(vk::Buffer, u64, u64)],
    ) -> Result<vk::DescriptorSet, ServerError> {
        if buffers.len() > raw::MAX_BINDINGS {
            return Err(ServerError::invalid(
                "kernel bindings",
                buffers.len(),
                format!(
                    "a descriptor set binds at most {} buffers",
                    raw::MAX_BINDINGS
                ),
            ));
        }
        if let Some(at) = free.iter().position(|(l, _)| *l == kernel.set_layout) {
            let (_, set) = free.swap_remove(at);
            raw::write_descriptor_set(gpu, set, buffers);
            return Ok(set);
        }
        self.fresh(gpu, per_pool, None, kernel, buffers)
    }

    /// A newly written set (see [`set`](Self::set)).
    fn fresh(
        &mut self,
        gpu: &Gpu,
        per_pool: u32,
        spare: Option<&mut Vec<vk::DescriptorPool>>,
        kernel: &KernelObjects,
        buffers: &[(vk::Buffer, u64, u64)],
    ) -> Result<vk::DescriptorSet, ServerError> {
        if let Some(&pool) = self.pools.last()
            && self.used < per_pool
            && let Some(set) = raw::descriptor_set(gpu, pool, kernel, buffers)?
        {
            self.used += 1;
            return Ok(set);
        }
        let pool = match spare.and_then(Vec::pop) {
            Some(pool) => pool,
            None => raw::descriptor_pool(gpu, per_pool, BUFFERS_PER_SET)?,
        };
        self.pools.push(pool);
        self.used = 0;
        let set = raw::descriptor_set(gpu, pool, kernel, buffers)?.ok_or_else(|| {
            ServerError::invalid(
                "kernel bindings",
                buffers.len(),
                "a fresh descriptor pool could not hold one set",
            )
        })?;
        self.used = 1;
        Ok(set)
    }

    /// The pools, handed over (to the batch in flight that uses their sets); `empty`, an
    /// emptied list handed back by an earlier batch, holds the next ones, so a steady
    /// stream of batches allocates no list.
    pub(crate) fn take(&mut self, mut empty: Vec<vk::DescriptorPool>) -> Vec<vk::DescriptorPool> {
        self.used = 0;
        self.recent.clear();
        empty.clear();
        std::mem::replace(&mut self.pools, empty)
    }

    /// The pools, still held.
    pub(crate) fn pools(&self) -> &[vk::DescriptorPool] {
        &self.pools
    }
}
