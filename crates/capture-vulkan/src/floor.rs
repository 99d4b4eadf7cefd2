//! `Floor`: the benchmark's hand-written floor, the same work as the library's chain
//! benchmark done with no runtime in between. A chain of `kernels` dependent
//! [`Builtin::AddScalar`] dispatches (the library's own pipeline, info words and binding
//! layout, adding 1.0) over `elements` floats ping-ponging between buffers A and B
//! (dispatch `i` reads A and writes B when `i` is even, the other way when odd), then a
//! read-back of all of A.
//!
//! - **Eager**: each pass records the dispatches (the pipeline bound once per command
//!   buffer; bind set, dispatch, a shader-write → shader-read/write barrier between
//!   dispatches) and the end of the
//!   pass into primary command buffers, submitting one every
//!   [`Floor::set_submit_every`] dispatches (by default the whole pass in one), then
//!   waits on a timeline semaphore for the last and reads A. Which cadence is fastest
//!   depends on the driver: on lavapipe, submitting as it goes lets the queue thread run
//!   the first dispatches while the rest are recorded, so `capture bench` measures each
//!   of [`Floor::cadences`] and keeps the fastest.
//! - **Replay**: the same commands recorded once, at [`Floor::new`], into another primary;
//!   each pass submits it, waits and reads A.
//!
//! Its own instance and device, opened through the same device selection as
//! [`crate::VulkanBackend`] (so [`VulkanOptions::device`] names the same device), and the
//! same memory choice: A and B in memory the host maps where [`crate::MemoryChoice`] maps
//! pages (a barrier to host reads ends the pass, then A is copied out of the mapping),
//! else device-local A and B with a host-visible read-back buffer (a barrier to transfer
//! reads, a copy of A, a barrier to host reads; invalidated when not coherent). The info
//! words live with the pages, as the library's do. Two descriptor sets (A → B, B → A)
//! are written once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ash::vk;
use capture_core::{Builtin, ServerError};

use crate::driver::ValidationLog;
use crate::error::Unavailable;
use crate::kernels::{self, VulkanKernel, VulkanKernelSource};
use crate::memory::{self, MemoryChoice};
use crate::options::VulkanOptions;
use crate::raw::{self, Gpu, Open, Page};

/// Elements per workgroup the floor dispatches: `ceil(elements / 256)` workgroups, the
/// grid the benchmark's library launches use (the builtin's workgroups are 64 threads
/// with a grid-stride loop, so each thread covers up to 4 elements).
pub const FLOOR_ELEMENTS_PER_WORKGROUP: u64 = 256;

/// The add-one chain's scalar.
const ONE: f32 = 1.0;

/// Dispatches per submission worth trying, besides the whole pass in one:
/// [`Floor::cadences`].
pub const FLOOR_CADENCES: [usize; 3] = [256, 64, 16];

/// What went wrong making or running a [`Floor`].
#[derive(Debug, thiserror::Error)]
pub enum FloorError {
    /// Vulkan (or the device asked for) cannot be used here.
    #[error(transparent)]
    Unavailable(#[from] Unavailable),
    /// A step of the floor failed.
    #[error("the Vulkan floor failed {step}: {source}")]
    Failed {
        /// What the floor was doing.
        step: &'static str,
        /// Why it failed.
        #[source]
        source: ServerError,
    },
}

/// A `map_err` for `step`.
fn at(step: &'static str) -> impl Fn(ServerError) -> FloorError {
    move |source| FloorError::Failed { step, source }
}

/// One pass's host times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FloorPass {
    /// From the start of the pass through its submission (eager: resetting and recording
    /// the command buffer too).
    pub enqueue: Duration,
    /// From the start of the pass through the wait and the read-back of A.
    pub total: Duration,
}

