//! The Vulkan floor's FFI: every ash call the floor makes, on a device of a
//! [`VulkanBackend`](capture_graphs::vulkan::VulkanBackend) through the API the backend
//! offers for a caller's own objects (`ash_device`, `with_queue`, `queue_family`). Each
//! function takes handles and plain values and gives them back; every `unsafe` block
//! has a `// SAFETY:` line naming what makes it sound.

#![allow(unsafe_code)]

use std::ffi::CStr;

use capture_graphs::vulkan::ash::{self, vk};

/// A failed Vulkan call: its name and its code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Call {
    /// The entry point.
    pub(super) call: &'static str,
    /// What it returned.
    pub(super) code: vk::Result,
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} returned {}", self.call, self.code)
    }
}

/// A Vulkan call's result.
pub(super) type Result<T> = std::result::Result<T, Call>;

fn at<T>(call: &'static str, result: ash::prelude::VkResult<T>) -> Result<T> {
    result.map_err(|code| Call { call, code })
}

/// A buffer of `size` bytes for `usage`, and what memory it needs.
pub(super) fn buffer(
    device: &ash::Device,
    size: u64,
    usage: vk::BufferUsageFlags,
) -> Result<(vk::Buffer, vk::MemoryRequirements)> {
    let info = vk::BufferCreateInfo::default()
        .size(size)
        .usage(usage)
        .sharing_mode(vk::SharingMode::EXCLUSIVE);
    // SAFETY: `device` is live (its backend is held by the caller); `info` lives across
    // the call.
    let buffer = at("vkCreateBuffer", unsafe {
        device.create_buffer(&info, None)
    })?;
    // SAFETY: `buffer` was just created on `device`.
    let needs = unsafe { device.get_buffer_memory_requirements(buffer) };
    Ok((buffer, needs))
}

/// Memory of type `memory_type` for `buffer` (of `needs`), allocated and bound.
pub(super) fn bind_memory(
    device: &ash::Device,
    buffer: vk::Buffer,
    needs: vk::MemoryRequirements,
    memory_type: u32,
) -> Result<vk::DeviceMemory> {
    let info = vk::MemoryAllocateInfo::default()
        .allocation_size(needs.size)
        .memory_type_index(memory_type);
    // SAFETY: `device` is live; `memory_type` is one of its types that `needs` allows.
    let memory = at("vkAllocateMemory", unsafe {
        device.allocate_memory(&info, None)
    })?;
    // SAFETY: `buffer` has no memory bound yet; `memory` is as large as it needs, of a
    // type it allows, at offset 0 (aligned to anything).
    if let Err(e) = at("vkBindBufferMemory", unsafe {
        device.bind_buffer_memory(buffer, memory, 0)
    }) {
        // SAFETY: nothing uses `memory`: it was never bound.
        unsafe { device.free_memory(memory, None) };
        return Err(e);
    }
    Ok(memory)
}

/// Maps the whole of host-visible `memory`: the address of its first byte, valid until
/// the memory is freed.
pub(super) fn map(device: &ash::Device, memory: vk::DeviceMemory) -> Result<usize> {
    // SAFETY: `memory` is a live host-visible allocation of `device`, not yet mapped.
    let at_ = unsafe { device.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) };
    at("vkMapMemory", at_).map(|p| p as usize)
}

/// Makes the device's writes to mapped, non-coherent `memory` visible to host reads.
pub(super) fn invalidate(device: &ash::Device, memory: vk::DeviceMemory) -> Result<()> {
    let range = [vk::MappedMemoryRange::default()
        .memory(memory)
        .offset(0)
        .size(vk::WHOLE_SIZE)];
    // SAFETY: `memory` is live and mapped whole (so the range respects
    // nonCoherentAtomSize); the device's writes to it were waited for.
    at("vkInvalidateMappedMemoryRanges", unsafe {
        device.invalidate_mapped_memory_ranges(&range)
    })
}

/// Destroys `buffer` and frees `memory` (unmapping it).
pub(super) fn destroy_buffer(device: &ash::Device, buffer: vk::Buffer, memory: vk::DeviceMemory) {
    // SAFETY: the caller waited for every submission using them; null handles are
    // ignored by both calls.
    unsafe {
        device.destroy_buffer(buffer, None);
        device.free_memory(memory, None);
    }
}

/// Copies `bytes` to the mapping at `at`.
pub(super) fn write_mapped(at_: usize, bytes: &[u8]) {
    // SAFETY: `at_` is a live mapping (from `map`) of memory at least `bytes.len()` long,
    // which no submission the caller has not waited for reads or writes.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), at_ as *mut u8, bytes.len()) }
}

