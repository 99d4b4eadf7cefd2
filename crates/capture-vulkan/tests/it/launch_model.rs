//! The launch model on lavapipe, under validation: a user pipeline with push constants
//! and a workgroup reduction; the user's own commands (`vkCmdFillBuffer`,
//! `vkCmdCopyBuffer`, a dispatch of its own pipeline) as foreign work; a `VkBuffer` of
//! the caller's imported; each way a signature can disagree with its SPIR-V refused; and
//! a programmatic dependent launch refused, Vulkan having none. Every case captured and
//! replayed with new inputs written in place.

use std::sync::Arc;

use ash::vk;
use capture_core::{
    Arg, Chain, Device, DeviceConfig, Dims, KernelSignature, Param, ProgrammaticLaunch,
    ServerError, StreamId,
};
use capture_suite::scenarios::suite_lock;
use capture_vulkan::{
    MemoryMode, VulkanBackend, VulkanExternal, VulkanKernelSource, VulkanWork, compile_wgsl,
};

use crate::support;

const S: StreamId = StreamId::new(0);

fn open(label: &str) -> Option<VulkanBackend> {
    match support::backend(MemoryMode::Auto) {
        Ok(b) => Some(b),
        Err(why) => {
            println!("SKIP: {label}: {why}");
            None
        }
    }
}

/// Sums of `x * scale` per workgroup of 64: push constants (`n`, `scale`) and a tree
/// reduction in workgroup memory.
const SUMS: &str = r#"
struct Params { n: u32, scale: f32 }
var<immediate> p: Params;
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> sums: array<f32>;
var<workgroup> partial: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let i = wid.x * 64u + lid.x;
    var v = 0.0;
    if (i < p.n) {
        v = x[i] * p.scale;
    }
    partial[lid.x] = v;
    workgroupBarrier();
    for (var stride = 32u; stride > 0u; stride = stride / 2u) {
        if (lid.x < stride) {
            partial[lid.x] = partial[lid.x] + partial[lid.x + stride];
        }
        workgroupBarrier();
    }
    if (lid.x == 0u) {
        sums[wid.x] = partial[0];
    }
}
"#;

const SUMS_SIGNATURE: KernelSignature = KernelSignature::of(&[
    Param::READ,
    Param::WRITE,
    Param::scalar::<u32>(),
    Param::scalar::<f32>(),
]);

fn expected_sums(x: &[f32], scale: f32) -> Vec<f32> {
    x.chunks(64)
        .map(|c| c.iter().map(|v| v * scale).sum())
        .collect()
}