/// The floor: its own device, pipeline, buffers, sets, command buffers and timeline.
pub struct Floor {
    gpu: Arc<Gpu>,
    choice: MemoryChoice,
    elements: u64,
    kernels: usize,
    grid: [u32; 3],
    kernel: Option<VulkanKernel>,
    a: Option<Page>,
    b: Option<Page>,
    info: Option<Page>,
    /// Staged memory only: where `reset` writes A's values and the info words.
    upload: Option<Page>,
    /// Staged memory only: where a pass copies A to be read.
    readback: Option<Page>,
    sets_pool: vk::DescriptorPool,
    /// A → B (even dispatches) and B → A (odd ones).
    sets: [vk::DescriptorSet; 2],
    pool: vk::CommandPool,
    /// The eager pass's command buffers, one per submission (the first also records
    /// staged uploads).
    eager: Vec<vk::CommandBuffer>,
    /// Dispatches per eager submission, 1 to `kernels`.
    submit_every: usize,
    replay: vk::CommandBuffer,
    semaphore: vk::Semaphore,
    /// The timeline value of the last submission.
    submitted: u64,
    output: Vec<f32>,
}

impl std::fmt::Debug for Floor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Floor")
            .field("device", &self.gpu.name)
            .field("elements", &self.elements)
            .field("kernels", &self.kernels)
            .field("grid", &self.grid)
            .field("memory", &self.choice)
            .field("submit_every", &self.submit_every)
            .finish()
    }
}

