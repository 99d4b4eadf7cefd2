//! [`Floor`] on Vulkan: the benchmark's hand-written floor, the same work as the
//! library's chain benchmark done by hand with ash, no runtime in between. A chain of
//! `kernels` dependent `add_scalar` dispatches (the builtin's own WGSL,
//! [`builtin_wgsl`], compiled by [`compile_wgsl`]; its binding layout and info words,
//! adding 1.0) over `elements` floats ping-ponging between buffers A and B (dispatch `i`
//! reads A and writes B when `i` is even, the other way when odd), then a read-back of
//! all of A.
//!
//! - **Eager**: each pass records the dispatches (the pipeline bound once per command
//!   buffer; bind set, dispatch, a shader-write → shader-read/write barrier between
//!   dispatches) and the end of the pass into primary command buffers, submitting one
//!   every [`Floor::set_submit_every`] dispatches (by default the whole pass in one),
//!   then waits on a timeline semaphore for the last and reads A. Which cadence is
//!   fastest depends on the driver: on lavapipe, submitting as it goes lets the queue
//!   thread run the first dispatches while the rest are recorded, so `capture bench`
//!   measures each of [`Floor::cadences`] and keeps the fastest.
//! - **Replay**: the same commands recorded once, at [`Floor::new`], into another
//!   primary; each pass submits it, waits and reads A.
//!
//! It runs on the device of the [`VulkanBackend`] it is given, through what the backend
//! offers any caller for objects of its own (the device, the queue under its lock, the
//! queue's family, the memory properties): the same device and queue as the library,
//! and memory of the same placement as the backend's [`MemoryChoice`]: A and B mapped
//! where the backend maps pages (a barrier to host reads ends the pass, then A is
//! copied out of the mapping), else device-local with a host-visible read-back buffer
//! (a barrier to transfer reads, a copy of A, a barrier to host reads; invalidated when
//! not coherent). The info words live with the pages, as the library's do. Two
//! descriptor sets (A → B, B → A) are written once. The shapes it takes are those every
//! Vulkan device runs (a storage buffer of up to 2^27 bytes, up to 65,535 workgroups).
//!
//! [`MemoryChoice`]: capture_graphs::vulkan::MemoryChoice

use std::time::Instant;

use capture_graphs::Builtin;
use capture_graphs::vulkan::ash::vk;
use capture_graphs::vulkan::{PagePlacement, VulkanBackend, builtin_wgsl, compile_wgsl};

use super::{FloorError, FloorPass};

mod raw;

/// Elements per workgroup the floor dispatches: `ceil(elements / 256)` workgroups, the
/// grid the benchmark's library launches use (the builtin's workgroups are 64 threads
/// with a grid-stride loop, so each thread covers up to 4 elements).
pub const ELEMENTS_PER_WORKGROUP: u64 = 256;

/// Dispatches per submission worth trying, besides the whole pass in one:
/// [`Floor::cadences`].
pub const CADENCES: [usize; 3] = [256, 64, 16];

/// The add-one chain's scalar.
const ONE: f32 = 1.0;

/// The largest storage-buffer range every Vulkan device offers (`maxStorageBufferRange`).
const RANGE: u64 = 1 << 27;

/// The most workgroups every Vulkan device dispatches (`maxComputeWorkGroupCount[0]`).
const GROUPS: u64 = 65_535;

const DL: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::DEVICE_LOCAL;
const HV: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::HOST_VISIBLE;
const HC: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::HOST_COHERENT;
const CACHED: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::HOST_CACHED;
const NONE: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::empty();

/// A failed Vulkan call during `step`.
fn at(step: &'static str) -> impl Fn(raw::Call) -> FloorError {
    move |call| FloorError::Failed {
        step,
        why: call.to_string(),
    }
}

/// A buffer with its memory, mapped where it is host-visible.
#[derive(Clone, Copy, Debug)]
struct Page {
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    mapped: Option<usize>,
    /// Whether host reads need an invalidate first.
    invalidate: bool,
}

