//! An inference engine's decode step, as its author writes it: kernels of the engine's
//! own that take their sizes and constants as scalars, a library call (a GEMV of the
//! engine's "vendor library") through foreign work, and weights in memory the engine
//! allocated itself, imported without a copy. The step is captured once and replayed per
//! token, the token's embedding written in place into the step's input between replays.
//!
//! Per token: `h = a·x + b` (own kernel, scalars `n, a, b`), `logits = W·h` (the
//! library's GEMV over the imported weights), `logits *= 1/t` (own kernel, in place,
//! scalars `n, 1/t`); the host picks the next token (argmax) and writes its embedding.
//! Checked: the replayed loop generates the eager loop's ids with bit-identical logits,
//! and both agree with a plain-Rust reference.
//!
//! ```text
//! cargo run -p capture-graphs --example engine_step [-- --backend mock|vulkan|cuda] [--tokens N]
//! ```
//!
//! `--validation` runs Vulkan under the Khronos validation layer and fails on any message.
//!
//! `vulkan` needs `--features vulkan`, `cuda` needs `--features cudarc` (the engine holds
//! its context, stream and weights through cudarc, as a Rust engine does). A backend
//! whose device cannot be opened prints `SKIP:` and exits 0.

use std::time::Instant;

use capture_graphs::backend::Backend;
use capture_graphs::{
    Arg, Buffer, Chain, Device, Dims, KernelHandle, KernelSignature, Param, Result, StreamId,
};

const S: StreamId = StreamId::new(0);
/// Model width: floats in `x` and `h`.
const DIM: u32 = 64;
/// Vocabulary: rows of the weights, floats of the logits.
const VOCAB: u32 = 256;
/// The affine kernel's constants and the temperature.
const A: f32 = 1.5;
const B: f32 = -0.25;
const TEMPERATURE: f32 = 0.8;
/// Threads per block (workgroup) of every launch.
const BLOCK: u32 = 64;

/// The engine's own kernels' parameter lists (the same on every backend).
const AFFINE: KernelSignature = KernelSignature::of(&[
    Param::READ,
    Param::WRITE,
    Param::scalar::<u32>(),
    Param::scalar::<f32>(),
    Param::scalar::<f32>(),
]);
const TEMPERATURE_SIGNATURE: KernelSignature = KernelSignature::of(&[
    Param::READ_WRITE,
    Param::scalar::<u32>(),
    Param::scalar::<f32>(),
]);

/// The model's numbers, generated: the embedding table `[VOCAB, DIM]` and the output
/// weights `[VOCAB, DIM]`, row-major.
struct Weights {
    embedding: Vec<f32>,
    output: Vec<f32>,
}

impl Weights {
    fn new() -> Self {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        };
        let n = (VOCAB * DIM) as usize;
        Self {
            embedding: (0..n).map(|_| next()).collect(),
            output: (0..n).map(|_| next() * 0.5).collect(),
        }
    }

    fn row(&self, token: u32) -> &[f32] {
        let d = DIM as usize;
        &self.embedding[token as usize * d..(token as usize + 1) * d]
    }

    /// The reference: the step's logits for `token`, in plain Rust.
    fn logits(&self, token: u32) -> Vec<f32> {
        let h: Vec<f32> = self.row(token).iter().map(|x| A * x + B).collect();
        self.output
            .chunks_exact(DIM as usize)
            .map(|row| {
                let mut acc = 0.0f32;
                for (w, x) in row.iter().zip(&h) {
                    acc += w * x;
                }
                acc * (1.0 / TEMPERATURE)
            })
            .collect()
    }
}