#[test]
fn a_programmatic_launch_is_refused_on_vulkan_even_for_a_kernel_that_declares_the_wait() {
    let _suite = suite_lock();
    let Some(b) = open("programmatic launch") else {
        return;
    };
    let handle = b.clone();
    {
        let dev = Device::new(b, DeviceConfig::new()).unwrap();
        let ProgrammaticLaunch::Unsupported(why) = dev.programmatic_launch() else {
            panic!("Vulkan runs no programmatic dependent launch");
        };
        assert!(why.starts_with("Vulkan runs no programmatic"), "{why}");
        let signature = SUMS_SIGNATURE.with_grid_dependency_wait();
        let source = VulkanKernelSource::wgsl("sums", SUMS, "main", signature).unwrap();
        assert!(source.signature().waits_for_grid_dependency());
        let k = dev.kernel(source);
        let x = dev.alloc(S, 256).unwrap();
        let sums = dev.alloc(S, 4).unwrap();
        dev.write_values(S, &x, 0, &[1.0f32; 64]).unwrap();
        let args = [
            Arg::read(&x),
            Arg::write(&sums),
            Arg::scalar(64u32),
            Arg::scalar(1.0f32),
        ];
        let dims = Dims::grid([1, 1, 1]);
        let e = dev
            .launch(S, &k, dims.programmatic(true), &args, &[])
            .unwrap_err();
        assert!(
            matches!(
                e,
                ServerError::InvalidArgument {
                    what: "programmatic launch",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(
            Chain(&e)
                .to_string()
                .contains(&format!("kernel sums (kernel#{}): {why}", k.id().index())),
            "{e}"
        );
        // Nothing was claimed; in stream order the launch runs.
        dev.launch(S, &k, dims, &args, &[]).unwrap();
        assert_eq!(dev.read_values::<f32>(S, &sums).unwrap(), [64.0]);
    }
    support::assert_no_validation_messages(&handle);
}

#[test]
fn a_pipeline_with_push_constants_and_a_workgroup_reduction_captures_and_replays() {
    let _suite = suite_lock();
    let Some(b) = open("push constants") else {
        return;
    };
    let handle = b.clone();
    {
        let dev = Device::new(b, DeviceConfig::new()).unwrap();
        let source = VulkanKernelSource::wgsl("sums", SUMS, "main", SUMS_SIGNATURE).unwrap();
        assert_eq!(source.signature().block(), Some([64, 1, 1]), "reflected");
        let k = dev.kernel(source);
        let n = 256u32;
        let x = dev.alloc(S, u64::from(n) * 4).unwrap();
        let sums = dev.alloc(S, 16).unwrap();
        let input: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
        dev.write_values(S, &x, 0, &input).unwrap();
        let launch = |d: &Device<VulkanBackend>, scale: f32| {
            d.launch(
                S,
                &k,
                Dims::grid([4, 1, 1]).block([64, 1, 1]),
                &[
                    Arg::read(&x),
                    Arg::write(&sums),
                    Arg::scalar(n),
                    Arg::scalar(scale),
                ],
                &[],
            )
        };
        launch(&dev, 2.0).unwrap();
        assert_eq!(
            dev.read_values::<f32>(S, &sums).unwrap(),
            expected_sums(&input, 2.0)
        );
        let g = dev.capture(S, |d| launch(d, 3.0)).unwrap();
        let next: Vec<f32> = (0..n).map(|i| (i % 5) as f32).collect();
        dev.write_values(S, &x, 0, &next).unwrap();
        dev.replay(S, &g, 1).unwrap();
        assert_eq!(
            dev.read_values::<f32>(S, &sums).unwrap(),
            expected_sums(&next, 3.0),
            "the replay ran the recorded push constants over the new input"
        );
        // A block other than the shader's is refused by the core.
        let err = dev
            .launch(
                S,
                &k,
                Dims::grid([4, 1, 1]).block([32, 1, 1]),
                &[
                    Arg::read(&x),
                    Arg::write(&sums),
                    Arg::scalar(n),
                    Arg::scalar(1.0f32),
                ],
                &[],
            )
            .unwrap_err();
        assert!(
            Chain(&err)
                .to_string()
                .contains("runs blocks of [64, 1, 1]"),
            "{err}"
        );
        // No dynamic shared memory on Vulkan: a shader declares its own.
        let err = dev
            .launch(
                S,
                &k,
                Dims::grid([4, 1, 1]).shared_bytes(16),
                &[
                    Arg::read(&x),
                    Arg::write(&sums),
                    Arg::scalar(n),
                    Arg::scalar(1.0f32),
                ],
                &[],
            )
            .unwrap_err();
        assert!(
            Chain(&err).to_string().contains("no dynamic shared memory"),
            "{err}"
        );
        dev.drop_graph(g).unwrap();
    }
    support::assert_no_validation_messages(&handle);
}

/// A pipeline of the caller's own: `data[i] = data[i] * 2.0`, binding 0.
struct OwnPipeline {
    device: ash::Device,
    module: vk::ShaderModule,
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
    pool: vk::DescriptorPool,
}

const DOUBLE: &str = r#"
@group(0) @binding(0) var<storage, read_write> data: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&data)) {
        data[id.x] = data[id.x] * 2.0;
    }
}
"#;