/// Copies `out.len()` bytes from the mapping at `at` into `out`.
pub(super) fn read_mapped(at_: usize, out: &mut [u8]) {
    // SAFETY: as for `write_mapped`; the device's writes were waited for (and made
    // visible).
    unsafe { std::ptr::copy_nonoverlapping(at_ as *const u8, out.as_mut_ptr(), out.len()) }
}

/// A compute pipeline over `bindings` storage buffers of set 0 (no push constants), and
/// what it was made from.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pipeline {
    pub(super) module: vk::ShaderModule,
    pub(super) set_layout: vk::DescriptorSetLayout,
    pub(super) layout: vk::PipelineLayout,
    pub(super) pipeline: vk::Pipeline,
}

/// The pipeline of SPIR-V `words`' entry point `entry`; on an error, whatever was made
/// is destroyed.
pub(super) fn pipeline(
    device: &ash::Device,
    words: &[u32],
    entry: &CStr,
    bindings: u32,
) -> Result<Pipeline> {
    let mut made = Pipeline {
        module: vk::ShaderModule::null(),
        set_layout: vk::DescriptorSetLayout::null(),
        layout: vk::PipelineLayout::null(),
        pipeline: vk::Pipeline::null(),
    };
    let built = (|| {
        let info = vk::ShaderModuleCreateInfo::default().code(words);
        // SAFETY: `device` is live; `words` is SPIR-V naga wrote and validated.
        made.module = at("vkCreateShaderModule", unsafe {
            device.create_shader_module(&info, None)
        })?;
        let slots: Vec<_> = (0..bindings)
            .map(|b| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&slots);
        // SAFETY: as above; `slots` lives across the call.
        made.set_layout = at("vkCreateDescriptorSetLayout", unsafe {
            device.create_descriptor_set_layout(&info, None)
        })?;
        let layouts = [made.set_layout];
        let info = vk::PipelineLayoutCreateInfo::default().set_layouts(&layouts);
        // SAFETY: as above; the set layout is live.
        made.layout = at("vkCreatePipelineLayout", unsafe {
            device.create_pipeline_layout(&info, None)
        })?;
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(made.module)
            .name(entry);
        let info = [vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(made.layout)];
        // SAFETY: as above; the module and layout are live, `entry` is NUL-terminated.
        made.pipeline =
            unsafe { device.create_compute_pipelines(vk::PipelineCache::null(), &info, None) }
                .map_err(|(_, code)| Call {
                    call: "vkCreateComputePipelines",
                    code,
                })?[0];
        Ok(())
    })();
    match built {
        Ok(()) => Ok(made),
        Err(e) => {
            destroy_pipeline(device, &made);
            Err(e)
        }
    }
}

/// Destroys what [`pipeline`] made (null handles are skipped by the driver).
pub(super) fn destroy_pipeline(device: &ash::Device, p: &Pipeline) {
    // SAFETY: every submission using the pipeline was waited for; each handle is null or
    // was made on `device`.
    unsafe {
        device.destroy_pipeline(p.pipeline, None);
        device.destroy_pipeline_layout(p.layout, None);
        device.destroy_descriptor_set_layout(p.set_layout, None);
        device.destroy_shader_module(p.module, None);
    }
}

/// A descriptor pool for `sets` sets of `buffers` storage buffers each.
pub(super) fn descriptor_pool(
    device: &ash::Device,
    sets: u32,
    buffers: u32,
) -> Result<vk::DescriptorPool> {
    let sizes = [vk::DescriptorPoolSize::default()
        .ty(vk::DescriptorType::STORAGE_BUFFER)
        .descriptor_count(sets * buffers)];
    let info = vk::DescriptorPoolCreateInfo::default()
        .max_sets(sets)
        .pool_sizes(&sizes);
    // SAFETY: `device` is live; `sizes` lives across the call.
    at("vkCreateDescriptorPool", unsafe {
        device.create_descriptor_pool(&info, None)
    })
}

/// Destroys `pool` and the sets allocated from it.
pub(super) fn destroy_descriptor_pool(device: &ash::Device, pool: vk::DescriptorPool) {
    // SAFETY: every submission using its sets was waited for; null is ignored.
    unsafe { device.destroy_descriptor_pool(pool, None) }
}