/// Memory types in order of preference: each `(must have, must not have)`.
type Wants<'a> = &'a [(vk::MemoryPropertyFlags, vk::MemoryPropertyFlags)];

/// The first memory type `bits` allows that has one want's flags, wants in order.
fn memory_type(
    props: &vk::PhysicalDeviceMemoryProperties,
    bits: u32,
    wants: Wants<'_>,
) -> Option<(u32, vk::MemoryPropertyFlags)> {
    let count = (props.memory_type_count as usize).min(props.memory_types.len());
    wants.iter().find_map(|&(with, without)| {
        (0..count).find_map(|i| {
            let flags = props.memory_types[i].property_flags;
            (bits & (1 << i) != 0 && flags.contains(with) && !flags.intersects(without))
                .then_some((i as u32, flags))
        })
    })
}

/// The floor: its pipeline, buffers, sets, command buffers and timeline, on a backend's
/// device.
pub struct Floor {
    backend: VulkanBackend,
    placement: PagePlacement,
    elements: u64,
    kernels: usize,
    grid: [u32; 3],
    pipeline: Option<raw::Pipeline>,
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
            .field("device", &self.backend.device_name())
            .field("elements", &self.elements)
            .field("kernels", &self.kernels)
            .field("grid", &self.grid)
            .field("placement", &self.placement)
            .field("submit_every", &self.submit_every)
            .finish()
    }
}

impl Floor {
    /// On `backend`'s device: builds the `add_scalar` pipeline, buffers A and B of
    /// `elements` floats (both zeroed), the info words, two descriptor sets and the
    /// replay command buffer of `kernels` dispatches.
    ///
    /// # Errors
    ///
    /// [`FloorError::Failed`] naming the step: `kernels` zero or odd (the chain must end
    /// in A), `elements` zero or past what every Vulkan device runs, no memory type for
    /// the backend's placement, or a failed Vulkan call. Whatever was made is destroyed.
    pub fn new(backend: &VulkanBackend, elements: u64, kernels: usize) -> Result<Self, FloorError> {
        let invalid = |why: String| FloorError::Failed {
            step: "checking its shape",
            why,
        };
        if kernels == 0 || kernels % 2 == 1 {
            return Err(invalid(format!(
                "kernel count {kernels}: the chain takes a positive even number of kernels, \
                 so it ends in A"
            )));
        }
        let groups = elements.div_ceil(ELEMENTS_PER_WORKGROUP);
        if elements == 0 || elements.saturating_mul(4) > RANGE || groups > GROUPS {
            return Err(invalid(format!(
                "element count {elements}: a buffer holds 1 to {} floats on every device",
                RANGE / 4
            )));
        }
        let mut floor = Floor {
            backend: backend.clone(),
            placement: backend.memory_choice().placement(),
            elements,
            kernels,
            grid: [groups as u32, 1, 1],
            pipeline: None,
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
        let backend = self.backend.clone();
        let device = backend.ash_device();
        let bytes = self.elements * 4;
        let info_bytes = (Builtin::INFO_WORDS * 8) as u64;
        let name = Builtin::AddScalar.name();
        let words = compile_wgsl(name, builtin_wgsl(Builtin::AddScalar)).map_err(|e| {
            FloorError::Failed {
                step: "compiling its kernel",
                why: e.to_string(),
            }
        })?;
        let pipeline =
            raw::pipeline(device, &words, c"main", 3).map_err(at("building its pipeline"))?;
        let pipeline = *self.pipeline.insert(pipeline);
        let storage = vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST;
        let pages: Wants<'_> = match self.placement {
            PagePlacement::DeviceMapped => &[(DL | HV | HC, NONE)],
            PagePlacement::HostMapped => &[(HV | HC, DL), (HV | HC, NONE)],
            PagePlacement::DeviceStaged => &[(DL, HV), (DL, NONE)],
        };
        let staged = self.placement == PagePlacement::DeviceStaged;
        let a = self.page(bytes, storage, pages, !staged, "allocating buffer A")?;
        let a = self.a.insert(a).buffer;
        let b = self.page(bytes, storage, pages, !staged, "allocating buffer B")?;
        let b = self.b.insert(b).buffer;
        let info = self.page(
            info_bytes,
            storage,
            pages,
            !staged,
            "allocating the info words",
        )?;
        let info = self.info.insert(info).buffer;
        if staged {
            let upload = &[(HV | HC, DL), (HV | HC, NONE)];
            let src = vk::BufferUsageFlags::TRANSFER_SRC;
            let upload = self.page(
                bytes + info_bytes,
                src,
                upload,
                true,
                "allocating upload staging",
            )?;
            self.upload = Some(upload);
            let readback = &[
                (HV | HC | CACHED, NONE),
                (HV | CACHED, NONE),
                (HV | HC, NONE),
            ];
            let dst = vk::BufferUsageFlags::TRANSFER_DST;
            let readback = self.page(bytes, dst, readback, true, "allocating read-back staging")?;
            self.readback = Some(readback);
        }
        self.sets_pool = raw::descriptor_pool(device, 2, 3).map_err(at("creating its set pool"))?;
        for (i, (from, to)) in [(a, b), (b, a)].into_iter().enumerate() {
            let buffers = [(from, bytes), (to, bytes), (info, info_bytes)];
            self.sets[i] =
                raw::descriptor_set(device, self.sets_pool, pipeline.set_layout, &buffers)
                    .map_err(at("writing its descriptor sets"))?;
        }
        self.semaphore = raw::timeline(device).map_err(at("creating its timeline semaphore"))?;
        self.pool = raw::command_pool(device, backend.queue_family())
            .map_err(at("creating its command pool"))?;
        self.eager_buffers(1)?;
        self.replay = raw::command_buffer(device, self.pool)
            .map_err(at("allocating the replay command buffer"))?;
        raw::begin(device, self.replay, false).map_err(at("recording the replay pass"))?;
        self.record(self.replay, 0..self.kernels);
        raw::end(device, self.replay).map_err(at("recording the replay pass"))
    }