impl Floor {
    /// Opens the device `options` selects (as [`crate::VulkanBackend::new`] would; its
    /// `validation`, `loader`, `device`, `memory` and `max_allocations` apply), builds the
    /// [`Builtin::AddScalar`] pipeline, buffers A and B of `elements` floats (A zeroed, B
    /// zeroed), the info words, two descriptor sets and the replay command buffer of
    /// `kernels` dispatches.
    ///
    /// # Errors
    ///
    /// [`FloorError::Unavailable`] when Vulkan or the device cannot be used;
    /// [`FloorError::Failed`] naming the step otherwise: `kernels` zero or odd (the chain
    /// must end in A), `elements` zero or past the device's storage-buffer range or
    /// workgroup count, or a failed Vulkan call. Whatever was made is destroyed.
    pub fn new(options: &VulkanOptions, elements: u64, kernels: usize) -> Result<Self, FloorError> {
        let invalid = |what: &'static str, value: String, why: String| FloorError::Failed {
            step: "checking its shape",
            source: ServerError::invalid(what, value, why),
        };
        if kernels == 0 || kernels % 2 == 1 {
            return Err(invalid(
                "kernel count",
                kernels.to_string(),
                "the chain takes a positive even number of kernels, so it ends in A".into(),
            ));
        }
        let gpu = Gpu::open(Open {
            validation: options.validation,
            loader: options.loader.clone(),
            max_allocations: options.max_allocations,
            device: options.device.clone(),
        })?;
        let choice = memory::choose(&gpu.memory, options.memory)
            .map_err(|why| crate::error::unavailable(format!("{}: {why}", gpu.name)))?;
        let bytes = elements.saturating_mul(4);
        let range = u64::from(gpu.limits.max_storage_buffer_range);
        if elements == 0 || bytes > range {
            return Err(invalid(
                "element count",
                elements.to_string(),
                format!("a buffer holds 1 to {} floats on this device", range / 4),
            ));
        }
        let groups = elements.div_ceil(FLOOR_ELEMENTS_PER_WORKGROUP);
        let most = gpu.limits.max_compute_work_group_count[0];
        if groups > u64::from(most) {
            return Err(invalid(
                "element count",
                elements.to_string(),
                format!("{groups} workgroups are needed, the device dispatches at most {most}"),
            ));
        }
        let mut floor = Floor {
            gpu,
            choice,
            elements,
            kernels,
            grid: [groups as u32, 1, 1],
            kernel: None,
            a: None,
            b: None,
            info: None,
            upload: None,
            readback: None,
            sets_pool: vk::DescriptorPool::null(),
            sets: [vk::DescriptorSet::null(); 2],
            pool: vk::CommandPool::null(),
            eager: Vec::new(),
            submit_every: kernels,
            replay: vk::CommandBuffer::null(),
            semaphore: vk::Semaphore::null(),
            submitted: 0,
            output: vec![0.0; elements as usize],
        };
        // From here an error drops `floor`, which destroys what was made.
        floor.build()?;
        floor.reset(&vec![0.0; elements as usize])?;
        Ok(floor)
    }

    /// Makes every object; on an error, `Drop` destroys those made.
    fn build(&mut self) -> Result<(), FloorError> {
        let gpu = Arc::clone(&self.gpu);
        let bytes = self.elements * 4;
        let info_bytes = (Builtin::INFO_WORDS * 8) as u64;
        let source = VulkanKernelSource::builtin(Builtin::AddScalar);
        let kernel = kernels::load(&gpu, &source).map_err(at("building its pipeline"))?;
        let kernel = self.kernel.insert(kernel);
        let pages = self.choice.pages;
        let a = raw::create_page(&gpu, bytes, &pages).map_err(at("allocating buffer A"))?;
        let a = self.a.insert(a).buffer;
        let b = raw::create_page(&gpu, bytes, &pages).map_err(at("allocating buffer B"))?;
        let b = self.b.insert(b).buffer;
        let info =
            raw::create_page(&gpu, info_bytes, &pages).map_err(at("allocating the info words"))?;
        let info = self.info.insert(info).buffer;
        if self.choice.staged() {
            let upload = raw::create_page(&gpu, bytes + info_bytes, &self.choice.upload)
                .map_err(at("allocating upload staging"))?;
            self.upload = Some(upload);
            let readback = raw::create_page(&gpu, bytes, &self.choice.readback)
                .map_err(at("allocating read-back staging"))?;
            self.readback = Some(readback);
        }
        self.sets_pool = raw::descriptor_pool(&gpu, 2, 3).map_err(at("creating its set pool"))?;
        for (i, (from, to)) in [(a, b), (b, a)].into_iter().enumerate() {
            let buffers = [(from, 0, bytes), (to, 0, bytes), (info, 0, info_bytes)];
            self.sets[i] = raw::descriptor_set(&gpu, self.sets_pool, &kernel.objects, &buffers)
                .map_err(at("writing its descriptor sets"))?
                .ok_or_else(|| FloorError::Failed {
                    step: "writing its descriptor sets",
                    source: ServerError::graph_state(
                        "vkAllocateDescriptorSets",
                        "the pool is full",
                    ),
                })?;
        }
        self.semaphore = raw::timeline(&gpu).map_err(at("creating its timeline semaphore"))?;
        self.pool = raw::command_pool(&gpu).map_err(at("creating its command pool"))?;
        let primary = vk::CommandBufferLevel::PRIMARY;
        self.eager_buffers(1)?;
        self.replay = raw::command_buffer(&gpu, self.pool, primary)
            .map_err(at("allocating the replay command buffer"))?;
        raw::begin_reusable(&gpu, self.replay).map_err(at("recording the replay pass"))?;
        self.record(self.replay, 0..self.kernels);
        raw::end(&gpu, self.replay).map_err(at("recording the replay pass"))
    }

    /// Allocates eager command buffers until there are `count`.
    fn eager_buffers(&mut self, count: usize) -> Result<(), FloorError> {
        while self.eager.len() < count {
            let cmd = raw::command_buffer(&self.gpu, self.pool, vk::CommandBufferLevel::PRIMARY)
                .map_err(at("allocating an eager command buffer"))?;
            self.eager.push(cmd);
        }
        Ok(())
    }

    /// Submits an eager pass every `dispatches` dispatches from now on (at least 1; the
    /// whole pass in one from [`Floor::kernels`] up), allocating the command buffers
    /// that takes now, so no pass pays for them.
    ///
    /// # Errors
    ///
    /// [`FloorError::Failed`] for zero dispatches, or when a command buffer cannot be
    /// allocated (the cadence is then unchanged).
    pub fn set_submit_every(&mut self, dispatches: usize) -> Result<(), FloorError> {
        if dispatches == 0 {
            return Err(FloorError::Failed {
                step: "setting its submission cadence",
                source: ServerError::invalid(
                    "dispatches per submission",
                    0,
                    "a submission holds at least one dispatch",
                ),
            });
        }
        let every = dispatches.min(self.kernels);
        self.eager_buffers(self.kernels.div_ceil(every))?;
        self.submit_every = every;
        Ok(())
    }

    /// Dispatches per eager submission (equal to [`Floor::kernels`]: the whole pass in
    /// one).
    pub fn submit_every(&self) -> usize {
        self.submit_every
    }

    /// The cadences worth measuring for this chain, fastest unknown: the whole pass in
    /// one submission, then each of [`FLOOR_CADENCES`] shorter than the pass.
    pub fn cadences(&self) -> Vec<usize> {
        let mut all = vec![self.kernels];
        all.extend(FLOOR_CADENCES.iter().filter(|&&c| c < self.kernels));
        all
    }

    /// Records dispatches `range` of a pass into `cmd` (recording), and when the range
    /// ends the chain, what makes A readable by the host.
    fn record(&self, cmd: vk::CommandBuffer, range: std::ops::Range<usize>) {
        let gpu = &*self.gpu;
        let kernel = &self.kernel.as_ref().expect("built").objects;
        let shader_write = (
            vk::PipelineStageFlags::COMPUTE_SHADER,
            vk::AccessFlags::SHADER_WRITE,
        );
        let host_read = (vk::PipelineStageFlags::HOST, vk::AccessFlags::HOST_READ);
        let ends = range.end == self.kernels;
        let first = range.start;
        for i in range {
            if i > 0 {
                // Dispatch i reads what i - 1 wrote (read after write) and writes what it
                // read (write after read: covered by the execution dependency). A barrier
                // covers earlier submissions to the queue too, so a pass split into
                // several submissions needs nothing more.
                raw::memory_barrier(
                    gpu,
                    cmd,
                    shader_write,
                    (
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                        vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE,
                    ),
                );
            }
            // One pipeline throughout: bound once per command buffer.
            let bind = i == first;
            raw::dispatch(gpu, cmd, kernel, bind, self.sets[i % 2], &[], self.grid);
        }
        if !ends {
            return;
        }
        match (&self.a, &self.readback) {
            (Some(a), Some(readback)) => {
                raw::memory_barrier(
                    gpu,
                    cmd,
                    shader_write,
                    (
                        vk::PipelineStageFlags::TRANSFER,
                        vk::AccessFlags::TRANSFER_READ,
                    ),
                );
                raw::copy(
                    gpu,
                    cmd,
                    (a.buffer, 0),
                    (readback.buffer, 0),
                    self.elements * 4,
                );
                raw::memory_barrier(
                    gpu,
                    cmd,
                    (
                        vk::PipelineStageFlags::TRANSFER,
                        vk::AccessFlags::TRANSFER_WRITE,
                    ),
                    host_read,
                );
            }
            _ => raw::memory_barrier(gpu, cmd, shader_write, host_read),
        }
    }

    /// Writes `values` into A and zeros into B, for a pass to start from (and the info
    /// words again: `[elements, bits of 1.0]`, as the library feeds them).
    ///
    /// # Errors
    ///
    /// [`FloorError::Failed`] when `values` does not hold exactly `elements` floats, or,
    /// with staged memory, when the upload's Vulkan calls fail.
    pub fn reset(&mut self, values: &[f32]) -> Result<(), FloorError> {
        if values.len() as u64 != self.elements {
            return Err(FloorError::Failed {
                step: "resetting its buffers",
                source: ServerError::invalid(
                    "values",
                    format!("{} floats", values.len()),
                    format!("the floor's buffers hold {} floats", self.elements),
                ),
            });
        }
        let info: Vec<u8> = Builtin::AddScalar
            .info(self.elements, ONE)
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let (Some(a), Some(b), Some(info_page)) = (&self.a, &self.b, &self.info) else {
            unreachable!("reset runs on a built floor");
        };
        match (a.mapped, b.mapped, info_page.mapped, &self.upload) {
            (Some(a), Some(b), Some(at_info), _) => {
                // Host writes before the next submission are visible to it (the host
                // write ordering guarantee of vkQueueSubmit); the last pass was waited
                // for.
                raw::write_floats(a, values);
                raw::write_floats(b, &vec![0.0; values.len()]);
                raw::write_mapped(at_info, &info);
                Ok(())
            }
            (_, _, _, Some(upload)) => {
                let (buffer, mapped) = (upload.buffer, upload.mapped);
                self.upload(buffer, mapped, values, &info)
            }
            _ => unreachable!("pages are mapped or staged"),
        }
    }

    /// Staged memory: copies `values` and `info` through `upload` into A and the info
    /// words, fills B with zeros, and waits.
    fn upload(
        &mut self,
        upload: vk::Buffer,
        mapped: Option<usize>,
        values: &[f32],
        info: &[u8],
    ) -> Result<(), FloorError> {
        let gpu = Arc::clone(&self.gpu);
        let gpu = &*gpu;
        let step = "uploading its buffers";
        let at_upload = mapped.expect("upload staging is mapped host-visible memory");
        let bytes = self.elements * 4;
        raw::write_floats(at_upload, values);
        raw::write_mapped(at_upload + bytes as usize, info);
        let (Some(a), Some(b), Some(info_page)) = (&self.a, &self.b, &self.info) else {
            unreachable!("reset runs on a built floor");
        };
        let cmd = self.eager[0];
        raw::reset_command_buffer(gpu, cmd).map_err(at(step))?;
        raw::begin_primary(gpu, cmd).map_err(at(step))?;
        raw::copy(gpu, cmd, (upload, 0), (a.buffer, 0), bytes);
        raw::copy(
            gpu,
            cmd,
            (upload, bytes),
            (info_page.buffer, 0),
            info.len() as u64,
        );
        raw::fill(gpu, cmd, b.buffer, bytes, 0);
        raw::memory_barrier(
            gpu,
            cmd,
            (
                vk::PipelineStageFlags::TRANSFER,
                vk::AccessFlags::TRANSFER_WRITE,
            ),
            (
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE,
            ),
        );
        raw::end(gpu, cmd).map_err(at(step))?;
        self.submit_and_wait(cmd, step)
    }

    /// Submits `cmd`, signalling the next timeline value, and waits for it.
    fn submit_and_wait(
        &mut self,
        cmd: vk::CommandBuffer,
        step: &'static str,
    ) -> Result<(), FloorError> {
        let value = self.submit(cmd, step)?;
        self.wait(value, step)
    }

    /// Submits `cmd`, signalling the next timeline value, and returns that value.
    fn submit(&mut self, cmd: vk::CommandBuffer, step: &'static str) -> Result<u64, FloorError> {
        let value = self.submitted + 1;
        raw::submit(&self.gpu, cmd, self.semaphore, value, &[]).map_err(at(step))?;
        self.submitted = value;
        Ok(value)
    }

    /// Waits for timeline `value`.
    fn wait(&self, value: u64, step: &'static str) -> Result<(), FloorError> {
        raw::wait(&self.gpu, self.semaphore, value).map_err(at(step))
    }

    /// The eager floor: records the chain and the end of the pass, submitting every
    /// [`Floor::submit_every`] dispatches (each submission's command buffer reset and
    /// recorded afresh), waits for the last submission and reads A back into
    /// [`Floor::output`].
    ///
    /// # Errors
    ///
    /// [`FloorError::Failed`] naming the failed step (a Vulkan call). A pass that fails
    /// after a submission waits for what it submitted before returning.
    pub fn eager_pass(&mut self) -> Result<FloorPass, FloorError> {
        let start = Instant::now();
        let step = "running an eager pass";
        let every = self.submit_every;
        let mut last = None;
        let mut failed = None;
        for (s, first) in (0..self.kernels).step_by(every).enumerate() {
            let cmd = self.eager[s];
            let range = first..(first + every).min(self.kernels);
            let submitted = raw::reset_command_buffer(&self.gpu, cmd)
                .and_then(|()| raw::begin_primary(&self.gpu, cmd))
                .map(|()| self.record(cmd, range))
                .and_then(|()| raw::end(&self.gpu, cmd))
                .map_err(at(step))
                .and_then(|()| self.submit(cmd, step));
            match submitted {
                Ok(value) => last = Some(value),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let enqueue = start.elapsed();
        let waited = last.map_or(Ok(()), |value| self.wait(value, step));
        if let Some(e) = failed {
            return Err(e);
        }
        waited?;
        self.read_a(step)?;
        Ok(FloorPass {
            enqueue,
            total: start.elapsed(),
        })
    }

    /// The replay floor: submits the command buffer recorded at [`Floor::new`], waits and
    /// reads A back into [`Floor::output`].
    ///
    /// # Errors
    ///
    /// [`FloorError::Failed`] naming the failed step (a Vulkan call).
    pub fn replay_pass(&mut self) -> Result<FloorPass, FloorError> {
        let start = Instant::now();
        self.finish_pass(start, self.replay, "running a replay pass")
    }

    /// Submits `cmd` (a recorded pass begun at `start`), waits and reads A.
    fn finish_pass(
        &mut self,
        start: Instant,
        cmd: vk::CommandBuffer,
        step: &'static str,
    ) -> Result<FloorPass, FloorError> {
        let value = self.submit(cmd, step)?;
        let enqueue = start.elapsed();
        self.wait(value, step)?;
        self.read_a(step)?;
        Ok(FloorPass {
            enqueue,
            total: start.elapsed(),
        })
    }

    /// Copies A (or its read-back copy) into `output`, once the pass ran.
    fn read_a(&mut self, step: &'static str) -> Result<(), FloorError> {
        let mapped = match (&self.readback, &self.a) {
            (Some(readback), _) => {
                if self.choice.readback.needs_invalidate() {
                    raw::invalidate(&self.gpu, readback).map_err(at(step))?;
                }
                readback.mapped
            }
            (None, Some(a)) => a.mapped,
            (None, None) => None,
        };
        let at_a = mapped.expect("A or its read-back buffer is mapped");
        raw::read_floats(at_a, &mut self.output);
        Ok(())
    }

    /// The last read-back of A (zeros before the first pass).
    pub fn output(&self) -> &[f32] {
        &self.output
    }

    /// The floats in each buffer.
    pub fn elements(&self) -> u64 {
        self.elements
    }

    /// The dispatches a pass runs.
    pub fn kernels(&self) -> usize {
        self.kernels
    }

    /// The workgroups of each dispatch: `[ceil(elements / 256), 1, 1]`.
    pub fn grid(&self) -> [u32; 3] {
        self.grid
    }

    /// The device's name.
    pub fn device_name(&self) -> &str {
        &self.gpu.name
    }

    /// The memory the floor's buffers live in (its `Display` says it in words).
    pub fn memory_choice(&self) -> MemoryChoice {
        self.choice
    }

    /// Whether the validation layer is enabled.
    pub fn validation_enabled(&self) -> bool {
        self.gpu.validation
    }

    /// The validation layer's warnings and errors since the last call.
    pub fn take_validation_messages(&self) -> Vec<String> {
        self.gpu.take_messages()
    }

    /// Test hook: the validation messages of this floor's device, readable after the
    /// floor is gone (the layer reports objects left alive when the device is destroyed).
    #[doc(hidden)]
    pub fn validation_log(&self) -> ValidationLog {
        ValidationLog(Arc::clone(&self.gpu.messages))
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        let gpu = Arc::clone(&self.gpu);
        // Nothing may be pending when its objects go.
        gpu.idle();
        for cmd in self.eager.drain(..).chain([self.replay]) {
            if cmd != vk::CommandBuffer::null() {
                raw::free_command_buffer(&gpu, self.pool, cmd);
            }
        }
        raw::destroy_command_pool(&gpu, self.pool);
        raw::destroy_semaphore(&gpu, self.semaphore);
        raw::destroy_descriptor_pool(&gpu, self.sets_pool);
        let pages = [
            self.a.take(),
            self.b.take(),
            self.info.take(),
            self.upload.take(),
            self.readback.take(),
        ];
        for page in pages.into_iter().flatten() {
            raw::destroy_page(&gpu, page);
        }
        // The pipeline goes with the kernel (which holds the device too).
        self.kernel = None;
    }
}