/// A set of `layout` from `pool`, its bindings `0..` written with `buffers` (whole
/// ranges of `(buffer, bytes)`).
pub(super) fn descriptor_set(
    device: &ash::Device,
    pool: vk::DescriptorPool,
    layout: vk::DescriptorSetLayout,
    buffers: &[(vk::Buffer, u64)],
) -> Result<vk::DescriptorSet> {
    let layouts = [layout];
    let info = vk::DescriptorSetAllocateInfo::default()
        .descriptor_pool(pool)
        .set_layouts(&layouts);
    // SAFETY: `pool` and `layout` are live objects of `device`.
    let set = at("vkAllocateDescriptorSets", unsafe {
        device.allocate_descriptor_sets(&info)
    })?[0];
    let infos: Vec<[vk::DescriptorBufferInfo; 1]> = buffers
        .iter()
        .map(|&(buffer, bytes)| {
            [vk::DescriptorBufferInfo::default()
                .buffer(buffer)
                .offset(0)
                .range(bytes)]
        })
        .collect();
    let writes: Vec<_> = infos
        .iter()
        .enumerate()
        .map(|(binding, info)| {
            vk::WriteDescriptorSet::default()
                .dst_set(set)
                .dst_binding(binding as u32)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .buffer_info(info)
        })
        .collect();
    // SAFETY: the set is new and unused; every buffer is live with memory bound; the
    // infos live across the call.
    unsafe { device.update_descriptor_sets(&writes, &[]) };
    Ok(set)
}

/// A command pool of queue family `family` whose buffers reset one by one.
pub(super) fn command_pool(device: &ash::Device, family: u32) -> Result<vk::CommandPool> {
    let info = vk::CommandPoolCreateInfo::default()
        .queue_family_index(family)
        .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
    // SAFETY: `device` is live and has a queue of `family` (the backend's).
    at("vkCreateCommandPool", unsafe {
        device.create_command_pool(&info, None)
    })
}

/// Destroys `pool` and every command buffer allocated from it.
pub(super) fn destroy_command_pool(device: &ash::Device, pool: vk::CommandPool) {
    // SAFETY: every submission of its buffers was waited for; null is ignored.
    unsafe { device.destroy_command_pool(pool, None) }
}

/// One primary command buffer from `pool`.
pub(super) fn command_buffer(
    device: &ash::Device,
    pool: vk::CommandPool,
) -> Result<vk::CommandBuffer> {
    let info = vk::CommandBufferAllocateInfo::default()
        .command_pool(pool)
        .level(vk::CommandBufferLevel::PRIMARY)
        .command_buffer_count(1);
    // SAFETY: `pool` is a live pool of `device`, used by one thread (the floor's).
    at("vkAllocateCommandBuffers", unsafe {
        device.allocate_command_buffers(&info)
    })
    .map(|b| b[0])
}

/// Resets `cmd` and begins recording it: submitted once (`one_time`) or again and again.
pub(super) fn begin(device: &ash::Device, cmd: vk::CommandBuffer, one_time: bool) -> Result<()> {
    // SAFETY: `cmd` is not pending (its last submission was waited for), and its pool
    // lets it reset on its own.
    at("vkResetCommandBuffer", unsafe {
        device.reset_command_buffer(cmd, vk::CommandBufferResetFlags::empty())
    })?;
    let flags = if one_time {
        vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT
    } else {
        vk::CommandBufferUsageFlags::empty()
    };
    let info = vk::CommandBufferBeginInfo::default().flags(flags);
    // SAFETY: `cmd` was just reset.
    at("vkBeginCommandBuffer", unsafe {
        device.begin_command_buffer(cmd, &info)
    })
}

/// Ends recording `cmd`.
pub(super) fn end(device: &ash::Device, cmd: vk::CommandBuffer) -> Result<()> {
    // SAFETY: `cmd` is recording.
    at("vkEndCommandBuffer", unsafe {
        device.end_command_buffer(cmd)
    })
}

/// A stage and the accesses of it.
pub(super) type Scope = (vk::PipelineStageFlags, vk::AccessFlags);

/// Records a global memory barrier from `src` to `dst`.
pub(super) fn memory_barrier(device: &ash::Device, cmd: vk::CommandBuffer, src: Scope, dst: Scope) {
    let barrier = [vk::MemoryBarrier::default()
        .src_access_mask(src.1)
        .dst_access_mask(dst.1)];
    // SAFETY: `cmd` is recording; the barrier lives across the call.
    unsafe {
        device.cmd_pipeline_barrier(
            cmd,
            src.0,
            dst.0,
            vk::DependencyFlags::empty(),
            &barrier,
            &[],
            &[],
        )
    }
}