    /// A buffer of `bytes` for `usage` in memory of the first of `wants` it allows,
    /// mapped when `map`.
    fn page(
        &self,
        bytes: u64,
        usage: vk::BufferUsageFlags,
        wants: Wants<'_>,
        map: bool,
        step: &'static str,
    ) -> Result<Page, FloorError> {
        let device = self.backend.ash_device();
        let (buffer, needs) = raw::buffer(device, bytes, usage).map_err(at(step))?;
        let props = self.backend.memory_properties();
        let Some((index, flags)) = memory_type(&props, needs.memory_type_bits, wants) else {
            raw::destroy_buffer(device, buffer, vk::DeviceMemory::null());
            return Err(FloorError::Failed {
                step,
                why: format!("no memory type fits {:?} pages", self.placement),
            });
        };
        let memory = match raw::bind_memory(device, buffer, needs, index) {
            Ok(memory) => memory,
            Err(e) => {
                raw::destroy_buffer(device, buffer, vk::DeviceMemory::null());
                return Err(at(step)(e));
            }
        };
        let mapped = if map {
            match raw::map(device, memory) {
                Ok(at_) => Some(at_),
                Err(e) => {
                    raw::destroy_buffer(device, buffer, memory);
                    return Err(at(step)(e));
                }
            }
        } else {
            None
        };
        Ok(Page {
            buffer,
            memory,
            mapped,
            invalidate: map && !flags.contains(HC),
        })
    }

