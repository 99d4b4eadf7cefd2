//! Your own kernel on CUDA: CUDA C (`square_plus.cu`) compiled to PTX ahead of time and
//! shipped beside it, registered with its signature (checked against the PTX's
//! parameters when it loads), launched eagerly and replayed from a graph.
//!
//! `cargo run -p capture-graphs --features cuda --example cuda_user_kernel`. Prints
//! `SKIP:` and exits 0 where no CUDA driver and GPU are present.

use capture_graphs::cuda::{CudaBackend, CudaKernelSource};
use capture_graphs::{Arg, Device, DeviceConfig, KernelSignature, StreamId};

/// The PTX NVRTC made of `square_plus.cu` (virtual architecture compute_80; the driver
/// compiles it for the GPU at hand).
const SQUARE_PLUS_PTX: &str = include_str!("square_plus.compute_80.ptx");

fn main() -> capture_graphs::Result<()> {
    let backend = match CudaBackend::new(0) {
        Ok(backend) => backend,
        Err(why) => {
            println!("SKIP: cuda_user_kernel: {why}");
            return Ok(());
        }
    };
    let dev = Device::new(backend, DeviceConfig::new())?;
    let s = StreamId::new(0);
    // Two buffers (pointer and length each) and two info words: what the PTX takes.
    let source = CudaKernelSource::ptx(
        "square_plus",
        SQUARE_PLUS_PTX.to_owned(),
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
        // Compiled without FMA contraction: the device rounds as the host does.
        assert_eq!(eager[i], v * v + 1.0, "eager, element {i}");
        assert_eq!(replayed[i], v * v + 2.0, "replayed, element {i}");
    }
    println!("square_plus over {n} floats: eager and replayed results match the host");
    dev.drop_graph(graph)
}