/// Records binding `p`'s pipeline.
pub(super) fn bind_pipeline(device: &ash::Device, cmd: vk::CommandBuffer, p: &Pipeline) {
    // SAFETY: `cmd` is recording; the pipeline outlives its submissions.
    unsafe { device.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, p.pipeline) }
}

/// Records binding `set` to `p`'s layout and a dispatch of `grid` workgroups.
pub(super) fn dispatch(
    device: &ash::Device,
    cmd: vk::CommandBuffer,
    p: &Pipeline,
    set: vk::DescriptorSet,
    grid: [u32; 3],
) {
    // SAFETY: `cmd` is recording with `p`'s pipeline bound; the set (of `p`'s set layout)
    // and its buffers outlive the submissions.
    unsafe {
        device.cmd_bind_descriptor_sets(
            cmd,
            vk::PipelineBindPoint::COMPUTE,
            p.layout,
            0,
            &[set],
            &[],
        );
        device.cmd_dispatch(cmd, grid[0], grid[1], grid[2]);
    }
}

/// Records a copy of `bytes` from the start of `src` to the start of `dst`.
pub(super) fn copy(
    device: &ash::Device,
    cmd: vk::CommandBuffer,
    src: (vk::Buffer, u64),
    dst: vk::Buffer,
    bytes: u64,
) {
    let region = [vk::BufferCopy::default()
        .src_offset(src.1)
        .dst_offset(0)
        .size(bytes)];
    // SAFETY: `cmd` is recording; both buffers hold the ranges and outlive the submission.
    unsafe { device.cmd_copy_buffer(cmd, src.0, dst, &region) }
}

/// Records filling the first `bytes` of `buffer` with zeros.
pub(super) fn fill_zeros(
    device: &ash::Device,
    cmd: vk::CommandBuffer,
    buffer: vk::Buffer,
    bytes: u64,
) {
    // SAFETY: `cmd` is recording; `buffer` holds `bytes` (a multiple of 4) and outlives
    // the submission.
    unsafe { device.cmd_fill_buffer(cmd, buffer, 0, bytes, 0) }
}

/// A timeline semaphore at 0.
pub(super) fn timeline(device: &ash::Device) -> Result<vk::Semaphore> {
    let mut kind = vk::SemaphoreTypeCreateInfo::default()
        .semaphore_type(vk::SemaphoreType::TIMELINE)
        .initial_value(0);
    let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
    // SAFETY: `device` is live with timeline semaphores enabled (the backend requires
    // them); the chain lives across the call.
    at("vkCreateSemaphore", unsafe {
        device.create_semaphore(&info, None)
    })
}

/// Destroys `semaphore`.
pub(super) fn destroy_semaphore(device: &ash::Device, semaphore: vk::Semaphore) {
    // SAFETY: no submission that signals it is pending; null is ignored.
    unsafe { device.destroy_semaphore(semaphore, None) }
}

/// Submits `cmd` to `queue`, signalling `semaphore` to `value` when it completes.
pub(super) fn submit(
    device: &ash::Device,
    queue: vk::Queue,
    cmd: vk::CommandBuffer,
    semaphore: vk::Semaphore,
    value: u64,
) -> Result<()> {
    let buffers = [cmd];
    let semaphores = [semaphore];
    let values = [value];
    let mut timeline = vk::TimelineSemaphoreSubmitInfo::default().signal_semaphore_values(&values);
    let info = [vk::SubmitInfo::default()
        .command_buffers(&buffers)
        .signal_semaphores(&semaphores)
        .push_next(&mut timeline)];
    // SAFETY: the caller holds the backend's queue lock (`with_queue`); `cmd` is
    // executable and not pending; `value` is above the semaphore's last; every pointer
    // lives across the call.
    at("vkQueueSubmit", unsafe {
        device.queue_submit(queue, &info, vk::Fence::null())
    })
}

/// Waits until `semaphore` reaches `value`.
pub(super) fn wait(device: &ash::Device, semaphore: vk::Semaphore, value: u64) -> Result<()> {
    let semaphores = [semaphore];
    let values = [value];
    let info = vk::SemaphoreWaitInfo::default()
        .semaphores(&semaphores)
        .values(&values);
    // SAFETY: `semaphore` is a live timeline semaphore of `device`; `value` was submitted.
    at("vkWaitSemaphores", unsafe {
        device.wait_semaphores(&info, u64::MAX)
    })
}