    /// Allocates eager command buffers until there are `count`.
    fn eager_buffers(&mut self, count: usize) -> Result<(), FloorError> {
        while self.eager.len() < count {
            let cmd = raw::command_buffer(self.backend.ash_device(), self.pool)
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
                why: "0 dispatches per submission: a submission holds at least one dispatch".into(),
            });
        }
        let every = dispatches.min(self.kernels);
        self.eager_buffers(self.kernels.div_ceil(every))?;
        self.submit_every = every;
        Ok(())
    }

    /// Dispatches per eager submission ([`Floor::kernels`]: the whole pass in one, until
    /// [`Floor::set_submit_every`] says otherwise).
    pub fn submit_every(&self) -> usize {
        self.submit_every
    }

    /// The cadences worth measuring for this chain, fastest unknown: the whole pass in
    /// one submission, then each of [`CADENCES`] shorter than the pass.
    pub fn cadences(&self) -> Vec<usize> {
        let mut all = vec![self.kernels];
        all.extend(CADENCES.iter().filter(|&&c| c < self.kernels));
        all
    }

    /// Records dispatches `range` of a pass into `cmd` (recording), and when the range
    /// ends the chain, what makes A readable by the host.
    fn record(&self, cmd: vk::CommandBuffer, range: std::ops::Range<usize>) {
        let device = self.backend.ash_device();
        let pipeline = self.pipeline.as_ref().expect("built");
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
                    device,
                    cmd,
                    shader_write,
                    (
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                        vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE,
                    ),
                );
            }
            // One pipeline throughout: bound once per command buffer.
            if i == first {
                raw::bind_pipeline(device, cmd, pipeline);
            }
            raw::dispatch(device, cmd, pipeline, self.sets[i % 2], self.grid);
        }
        if !ends {
            return;
        }
        match (&self.a, &self.readback) {
            (Some(a), Some(readback)) => {
                let transfer_read = (
                    vk::PipelineStageFlags::TRANSFER,
                    vk::AccessFlags::TRANSFER_READ,
                );
                raw::memory_barrier(device, cmd, shader_write, transfer_read);
                raw::copy(
                    device,
                    cmd,
                    (a.buffer, 0),
                    readback.buffer,
                    self.elements * 4,
                );
                let transfer_write = (
                    vk::PipelineStageFlags::TRANSFER,
                    vk::AccessFlags::TRANSFER_WRITE,
                );
                raw::memory_barrier(device, cmd, transfer_write, host_read);
            }
            _ => raw::memory_barrier(device, cmd, shader_write, host_read),
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
                why: format!(
                    "{} floats given, the floor's buffers hold {} floats",
                    values.len(),
                    self.elements
                ),
            });
        }
        let info: Vec<u8> = Builtin::AddScalar
            .info(self.elements, ONE)
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let floats: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let (Some(a), Some(b), Some(info_page)) = (self.a, self.b, self.info) else {
            unreachable!("reset runs on a built floor");
        };
        match (a.mapped, b.mapped, info_page.mapped, self.upload) {
            (Some(a), Some(b), Some(at_info), _) => {
                // Host writes before the next submission are visible to it (the host
                // write ordering guarantee of vkQueueSubmit); the last pass was waited
                // for.
                raw::write_mapped(a, &floats);
                raw::write_mapped(b, &vec![0; floats.len()]);
                raw::write_mapped(at_info, &info);
                Ok(())
            }
            (_, _, _, Some(upload)) => self.upload(upload, &floats, &info),
            _ => unreachable!("pages are mapped or staged"),
        }
    }

    /// Staged memory: copies `floats` and `info` through `upload` into A and the info
    /// words, fills B with zeros, and waits.
    fn upload(&mut self, upload: Page, floats: &[u8], info: &[u8]) -> Result<(), FloorError> {
        let backend = self.backend.clone();
        let device = backend.ash_device();
        let step = "uploading its buffers";
        let at_upload = upload
            .mapped
            .expect("upload staging is mapped host-visible memory");
        let bytes = self.elements * 4;
        raw::write_mapped(at_upload, floats);
        raw::write_mapped(at_upload + bytes as usize, info);
        let (Some(a), Some(b), Some(info_page)) = (self.a, self.b, self.info) else {
            unreachable!("reset runs on a built floor");
        };
        let cmd = self.eager[0];
        raw::begin(device, cmd, true).map_err(at(step))?;
        raw::copy(device, cmd, (upload.buffer, 0), a.buffer, bytes);
        raw::copy(
            device,
            cmd,
            (upload.buffer, bytes),
            info_page.buffer,
            info.len() as u64,
        );
        raw::fill_zeros(device, cmd, b.buffer, bytes);
        raw::memory_barrier(
            device,
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
        raw::end(device, cmd).map_err(at(step))?;
        let value = self.submit(cmd, step)?;
        self.wait(value, step)
    }

    /// Submits `cmd` under the backend's queue lock, signalling the next timeline value,
    /// and returns that value.
    fn submit(&mut self, cmd: vk::CommandBuffer, step: &'static str) -> Result<u64, FloorError> {
        let value = self.submitted + 1;
        let (device, semaphore) = (self.backend.ash_device(), self.semaphore);
        self.backend
            .with_queue(|queue| raw::submit(device, queue, cmd, semaphore, value))
            .map_err(at(step))?;
        self.submitted = value;
        Ok(value)
    }

    /// Waits for timeline `value`.
    fn wait(&self, value: u64, step: &'static str) -> Result<(), FloorError> {
        raw::wait(self.backend.ash_device(), self.semaphore, value).map_err(at(step))
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
        let backend = self.backend.clone();
        let device = backend.ash_device();
        let every = self.submit_every;
        let mut last = None;
        let mut failed = None;
        for (s, first) in (0..self.kernels).step_by(every).enumerate() {
            let cmd = self.eager[s];
            let range = first..(first + every).min(self.kernels);
            let submitted = raw::begin(device, cmd, true)
                .map(|()| self.record(cmd, range))
                .and_then(|()| raw::end(device, cmd))
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
        let step = "running a replay pass";
        let value = self.submit(self.replay, step)?;
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
        let page = match (self.readback, self.a) {
            (Some(readback), _) => readback,
            (None, Some(a)) => a,
            (None, None) => unreachable!("a built floor has A"),
        };
        if page.invalidate {
            raw::invalidate(self.backend.ash_device(), page.memory).map_err(at(step))?;
        }
        let at_a = page.mapped.expect("A or its read-back buffer is mapped");
        let mut bytes = vec![0u8; self.output.len() * 4];
        raw::read_mapped(at_a, &mut bytes);
        for (v, b) in self.output.iter_mut().zip(bytes.chunks_exact(4)) {
            *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        Ok(())
    }

    /// The last read-back of A (zeros before the first pass).
    pub fn output(&self) -> &[f32] {
        &self.output
    }

    /// The dispatches a pass runs.
    pub fn kernels(&self) -> usize {
        self.kernels
    }

    /// The workgroups of each dispatch: `[ceil(elements / 256), 1, 1]`.
    pub fn grid(&self) -> [u32; 3] {
        self.grid
    }

    /// Where its buffers live: the placement of the backend's memory choice.
    pub fn placement(&self) -> PagePlacement {
        self.placement
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        let backend = self.backend.clone();
        let device = backend.ash_device();
        // Nothing of the floor's may be pending when its objects go: its last submission
        // is the last value of its timeline.
        if self.submitted > 0 {
            let _ = raw::wait(device, self.semaphore, self.submitted);
        }
        // The command buffers go with their pool.
        raw::destroy_command_pool(device, self.pool);
        raw::destroy_semaphore(device, self.semaphore);
        raw::destroy_descriptor_pool(device, self.sets_pool);
        let pages = [
            self.a.take(),
            self.b.take(),
            self.info.take(),
            self.upload.take(),
            self.readback.take(),
        ];
        for page in pages.into_iter().flatten() {
            raw::destroy_buffer(device, page.buffer, page.memory);
        }
        if let Some(pipeline) = self.pipeline.take() {
            raw::destroy_pipeline(device, &pipeline);
        }
    }
}