impl OwnPipeline {
    fn new(device: &ash::Device) -> Self {
        let words = compile_wgsl("double", DOUBLE).unwrap();
        // SAFETY: the caller's own objects on the backend's device, made and destroyed
        // by this test alone; every info struct lives across its call.
        unsafe {
            let module = device
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&words), None)
                .unwrap();
            let binding = [vk::DescriptorSetLayoutBinding::default()
                .binding(0)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::COMPUTE)];
            let set_layout = device
                .create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default().bindings(&binding),
                    None,
                )
                .unwrap();
            let layouts = [set_layout];
            let layout = device
                .create_pipeline_layout(
                    &vk::PipelineLayoutCreateInfo::default().set_layouts(&layouts),
                    None,
                )
                .unwrap();
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(module)
                .name(c"main");
            let pipeline = device
                .create_compute_pipelines(
                    vk::PipelineCache::null(),
                    &[vk::ComputePipelineCreateInfo::default()
                        .stage(stage)
                        .layout(layout)],
                    None,
                )
                .unwrap()[0];
            let sizes = [vk::DescriptorPoolSize {
                ty: vk::DescriptorType::STORAGE_BUFFER,
                descriptor_count: 16,
            }];
            let pool = device
                .create_descriptor_pool(
                    &vk::DescriptorPoolCreateInfo::default()
                        .max_sets(16)
                        .pool_sizes(&sizes),
                    None,
                )
                .unwrap();
            Self {
                device: device.clone(),
                module,
                set_layout,
                layout,
                pipeline,
                pool,
            }
        }
    }

    /// Records a dispatch over `range` into `cmd`, with a fresh set of its own.
    fn record(&self, cmd: vk::CommandBuffer, range: &capture_vulkan::VulkanRange) {
        // SAFETY: the pool is live and gives each call a fresh set (16 at most per
        // test), so no set a pending command buffer uses is updated.
        unsafe { self.dispatch_from(self.pool, cmd, range) }
    }

    /// Allocates a set from `pool`, writes `range` into it, and records the pipeline's
    /// dispatch over it into `cmd`.
    ///
    /// # Safety
    ///
    /// `pool` is live and lives as long as `cmd` may run; `cmd` is recording (the
    /// backend's work call).
    // SAFETY: the contract is the list above; the body's Vulkan calls rely on it.
    unsafe fn dispatch_from(
        &self,
        pool: vk::DescriptorPool,
        cmd: vk::CommandBuffer,
        range: &capture_vulkan::VulkanRange,
    ) {
        let layouts = [self.set_layout];
        // SAFETY: as the caller guarantees; the layout and pipeline are live.
        unsafe {
            let set = self
                .device
                .allocate_descriptor_sets(
                    &vk::DescriptorSetAllocateInfo::default()
                        .descriptor_pool(pool)
                        .set_layouts(&layouts),
                )
                .unwrap()[0];
            let info = [vk::DescriptorBufferInfo {
                buffer: range.buffer,
                offset: range.offset,
                range: range.size,
            }];
            self.device.update_descriptor_sets(
                &[vk::WriteDescriptorSet::default()
                    .dst_set(set)
                    .dst_binding(0)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(&info)],
                &[],
            );
            self.device
                .cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, self.pipeline);
            self.device.cmd_bind_descriptor_sets(
                cmd,
                vk::PipelineBindPoint::COMPUTE,
                self.layout,
                0,
                &[set],
                &[],
            );
            self.device
                .cmd_dispatch(cmd, (range.size / 4).div_ceil(64) as u32, 1, 1);
        }
    }
}

impl Drop for OwnPipeline {
    fn drop(&mut self) {
        // SAFETY: dropped when the last work holding it is gone: behind the fence of the
        // last run of any graph that recorded it (the device and graphs keep the work).
        unsafe {
            self.device.destroy_descriptor_pool(self.pool, None);
            self.device.destroy_pipeline(self.pipeline, None);
            self.device.destroy_pipeline_layout(self.layout, None);
            self.device
                .destroy_descriptor_set_layout(self.set_layout, None);
            self.device.destroy_shader_module(self.module, None);
        }
    }
}

