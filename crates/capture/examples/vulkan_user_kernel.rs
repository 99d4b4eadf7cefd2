//! Your own kernel on Vulkan: WGSL compiled to SPIR-V by naga here, registered with its
//! binding layout, launched eagerly and replayed from a graph.
//!
//! `cargo run -p capture-graphs --features vulkan --example vulkan_user_kernel`
//! (`CAPTURE_VULKAN_DEVICE=llvmpipe` picks lavapipe). Prints `SKIP:` and exits 0 where
//! no Vulkan device can be opened.

use capture_graphs::vulkan::{VulkanBackend, VulkanKernelSource, VulkanOptions};
use capture_graphs::{Arg, Device, DeviceConfig, KernelSignature, StreamId};

/// `y[i] = x[i] * x[i] + b`: two storage buffers at bindings 0 and 1, then the info
/// words (u64 each, read here as pairs of u32) at binding 2: `[n, bits of b]`.
const SQUARE_PLUS: &str = "
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read> info: array<u32>;
@compute @workgroup_size(64)
fn square_plus(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n = min(info[0], arrayLength(&y));
    if gid.x < n {
        y[gid.x] = x[gid.x] * x[gid.x] + bitcast<f32>(info[2]);
    }
}
";

fn spirv(wgsl: &str) -> Vec<u32> {
    let module = naga::front::wgsl::parse_str(wgsl).expect("valid WGSL");
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::empty(),
    )
    .validate(&module)
    .expect("a valid module");
    naga::back::spv::write_vec(&module, &info, &naga::back::spv::Options::default(), None)
        .expect("SPIR-V")
}

fn main() -> capture_graphs::Result<()> {
    let backend = match VulkanBackend::new(VulkanOptions::from_env()) {
        Ok(backend) => backend,
        Err(why) => {
            println!("SKIP: vulkan_user_kernel: {why}");
            return Ok(());
        }
    };
    println!("device: {}", backend.device_name());
    let dev = Device::new(backend, DeviceConfig::new())?;
    let s = StreamId::new(0);
    // Two buffers and two info words: the signature the layout above declares.
    let source = VulkanKernelSource::spirv(
        "square_plus",
        spirv(SQUARE_PLUS),
        "square_plus",
        KernelSignature::new(2, 2),
    )?;
    let kernel = dev.kernel(source);
    let n = 1000u64;
    let x = dev.alloc(s, n * 4)?;
    let y = dev.alloc(s, n * 4)?;
    let info = |b: f32| [n, u64::from(b.to_bits())];
    let grid = [n.div_ceil(64) as u32, 1, 1];
    let input: Vec<f32> = (0..n).map(|i| i as f32 / 10.0).collect();
    dev.write_values(s, &x, 0, &input)?;

    dev.launch(
        s,
        &kernel,
        grid,
        &[Arg::read(&x), Arg::write(&y)],
        &info(1.0),
    )?;
    let eager: Vec<f32> = dev.read_values(s, &y)?;
    let graph = dev.capture(s, |d| {
        d.launch(
            s,
            &kernel,
            grid,
            &[Arg::read(&x), Arg::write(&y)],
            &info(2.0),
        )
    })?;
    dev.write_values(s, &y, 0, &vec![0.0f32; n as usize])?;
    dev.replay(s, &graph, 1)?;
    let replayed: Vec<f32> = dev.read_values(s, &y)?;
    for (i, v) in input.iter().enumerate() {
        assert_eq!(eager[i], v * v + 1.0, "eager, element {i}");
        assert_eq!(replayed[i], v * v + 2.0, "replayed, element {i}");
    }
    println!("square_plus over {n} floats: eager and replayed results match the host");
    dev.drop_graph(graph)
}