/// The first largest logit.
fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in logits.iter().enumerate() {
        if *v > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// What each backend brings: the engine's two kernels, its library's GEMV as foreign
/// work over `(w, h, logits)`, and its weights, imported.
struct Engine<B: Backend> {
    affine: KernelHandle,
    temperature: KernelHandle,
    gemv: B::Work,
    library: &'static str,
    weights: Buffer,
}

/// The step's buffers: `x` written by the host per token, `h` an intermediate (its
/// handle dropped once the graph holds it), `logits` read by the host per token.
struct Step {
    x: Buffer,
    h: Option<Buffer>,
    logits: Buffer,
}

impl Step {
    fn new<B: Backend>(dev: &Device<B>) -> Result<Self> {
        Ok(Self {
            x: dev.alloc(S, u64::from(DIM) * 4)?,
            h: Some(dev.alloc(S, u64::from(DIM) * 4)?),
            logits: dev.alloc(S, u64::from(VOCAB) * 4)?,
        })
    }

    /// One decode step: two launches of the engine's kernels around the library call.
    fn run<B: Backend>(&self, dev: &Device<B>, engine: &Engine<B>) -> Result<()> {
        let Some(h) = &self.h else {
            return Err(capture_graphs::ServerError::invalid(
                "step",
                "eager",
                "the intermediate was handed to the graph: replay it",
            ));
        };
        let grid = |n: u32| Dims::grid([n.div_ceil(BLOCK), 1, 1]).block([BLOCK, 1, 1]);
        dev.launch(
            S,
            &engine.affine,
            grid(DIM),
            &[
                Arg::read(&self.x),
                Arg::write(h),
                Arg::scalar(DIM),
                Arg::scalar(A),
                Arg::scalar(B),
            ],
            &[],
        )?;
        let gemv = [
            Arg::read(&engine.weights),
            Arg::read(h),
            Arg::write(&self.logits),
        ];
        dev.foreign_work(S, &gemv, engine.gemv.clone())?;
        dev.launch(
            S,
            &engine.temperature,
            grid(VOCAB),
            &[
                Arg::read_write(&self.logits),
                Arg::scalar(VOCAB),
                Arg::scalar(1.0 / TEMPERATURE),
            ],
            &[],
        )
    }
}

/// A generation: the ids, every step's logits, the wall time.
struct Generation {
    ids: Vec<u32>,
    logits: Vec<Vec<f32>>,
    seconds: f64,
}

/// Generates `tokens` tokens from `prompt`, one step per token: run eagerly, or replayed
/// from `graph`. The host writes the token's embedding into `x` in place (the same host
/// buffers every token) and reads the logits back.
fn generate<B: Backend>(
    dev: &Device<B>,
    engine: &Engine<B>,
    step: &Step,
    weights: &Weights,
    graph: Option<&capture_graphs::GraphHandle>,
    tokens: u32,
) -> Result<Generation> {
    let (mut ids, mut all) = (vec![1u32], Vec::new());
    let mut logits = vec![0.0f32; VOCAB as usize];
    let start = Instant::now();
    for _ in 0..tokens {
        let token = *ids.last().expect("the prompt");
        dev.write_values(S, &step.x, 0, weights.row(token))?;
        match graph {
            Some(graph) => dev.replay(S, graph, 1)?,
            None => step.run(dev, engine)?,
        }
        dev.read_values_into(S, &step.logits, 0, &mut logits)?;
        ids.push(argmax(&logits));
        all.push(logits.clone());
    }
    Ok(Generation {
        ids,
        logits: all,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Runs the engine on `dev`: eagerly, then captured once and replayed per token; checks
/// the two agree bit for bit and match the reference.
fn decode<B: Backend>(
    dev: &Device<B>,
    engine: Engine<B>,
    weights: &Weights,
    name: &str,
    tokens: u32,
) -> Result<()> {
    let mut step = Step::new(dev)?;
    let eager = generate(dev, &engine, &step, weights, None, tokens)?;
    let graph = dev.capture(S, |d| step.run(d, &engine))?;
    // The intermediate's handle can go: the graph holds it.
    step.h = None;
    let weights_bytes = engine.weights.size();
    let replayed = generate(dev, &engine, &step, weights, Some(&graph), tokens)?;
    assert_eq!(eager.ids, replayed.ids, "replayed ids differ from eager");
    for (i, (e, r)) in eager.logits.iter().zip(&replayed.logits).enumerate() {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(e),
            bits(r),
            "step {i}: replayed logits differ from eager"
        );
    }
    let mut worst = 0.0f32;
    for (i, logits) in replayed.logits.iter().enumerate() {
        let want = weights.logits(replayed.ids[i]);
        for (got, want) in logits.iter().zip(&want) {
            worst = worst.max((got - want).abs() / want.abs().max(1.0));
        }
    }
    assert!(worst <= 1e-5, "logits off the reference by {worst:e}");
    let ledger = dev.graph(&graph).expect("a live graph");
    let per_token = |g: &Generation| g.seconds * 1e6 / f64::from(tokens);
    println!(
        "engine_step on {name}: {tokens} tokens, 3 calls per step (2 own kernels with \
         scalars, 1 library GEMV: {})",
        engine.library
    );
    println!("  eager     {:8.1} µs per token", per_token(&eager));
    println!("  replayed  {:8.1} µs per token", per_token(&replayed));
    println!(
        "  ids {:?}: eager and replayed identical, logits bit for bit, reference within \
         {worst:.1e}",
        &replayed.ids[..replayed.ids.len().min(10)]
    );
    println!("  imported weights: {weights_bytes} B, pinned by the graph, not copied ({ledger})");
    drop(engine);
    dev.drop_graph(graph)
}

mod mock {
    //! On the mock: the engine's kernels are Rust functions, its library's GEMV a host
    //! function, its weights memory of its own (`MockBackend::external_memory`).

    use super::*;
    use capture_graphs::DeviceConfig;
    use capture_graphs::mock::{MockBackend, MockKernel, MockWork};

    fn f32s(b: &[u8]) -> impl Iterator<Item = f32> + '_ {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
    }

    const AFFINE_KERNEL: MockKernel = MockKernel {
        name: "engine_affine",
        signature: AFFINE,
        f: |b, words| {
            let (n, a, c) = (
                words[0] as usize,
                f32::from_bits(words[1] as u32),
                f32::from_bits(words[2] as u32),
            );
            let h: Vec<u8> = f32s(&b[0])
                .take(n)
                .flat_map(|x| (a * x + c).to_le_bytes())
                .collect();
            b[1][..h.len()].copy_from_slice(&h);
        },
    };

    const TEMPERATURE_KERNEL: MockKernel = MockKernel {
        name: "engine_temperature",
        signature: TEMPERATURE_SIGNATURE,
        f: |b, words| {
            let (n, inv_t) = (words[0] as usize, f32::from_bits(words[1] as u32));
            let scaled: Vec<u8> = f32s(&b[0])
                .take(n)
                .flat_map(|v| (v * inv_t).to_le_bytes())
                .collect();
            b[0][..scaled.len()].copy_from_slice(&scaled);
        },
    };

    pub(crate) fn run(tokens: u32) -> Result<()> {
        let weights = Weights::new();
        let mock = MockBackend::new();
        // The engine's own memory, filled by the engine.
        let memory = mock.external_memory(u64::from(VOCAB * DIM) * 4);
        let bytes: Vec<u8> = weights
            .output
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        memory.write(0, &bytes);
        let dev = Device::new(mock, DeviceConfig::new())?;
        let imported = dev.import(S, memory.external())?;
        dev.assume_written(S, &imported)?;
        let gemv = MockWork::new("library_gemv", |ranges| {
            let w: Vec<f32> = f32s(&ranges[0]).collect();
            let h: Vec<f32> = f32s(&ranges[1]).collect();
            let y: Vec<u8> = w
                .chunks_exact(h.len())
                .flat_map(|row| {
                    let mut acc = 0.0f32;
                    for (a, b) in row.iter().zip(&h) {
                        acc += a * b;
                    }
                    acc.to_le_bytes()
                })
                .collect();
            ranges[2][..y.len()].copy_from_slice(&y);
            Ok(())
        });
        let engine = Engine {
            affine: dev.kernel(AFFINE_KERNEL),
            temperature: dev.kernel(TEMPERATURE_KERNEL),
            gemv,
            library: "a host function (MockWork)",
            weights: imported,
        };
        decode(&dev, engine, &weights, "mock", tokens)?;
        drop(dev);
        drop(memory); // after the device: the engine's memory outlived every use
        Ok(())
    }
}

#[cfg(feature = "vulkan")]
mod vulkan {
    //! On Vulkan: the engine's kernels are WGSL with push constants; its library's GEMV
    //! is a compute pipeline of the engine's own, dispatched by foreign work into the
    //! command buffer being recorded; its weights a `VkBuffer` it created and filled.

    use std::sync::Arc;

    use super::*;
    use capture_graphs::DeviceConfig;
    use capture_graphs::vulkan::ash::vk;
    use capture_graphs::vulkan::{
        VulkanBackend, VulkanExternal, VulkanKernelSource, VulkanOptions, VulkanRange, VulkanWork,
        ash, compile_wgsl,
    };

    const AFFINE_WGSL: &str = "
struct P { n: u32, a: f32, b: f32 }
var<immediate> p: P;
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> h: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < p.n { h[id.x] = p.a * x[id.x] + p.b; }
}
";

    const TEMPERATURE_WGSL: &str = "
struct P { n: u32, inv_t: f32 }
var<immediate> p: P;
@group(0) @binding(0) var<storage, read_write> logits: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < p.n { logits[id.x] = logits[id.x] * p.inv_t; }
}
";

    /// The library's GEMV: one invocation per row, columns in order.
    const GEMV_WGSL: &str = "
struct P { rows: u32, cols: u32 }
var<immediate> p: P;
@group(0) @binding(0) var<storage, read> w: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let r = id.x;
    if r < p.rows {
        var acc = 0.0;
        for (var c = 0u; c < p.cols; c++) { acc += w[r * p.cols + c] * x[c]; }
        y[r] = acc;
    }
}
";

    /// The library's pipeline, its layout and a descriptor pool it takes sets from.
    struct Library {
        device: ash::Device,
        module: vk::ShaderModule,
        set_layout: vk::DescriptorSetLayout,
        layout: vk::PipelineLayout,
        pipeline: vk::Pipeline,
        pool: vk::DescriptorPool,
    }

    /// Sets the library may take: one per recording (warmup, the window, the eager
    /// steps), each used by one command buffer.
    const SETS: u32 = 512;

    impl Library {
        fn new(device: &ash::Device) -> Result<Self> {
            let words = compile_wgsl("library_gemv", GEMV_WGSL)?;
            let fail = |what: &'static str| {
                move |e: vk::Result| {
                    capture_graphs::ServerError::invalid(what, e.to_string(), "Vulkan")
                }
            };
            // SAFETY: the engine's own objects on the backend's device, each info struct
            // alive across its call; destroyed in `drop` when the last work holding the
            // library is gone.
            unsafe {
                let module = device
                    .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&words), None)
                    .map_err(fail("shader module"))?;
                let bindings: Vec<_> = (0..3)
                    .map(|b| {
                        vk::DescriptorSetLayoutBinding::default()
                            .binding(b)
                            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                            .descriptor_count(1)
                            .stage_flags(vk::ShaderStageFlags::COMPUTE)
                    })
                    .collect();
                let set_layout = device
                    .create_descriptor_set_layout(
                        &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
                        None,
                    )
                    .map_err(fail("set layout"))?;
                let push = [vk::PushConstantRange::default()
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
                    .size(8)];
                let layouts = [set_layout];
                let layout = device
                    .create_pipeline_layout(
                        &vk::PipelineLayoutCreateInfo::default()
                            .set_layouts(&layouts)
                            .push_constant_ranges(&push),
                        None,
                    )
                    .map_err(fail("pipeline layout"))?;
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
                    .map_err(|(_, e)| fail("pipeline")(e))?[0];
                let sizes = [vk::DescriptorPoolSize {
                    ty: vk::DescriptorType::STORAGE_BUFFER,
                    descriptor_count: 3 * SETS,
                }];
                let pool = device
                    .create_descriptor_pool(
                        &vk::DescriptorPoolCreateInfo::default()
                            .max_sets(SETS)
                            .pool_sizes(&sizes),
                        None,
                    )
                    .map_err(fail("descriptor pool"))?;
                Ok(Self {
                    device: device.clone(),
                    module,
                    set_layout,
                    layout,
                    pipeline,
                    pool,
                })
            }
        }

        /// Records the GEMV over `(w, x, y)` into `cmd` with a fresh set of its own.
        fn record(
            &self,
            cmd: vk::CommandBuffer,
            ranges: &[VulkanRange],
            rows: u32,
            cols: u32,
        ) -> std::result::Result<(), String> {
            let layouts = [self.set_layout];
            // SAFETY: the pool and layouts are live; each recording takes a fresh set (at
            // most SETS in the program's life), so no set a pending command buffer uses
            // is updated; `cmd` is the recording command buffer the work was given; the
            // ranges are the declared ones.
            unsafe {
                let set = self
                    .device
                    .allocate_descriptor_sets(
                        &vk::DescriptorSetAllocateInfo::default()
                            .descriptor_pool(self.pool)
                            .set_layouts(&layouts),
                    )
                    .map_err(|e| format!("a descriptor set: {e}"))?[0];
                let infos: Vec<[vk::DescriptorBufferInfo; 1]> = ranges
                    .iter()
                    .map(|r| {
                        [vk::DescriptorBufferInfo {
                            buffer: r.buffer,
                            offset: r.offset,
                            range: r.size,
                        }]
                    })
                    .collect();
                let writes: Vec<_> = infos
                    .iter()
                    .enumerate()
                    .map(|(b, info)| {
                        vk::WriteDescriptorSet::default()
                            .dst_set(set)
                            .dst_binding(b as u32)
                            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                            .buffer_info(info)
                    })
                    .collect();
                self.device.update_descriptor_sets(&writes, &[]);
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
                let mut push = [0u8; 8];
                push[..4].copy_from_slice(&rows.to_le_bytes());
                push[4..].copy_from_slice(&cols.to_le_bytes());
                self.device.cmd_push_constants(
                    cmd,
                    self.layout,
                    vk::ShaderStageFlags::COMPUTE,
                    0,
                    &push,
                );
                self.device.cmd_dispatch(cmd, rows.div_ceil(64), 1, 1);
            }
            Ok(())
        }
    }

    impl Drop for Library {
        fn drop(&mut self) {
            // SAFETY: dropped when the last work holding it is gone: behind the fence of
            // the last run of any graph that recorded it.
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

    /// The engine's weights: a host-visible `VkBuffer` it created and filled.
    struct OwnBuffer {
        device: ash::Device,
        buffer: vk::Buffer,
        memory: vk::DeviceMemory,
        size: u64,
    }

    impl OwnBuffer {
        fn new(backend: &VulkanBackend, values: &[f32]) -> Result<Self> {
            let device = backend.ash_device().clone();
            let props = backend.memory_properties();
            let size = (values.len() * 4) as u64;
            let fail = |e: vk::Result| {
                capture_graphs::ServerError::invalid("weights", e.to_string(), "Vulkan")
            };
            // SAFETY: the engine's own buffer and memory on the backend's device, bound
            // and filled here, destroyed in `drop` after the device that imported it.
            unsafe {
                let buffer = device
                    .create_buffer(
                        &vk::BufferCreateInfo::default().size(size).usage(
                            vk::BufferUsageFlags::STORAGE_BUFFER
                                | vk::BufferUsageFlags::TRANSFER_SRC
                                | vk::BufferUsageFlags::TRANSFER_DST,
                        ),
                        None,
                    )
                    .map_err(fail)?;
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
                    .ok_or_else(|| {
                        capture_graphs::ServerError::invalid(
                            "weights",
                            "host-visible memory",
                            "no such memory type",
                        )
                    })?;
                let memory = device
                    .allocate_memory(
                        &vk::MemoryAllocateInfo::default()
                            .allocation_size(req.size)
                            .memory_type_index(index),
                        None,
                    )
                    .map_err(fail)?;
                device.bind_buffer_memory(buffer, memory, 0).map_err(fail)?;
                let at = device
                    .map_memory(memory, 0, size, vk::MemoryMapFlags::empty())
                    .map_err(fail)? as *mut f32;
                std::ptr::copy_nonoverlapping(values.as_ptr(), at, values.len());
                device.unmap_memory(memory);
                Ok(Self {
                    device,
                    buffer,
                    memory,
                    size,
                })
            }
        }
    }

    impl Drop for OwnBuffer {
        fn drop(&mut self) {
            // SAFETY: dropped after the device that imported it, and its graphs, are gone
            // and waited for.
            unsafe {
                self.device.destroy_buffer(self.buffer, None);
                self.device.free_memory(self.memory, None);
            }
        }
    }

    /// Runs the engine on Vulkan; with `validation`, under the Khronos validation layer,
    /// failing on any message it reports.
    pub(crate) fn run(tokens: u32, validation: bool) -> Result<()> {
        let options = VulkanOptions {
            validation,
            ..VulkanOptions::from_env()
        };
        let backend = match VulkanBackend::new(options) {
            Ok(backend) => backend,
            Err(why) => {
                println!("SKIP: engine_step on vulkan: {why}");
                return Ok(());
            }
        };
        println!("device: {}", backend.device_name());
        // The engine's own Vulkan objects live on the backend's device: a handle of the
        // backend keeps that device alive until they are destroyed, after the `Device`.
        let keep_device = backend.clone();
        let weights = Weights::new();
        let own = OwnBuffer::new(&backend, &weights.output)?;
        let library = Arc::new(Library::new(backend.ash_device())?);
        {
            let dev = Device::new(backend, DeviceConfig::new())?;
            // SAFETY: the buffer outlives the device (dropped after it, below), is bound,
            // has the usages named, and nothing else writes it meanwhile.
            let imported =
                dev.import(S, unsafe { VulkanExternal::new(own.buffer, 0, own.size) })?;
            dev.assume_written(S, &imported)?;
            let lib = Arc::clone(&library);
            // SAFETY: the work records one dispatch of the library's pipeline over the
            // three declared ranges only (w and x read, y written), into the command
            // buffer it is given; the pipeline, its layout and pool are kept by the work.
            let gemv = unsafe {
                VulkanWork::new("library_gemv", move |call| {
                    lib.record(call.command_buffer(), call.ranges(), VOCAB, DIM)
                })
            }
            .keep(library);
            let engine = Engine {
                affine: dev.kernel(VulkanKernelSource::wgsl(
                    "engine_affine",
                    AFFINE_WGSL,
                    "main",
                    AFFINE,
                )?),
                temperature: dev.kernel(VulkanKernelSource::wgsl(
                    "engine_temperature",
                    TEMPERATURE_WGSL,
                    "main",
                    TEMPERATURE_SIGNATURE,
                )?),
                gemv,
                library: "the engine's own pipeline, dispatched into the recorded command \
                          buffer (VulkanWork)",
                weights: imported,
            };
            decode(&dev, engine, &weights, "vulkan", tokens)?;
            dev.sync(S)?;
            dev.cleanup()?;
        }
        // The device, its graphs and the work (with the library) are gone: the engine's
        // buffer can go, then the last handle of the backend.
        drop(own);
        if validation {
            let messages = keep_device.take_validation_messages();
            if !messages.is_empty() {
                return Err(capture_graphs::ServerError::invalid(
                    "validation",
                    messages.len(),
                    format!("the validation layer reported: {}", messages.join("; ")),
                ));
            }
            println!("  validation layer: no messages");
        }
        drop(keep_device);
        Ok(())
    }
}

#[cfg(feature = "cudarc")]
mod cuda {
    //! On CUDA: the engine holds its context, stream and weights through cudarc, as a
    //! Rust engine does, and hands the context to the library; its kernels are CUDA C
    //! shipped as PTX; its library's GEMV a kernel of its own module, launched on the
    //! raw stream the foreign work is given (where a cuBLAS or flash-attention call
    //! would go).

    use std::ffi::{CString, c_void};
    use std::sync::Arc;

    use super::*;
    use capture_graphs::DeviceConfig;
    use capture_graphs::cuda::{CudaBackend, CudaExternal, CudaKernelSource, CudaWork};
    use cudarc::driver::{CudaContext, result, sys};

    /// The PTX NVRTC made of `engine_step.cu` (virtual architecture compute_80).
    const PTX: &str = include_str!("engine_step.compute_80.ptx");

    /// The library's module and its GEMV function, loaded before the device exists.
    struct Library {
        module: sys::CUmodule,
        gemv: sys::CUfunction,
        context: Arc<CudaContext>,
    }

    // SAFETY: the handles are the driver's, usable from any thread with the context
    // current (the backend makes it current for the work's calls).
    unsafe impl Send for Library {}
    // SAFETY: as above; the driver serialises launches itself.
    unsafe impl Sync for Library {}

    impl Drop for Library {
        fn drop(&mut self) {
            if self.context.bind_to_thread().is_ok() {
                // SAFETY: the last work holding the library is gone, so no graph can
                // replay a launch of its function any more.
                let _ = unsafe { result::module::unload(self.module) };
            }
        }
    }

    /// Says `SKIP:` with `why`, unless `CAPTURE_REQUIRE_CUDA=1` makes it an error.
    fn skip(why: String) -> Result<()> {
        if std::env::var("CAPTURE_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
            return Err(capture_graphs::ServerError::invalid(
                "CUDA",
                "CAPTURE_REQUIRE_CUDA=1",
                why,
            ));
        }
        println!("SKIP: engine_step on cuda: {why}");
        Ok(())
    }

    fn driver(what: &'static str) -> impl Fn(result::DriverError) -> capture_graphs::ServerError {
        move |e| capture_graphs::ServerError::driver(what, e)
    }

    pub(crate) fn run(tokens: u32) -> Result<()> {
        // SAFETY: the check only tries to load the driver library (cudarc panics on any
        // call without one); it calls no driver function.
        if !unsafe { sys::is_culib_present() } {
            return skip("no CUDA driver library (libcuda.so.1)".into());
        }
        let context = match CudaContext::device_count() {
            Ok(n) if n > 0 => CudaContext::new(0).map_err(driver("cuCtxCreate"))?,
            Ok(_) => return skip("no CUDA device".into()),
            Err(why) => return skip(format!("cuDeviceGetCount failed: {why}")),
        };
        let weights = Weights::new();
        let stream = context.default_stream();
        let own = stream
            .clone_htod(&weights.output)
            .map_err(driver("weights upload"))?;
        stream.synchronize().map_err(driver("weights upload"))?;
        context.bind_to_thread().map_err(driver("bind"))?;
        let ptx = CString::new(PTX).expect("no NUL in the PTX");
        // SAFETY: the context is current; the PTX is NUL-terminated and outlives the call.
        let module = unsafe { result::module::load_data(ptx.as_ptr().cast()) }
            .map_err(driver("cuModuleLoadData"))?;
        // SAFETY: `module` is live; the name is NUL-terminated.
        let gemv = unsafe {
            result::module::get_function(module, CString::new("engine_gemv").expect("a name"))
        }
        .map_err(driver("cuModuleGetFunction"))?;
        let library = Arc::new(Library {
            module,
            gemv,
            context: Arc::clone(&context),
        });
        let backend = CudaBackend::from_cudarc(Arc::clone(&context)).map_err(|e| {
            capture_graphs::ServerError::invalid("backend", e.to_string(), "the engine's context")
        })?;
        println!("device: {}", backend.device_name());
        {
            let dev = Device::new(backend, DeviceConfig::new())?;
            // SAFETY: the slice is the engine's, of this context, outlives the device
            // (dropped after it, below), and nothing writes it meanwhile; its upload was
            // synchronised above.
            let imported = dev.import(S, unsafe { CudaExternal::from_cudarc(&own, &stream) })?;
            dev.assume_written(S, &imported)?;
            let lib = Arc::clone(&library);
            let body = move |call: &capture_graphs::cuda::CudaWorkCall<'_>| {
                let [w, x, y] = call.ranges() else {
                    return Err(format!("3 ranges, not {}", call.ranges().len()));
                };
                let (mut wp, mut xp, mut yp) = (w.ptr, x.ptr, y.ptr);
                let (mut rows, mut cols) = (VOCAB, DIM);
                let mut params = [
                    (&mut wp as *mut u64).cast::<c_void>(),
                    (&mut xp as *mut u64).cast(),
                    (&mut yp as *mut u64).cast(),
                    (&mut rows as *mut u32).cast(),
                    (&mut cols as *mut u32).cast(),
                ];
                // SAFETY: `engine_gemv(const float*, const float*, float*, unsigned,
                // unsigned)` takes exactly these five values, which live across the call;
                // the ranges are the declared ones, sized for VOCAB rows of DIM floats;
                // the stream is the one given.
                unsafe {
                    result::launch_kernel(
                        lib.gemv,
                        (VOCAB.div_ceil(BLOCK), 1, 1),
                        (BLOCK, 1, 1),
                        0,
                        call.stream().cast(),
                        &mut params,
                    )
                }
                .map_err(|e| format!("cuLaunchKernel: {e}"))
            };
            // SAFETY: the work launches one kernel of the library's module, on the stream
            // it is given, over the three declared ranges only (w and x read, y written);
            // it synchronises and allocates nothing; the module is kept by the work.
            let gemv = unsafe { CudaWork::new("library_gemv", body) }.keep(library);
            let source = |entry: &'static str, signature| {
                CudaKernelSource::ptx(entry, PTX.to_owned(), entry, signature)
            };
            let engine = Engine {
                affine: dev.kernel(source("engine_affine", AFFINE)?),
                temperature: dev.kernel(source("engine_temperature", TEMPERATURE_SIGNATURE)?),
                gemv,
                library: "a kernel of the engine's own module, launched on the raw stream \
                          (CudaWork)",
                weights: imported,
            };
            decode(&dev, engine, &weights, "cuda", tokens)?;
            dev.sync(S)?;
            dev.cleanup()?;
        }
        drop(own);
        Ok(())
    }
}