#[test]
fn the_users_own_fill_copy_and_dispatch_run_as_foreign_work_captured_and_replayed() {
    let _suite = suite_lock();
    let Some(b) = open("foreign work") else {
        return;
    };
    let handle = b.clone();
    {
        let own = Arc::new(OwnPipeline::new(b.ash_device()));
        let dev = Device::new(b, DeviceConfig::new()).unwrap();
        let (input, scratch, out) = (
            dev.alloc(S, 256).unwrap(),
            dev.alloc(S, 256).unwrap(),
            dev.alloc(S, 256).unwrap(),
        );
        dev.write_values(S, &input, 0, &[1.5f32; 64]).unwrap();
        let pipeline = Arc::clone(&own);
        // SAFETY: the commands touch only the declared ranges, in transfer and compute
        // stages, record only into the given command buffer, and the pipeline they
        // bind is kept by the work (and with it by the device and the graph).
        let work = unsafe {
            VulkanWork::new("fill_copy_double", move |call| {
                let [input, scratch, out] = call.ranges() else {
                    return Err("three ranges".into());
                };
                let d = call.device();
                let cmd = call.command_buffer();
                d.cmd_fill_buffer(cmd, scratch.buffer, scratch.offset, scratch.size, 0);
                let transfer = [vk::MemoryBarrier::default()
                    .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
                    .dst_access_mask(
                        vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::TRANSFER_WRITE,
                    )];
                d.cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::TRANSFER,
                    vk::PipelineStageFlags::TRANSFER,
                    vk::DependencyFlags::empty(),
                    &transfer,
                    &[],
                    &[],
                );
                d.cmd_copy_buffer(
                    cmd,
                    input.buffer,
                    out.buffer,
                    &[vk::BufferCopy {
                        src_offset: input.offset,
                        dst_offset: out.offset,
                        size: input.size.min(out.size),
                    }],
                );
                let to_shader = [vk::MemoryBarrier::default()
                    .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
                    .dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE)];
                d.cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::TRANSFER,
                    vk::PipelineStageFlags::COMPUTE_SHADER,
                    vk::DependencyFlags::empty(),
                    &to_shader,
                    &[],
                    &[],
                );
                pipeline.record(cmd, out);
                Ok(())
            })
            .keep(own)
        };
        let args = [Arg::read(&input), Arg::write(&scratch), Arg::write(&out)];
        dev.foreign_work(S, &args, work.clone()).unwrap();
        assert_eq!(dev.read_values::<f32>(S, &out).unwrap(), vec![3.0; 64]);
        assert_eq!(dev.read_values::<u32>(S, &scratch).unwrap(), vec![0; 64]);
        let g = dev
            .capture(S, |d| d.foreign_work(S, &args, work.clone()))
            .unwrap();
        drop(work);
        dev.write_values(S, &input, 0, &[4.0f32; 64]).unwrap();
        dev.write_values(S, &scratch, 0, &[7u32; 64]).unwrap();
        dev.replay(S, &g, 1).unwrap();
        assert_eq!(
            dev.read_values::<f32>(S, &out).unwrap(),
            vec![8.0; 64],
            "the replay ran the caller's commands over the new input"
        );
        assert_eq!(dev.read_values::<u32>(S, &scratch).unwrap(), vec![0; 64]);
        dev.drop_graph(g).unwrap();
    }
    support::assert_no_validation_messages(&handle);
}

/// A descriptor pool made for one recording, and the set it gave: destroyed on drop,
/// counted.
struct RecordingSet {
    device: ash::Device,
    pool: vk::DescriptorPool,
    dropped: Arc<std::sync::atomic::AtomicUsize>,
}

impl Drop for RecordingSet {
    fn drop(&mut self) {
        // SAFETY: dropped by the backend once no command buffer that bound its set can
        // run (the contract of `VulkanWorkCall::keep`), on the live device.
        unsafe { self.device.destroy_descriptor_pool(self.pool, None) };
        self.dropped
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl OwnPipeline {
    /// Records a dispatch over `range` with a set of a pool made for this call alone,
    /// handed over with `call.keep`.
    fn record_own_set(
        &self,
        call: &capture_vulkan::VulkanWorkCall<'_>,
        dropped: &Arc<std::sync::atomic::AtomicUsize>,
    ) {
        let [range] = call.ranges() else { return };
        let sizes = [vk::DescriptorPoolSize {
            ty: vk::DescriptorType::STORAGE_BUFFER,
            descriptor_count: 1,
        }];
        // SAFETY: the pool is this call's own, handed over before the call returns, so
        // nothing frees it while the buffer may run; the buffer is recording.
        unsafe {
            let pool = self
                .device
                .create_descriptor_pool(
                    &vk::DescriptorPoolCreateInfo::default()
                        .max_sets(1)
                        .pool_sizes(&sizes),
                    None,
                )
                .unwrap();
            call.keep(Arc::new(RecordingSet {
                device: self.device.clone(),
                pool,
                dropped: Arc::clone(dropped),
            }));
            self.dispatch_from(pool, call.command_buffer(), range);
        }
    }
}

/// Issue 32, item 7: foreign work hands over a descriptor set made for one recording
/// (`VulkanWorkCall::keep`): an eager run's goes once its submission ran, the warmup's
/// likewise, the recording's lives with the graph through its replays and goes behind
/// the last one's fence when the graph is dropped; validation sees no set destroyed in
/// use.
#[test]
fn i32_07_foreign_work_hands_over_a_set_made_for_one_recording() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let _suite = suite_lock();
    let Some(b) = open("per-recording sets") else {
        return;
    };
    let handle = b.clone();
    {
        let own = Arc::new(OwnPipeline::new(b.ash_device()));
        let dev = Device::new(b, DeviceConfig::new()).unwrap();
        let data = dev.alloc(S, 256).unwrap();
        dev.write_values(S, &data, 0, &[1.0f32; 64]).unwrap();
        let dropped = Arc::new(AtomicUsize::new(0));
        let (pipeline, count) = (Arc::clone(&own), Arc::clone(&dropped));
        // SAFETY: the dispatch touches only the declared range in the compute stage,
        // records only into the given buffer; the pipeline is kept by the work, the set
        // and its pool handed over per call.
        let work = unsafe {
            VulkanWork::new("double_own_set", move |call| {
                pipeline.record_own_set(call, &count);
                Ok(())
            })
            .keep(own)
        };
        let args = [Arg::read_write(&data)];
        dev.foreign_work(S, &args, work.clone()).unwrap();
        assert_eq!(dev.read_values::<f32>(S, &data).unwrap(), vec![2.0; 64]);
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            1,
            "the eager run's set, after its fence"
        );
        let g = dev
            .capture(S, |d| d.foreign_work(S, &args, work.clone()))
            .unwrap();
        dev.sync(S).unwrap();
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            2,
            "the warmup's set went; the graph's lives"
        );
        dev.replay(S, &g, 3).unwrap();
        assert_eq!(dev.read_values::<f32>(S, &data).unwrap(), vec![32.0; 64]);
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            2,
            "the graph's set lives through its replays"
        );
        dev.replay(S, &g, 1).unwrap();
        dev.drop_graph(g).unwrap();
        dev.sync(S).unwrap();
        dev.cleanup().unwrap();
        assert_eq!(dev.read_values::<f32>(S, &data).unwrap(), vec![64.0; 64]);
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            3,
            "the graph's set went behind its last replay"
        );
    }
    support::assert_no_validation_messages(&handle);
}

#[test]
fn a_buffer_of_the_callers_own_is_imported_and_kept_by_a_graph() {
    let _suite = suite_lock();
    let Some(b) = open("import") else {
        return;
    };
    let handle = b.clone();
    {
        let device = b.ash_device().clone();
        let props = b.memory_properties();
        // SAFETY: the caller's own buffer and memory on the backend's device, destroyed
        // below only after the device that imported it (and its graphs) is gone.
        let (buffer, memory) = unsafe {
            let buffer = device
                .create_buffer(
                    &vk::BufferCreateInfo::default().size(256).usage(
                        vk::BufferUsageFlags::STORAGE_BUFFER
                            | vk::BufferUsageFlags::TRANSFER_SRC
                            | vk::BufferUsageFlags::TRANSFER_DST,
                    ),
                    None,
                )
                .unwrap();
            let req = device.get_buffer_memory_requirements(buffer);
            let flags =
                vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
            let index = (0..props.memory_type_count)
                .find(|&i| {
                    req.memory_type_bits & (1 << i) != 0
                        && props.memory_types[i as usize]
                            .property_flags
                            .contains(flags)
                })
                .unwrap();
            let memory = device
                .allocate_memory(
                    &vk::MemoryAllocateInfo::default()
                        .allocation_size(req.size)
                        .memory_type_index(index),
                    None,
                )
                .unwrap();
            device.bind_buffer_memory(buffer, memory, 0).unwrap();
            let at = device
                .map_memory(memory, 0, 256, vk::MemoryMapFlags::empty())
                .unwrap() as *mut f32;
            for i in 0..64 {
                at.add(i).write(i as f32);
            }
            device.unmap_memory(memory);
            (buffer, memory)
        };
        {
            let dev = Device::new(b, DeviceConfig::new()).unwrap();
            // SAFETY: the buffer outlives the device (destroyed after it, below), is
            // bound, has the usages named, and is written by nothing else meanwhile.
            let external = unsafe { VulkanExternal::new(buffer, 0, 256) };
            let weights = dev.import(S, external).unwrap();
            dev.assume_written(S, &weights).unwrap();
            let y = dev.alloc(S, 256).unwrap();
            let add = dev.builtin(capture_core::Builtin::AddScalar);
            let info = capture_core::Builtin::AddScalar.info(64, 1.0);
            let g = dev
                .capture(S, |d| {
                    d.launch(
                        S,
                        &add,
                        [1, 1, 1],
                        &[Arg::read(&weights), Arg::write(&y)],
                        &info,
                    )
                })
                .unwrap();
            drop(weights);
            dev.replay(S, &g, 1).unwrap();
            let want: Vec<f32> = (0..64).map(|i| i as f32 + 1.0).collect();
            assert_eq!(dev.read_values::<f32>(S, &y).unwrap(), want);
            dev.drop_graph(g).unwrap();
            dev.sync(S).unwrap();
            dev.cleanup().unwrap();
        }
        // SAFETY: the device and its graphs are gone, and waited for.
        unsafe {
            device.destroy_buffer(buffer, None);
            device.free_memory(memory, None);
        }
    }
    support::assert_no_validation_messages(&handle);
}