fn main() -> std::process::ExitCode {
    let mut backend = String::from("mock");
    let mut tokens = 32;
    let mut validation = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--validation" {
            validation = true;
            continue;
        }
        match (arg.as_str(), args.next()) {
            ("--backend", Some(b)) => backend = b,
            ("--tokens", Some(t)) => match t.parse() {
                Ok(t) if t > 0 => tokens = t,
                _ => return usage(&format!("--tokens wants a positive count, not {t}")),
            },
            (other, _) => return usage(&format!("unknown argument {other}")),
        }
    }
    if validation && backend != "vulkan" {
        return usage("--validation runs the Vulkan validation layer: it takes --backend vulkan");
    }
    let ran = match backend.as_str() {
        "mock" => mock::run(tokens),
        #[cfg(feature = "vulkan")]
        "vulkan" => vulkan::run(tokens, validation),
        #[cfg(feature = "cudarc")]
        "cuda" => cuda::run(tokens),
        other => {
            return usage(&format!(
                "backend {other} is not built in (mock; vulkan with --features vulkan; cuda \
                 with --features cudarc)"
            ));
        }
    };
    match ran {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("engine_step: {}", Chain(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

fn usage(why: &str) -> std::process::ExitCode {
    eprintln!(
        "engine_step: {why}\nusage: engine_step [--backend mock|vulkan|cuda] [--tokens N] \
         [--validation (vulkan)]"
    );
    std::process::ExitCode::from(2)
}