fn refused(source: Result<VulkanKernelSource, ServerError>, why: &str) {
    match source {
        Ok(_) => panic!("accepted; expected {why:?}"),
        Err(e) => assert!(e.to_string().contains(why), "{why:?} in {e}"),
    }
}

#[test]
fn a_signature_that_disagrees_with_its_spirv_is_refused_naming_how() {
    let writes_y = r#"
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read> info: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < info[0]) { y[id.x] = x[id.x]; }
}
"#;
    let right = KernelSignature::of(&[Param::READ, Param::WRITE]).with_info(2);
    VulkanKernelSource::wgsl("copy", writes_y, "main", right).unwrap();
    // One buffer too many: the shader would read the third buffer as its info words.
    refused(
        VulkanKernelSource::wgsl(
            "copy",
            writes_y,
            "main",
            KernelSignature::of(&[Param::READ, Param::WRITE, Param::READ]).with_info(2),
        ),
        "declare a buffer too many",
    );
    // A buffer the shader writes, declared read.
    refused(
        VulkanKernelSource::wgsl(
            "copy",
            writes_y,
            "main",
            KernelSignature::of(&[Param::READ, Param::READ]).with_info(2),
        ),
        "writes it, declared read",
    );
    // A buffer declared written that the shader never writes.
    refused(
        VulkanKernelSource::wgsl(
            "copy",
            writes_y,
            "main",
            KernelSignature::of(&[Param::WRITE, Param::WRITE]).with_info(2),
        ),
        "never writes it, declared written",
    );
    // Scalars the shader does not take, and push constants laid out otherwise.
    refused(
        VulkanKernelSource::wgsl(
            "copy",
            writes_y,
            "main",
            KernelSignature::of(&[Param::READ, Param::WRITE, Param::scalar::<u32>()]).with_info(2),
        ),
        "uses no push constants",
    );
    refused(
        VulkanKernelSource::wgsl(
            "sums",
            SUMS,
            "main",
            KernelSignature::of(&[
                Param::READ,
                Param::WRITE,
                Param::scalar::<u32>(),
                Param::scalar::<[f32; 2]>(),
            ]),
        ),
        "do not fit its scalars",
    );
    // Push constants the signature does not declare.
    refused(
        VulkanKernelSource::wgsl(
            "sums",
            SUMS,
            "main",
            KernelSignature::of(&[Param::READ, Param::WRITE]),
        ),
        "uses push constants",
    );
}

/// Issue 32, item 6: the reflection checks a scalar's type, not its size alone: a
/// `Param::scalar::<f32>()` where the shader's push-constant member is a `u32` (or the
/// other way round, or an `i32`) is refused naming both types; the struct form checks
/// the size alone.
#[test]
fn i32_06_a_scalar_of_another_type_than_the_shaders_is_refused() {
    let sig = |n: Param, scale: Param| KernelSignature::of(&[Param::READ, Param::WRITE, n, scale]);
    VulkanKernelSource::wgsl("sums", SUMS, "main", SUMS_SIGNATURE).unwrap();
    refused(
        VulkanKernelSource::wgsl(
            "sums",
            SUMS,
            "main",
            sig(Param::scalar::<f32>(), Param::scalar::<f32>()),
        ),
        "scalar 0 is u32 in the shader; the signature declares f32",
    );
    refused(
        VulkanKernelSource::wgsl(
            "sums",
            SUMS,
            "main",
            sig(Param::scalar::<u32>(), Param::scalar::<u32>()),
        ),
        "scalar 1 is f32 in the shader; the signature declares u32",
    );
    refused(
        VulkanKernelSource::wgsl(
            "sums",
            SUMS,
            "main",
            sig(Param::scalar::<i32>(), Param::scalar::<f32>()),
        ),
        "scalar 0 is u32 in the shader; the signature declares i32",
    );
    // A vector's elements are its leaves: vec2<f32> is a [f32; 2], not a [u32; 2].
    let pair = r#"
struct Params { n: u32, ab: vec2<f32> }
var<immediate> p: Params;
@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < p.n) { y[id.x] = p.ab.x * y[id.x] + p.ab.y; }
}
"#;
    let with = |ab: Param| KernelSignature::of(&[Param::READ_WRITE, Param::scalar::<u32>(), ab]);
    VulkanKernelSource::wgsl("pair", pair, "main", with(Param::scalar::<[f32; 2]>())).unwrap();
    refused(
        VulkanKernelSource::wgsl("pair", pair, "main", with(Param::scalar::<[u32; 2]>())),
        "scalar 1 is f32 in the shader; the signature declares u32",
    );
    // A struct's fields are not typed: its size is checked alone.
    VulkanKernelSource::wgsl(
        "pair",
        pair,
        "main",
        with(Param::scalar_struct::<[u32; 2]>()),
    )
    .unwrap();
}

/// The backend binds a pipeline only when the command buffer has another one bound; the
/// user's work binds pipelines of its own, so a launch after it binds again (eager, and
/// in a graph's command buffer).
#[test]
fn a_launch_after_work_that_bound_its_own_pipeline_binds_the_library_pipeline_again() {
    let _suite = suite_lock();
    let Some(b) = open("pipeline after work") else {
        return;
    };
    let handle = b.clone();
    {
        use capture_core::{Builtin, Builtins};
        let own = Arc::new(OwnPipeline::new(b.ash_device()));
        let dev = Device::new(b, DeviceConfig::new()).unwrap();
        let add = dev.kernel(VulkanBackend::builtin(Builtin::AddScalar));
        let (a, t, c) = (
            dev.alloc(S, 256).unwrap(),
            dev.alloc(S, 256).unwrap(),
            dev.alloc(S, 256).unwrap(),
        );
        let pipeline = Arc::clone(&own);
        // SAFETY: the dispatch touches only the declared range and records only into
        // the given command buffer; the work keeps the pipeline it binds.
        let double = unsafe {
            VulkanWork::new("double", move |call| {
                let [c] = call.ranges() else {
                    return Err("one range".into());
                };
                pipeline.record(call.command_buffer(), c);
                Ok(())
            })
            .keep(own)
        };
        let step = |d: &Device<VulkanBackend>| -> Result<(), ServerError> {
            let info = Builtin::AddScalar.info(64, 1.0);
            d.launch(S, &add, [1, 1, 1], &[Arg::read(&a), Arg::write(&t)], &info)?;
            d.foreign_work(S, &[Arg::write(&c)], double.clone())?;
            d.launch(S, &add, [1, 1, 1], &[Arg::read(&t), Arg::write(&a)], &info)
        };
        dev.write_values(S, &a, 0, &[1.0f32; 64]).unwrap();
        dev.write_values(S, &c, 0, &[3.0f32; 64]).unwrap();
        step(&dev).unwrap();
        assert_eq!(dev.read_values::<f32>(S, &a).unwrap(), vec![3.0; 64]);
        assert_eq!(dev.read_values::<f32>(S, &c).unwrap(), vec![6.0; 64]);
        let g = dev.capture(S, |d| step(d)).unwrap();
        dev.replay(S, &g, 2).unwrap();
        // The warmup and two replays: three more steps.
        assert_eq!(dev.read_values::<f32>(S, &a).unwrap(), vec![9.0; 64]);
        assert_eq!(dev.read_values::<f32>(S, &c).unwrap(), vec![48.0; 64]);
        dev.drop_graph(g).unwrap();
    }
    support::assert_no_validation_messages(&handle);
}
