//! A decode step over a paged KV cache, captured once per sequence into one graph pool
//! and changed per token through its slots: the token's row in its page is a `u32`
//! scalar slot (`"pos"`), the page itself a buffer slot (`"kv"`) rebound when a page
//! fills (rules 26 and 27). The slot handles are taken once, and each token sets both in
//! one call, checked together (all or nothing). The captures point every slot at a
//! scratch page, so warmup (which runs the step for real) writes no page of the cache:
//! the way to capture a step without side effects.
//!
//! Per token of a sequence: `h = x·2` (a builtin), `page[pos] = h` (the engine's own
//! kernel), `out = mean(page[0..=pos])` (another). Two sequences, each its own pages and
//! its own graph; both graphs in one pool share the intermediate `h` each allocated in
//! its capture (rule 23). Checked: every token's `out`, replayed, is bit for bit the
//! eager step's over the same page and row, and the plain-Rust reference agrees.
//!
//! ```text
//! cargo run -p capture-graphs --example paged_step [-- --backend mock|vulkan|cuda] [--tokens N]
//! ```
//!
//! `--validation` runs Vulkan under the Khronos validation layer and fails on any message.
//! `vulkan` needs `--features vulkan`, `cuda` needs `--features cuda`. A backend whose
//! device cannot be opened prints `SKIP:` and exits 0.

use capture_graphs::{
    Arg, Buffer, Builtin, Builtins, Chain, Device, DeviceConfig, Dims, GraphHandle, KernelHandle,
    KernelSignature, Param, Result, ServerError, StreamId,
};

const S: StreamId = StreamId::new(0);
/// Floats per row (the model's width).
const DIM: u32 = 64;
/// Rows per page of the KV cache.
const ROWS: u32 = 4;
/// Sequences decoded side by side, each with its own pages and graph.
const SEQUENCES: u32 = 2;
/// Threads per block (workgroup) of the engine's kernels.
const BLOCK: u32 = 64;

/// `paged_append(h, page, row, dim)`: `page[row * dim + i] = h[i]`.
const APPEND: KernelSignature = KernelSignature::of(&[
    Param::READ,
    Param::READ_WRITE,
    Param::scalar::<u32>(),
    Param::scalar::<u32>(),
]);
/// `paged_attend(page, out, pos, dim)`: `out[i]` the mean of `page[r * dim + i]` over
/// `r <= pos`.
const ATTEND: KernelSignature = KernelSignature::of(&[
    Param::READ,
    Param::WRITE,
    Param::scalar::<u32>(),
    Param::scalar::<u32>(),
]);

/// The step's kernels.
struct Kernels {
    scale: KernelHandle,
    append: KernelHandle,
    attend: KernelHandle,
}

/// One sequence: its input and output, and its pages.
struct Sequence {
    x: Buffer,
    out: Buffer,
    pages: Vec<Buffer>,
}

/// Token `t` of sequence `seq`'s input.
fn input(seq: u32, t: u32) -> Vec<f32> {
    (0..DIM)
        .map(|i| ((i * 37 + t * 11 + seq * 101) % 97) as f32 / 16.0 - 3.0)
        .collect()
}

/// The reference: token `t`'s output, in plain Rust.
fn reference(seq: u32, t: u32) -> Vec<f32> {
    let first = t - t % ROWS;
    let rows: Vec<Vec<f32>> = (first..=t)
        .map(|k| input(seq, k).iter().map(|v| v * 2.0).collect())
        .collect();
    (0..DIM as usize)
        .map(|i| {
            let mut acc = 0.0f32;
            for row in &rows {
                acc += row[i];
            }
            acc / rows.len() as f32
        })
        .collect()
}

/// One step of a sequence: `h = x·2`, `page[row] = h`, `out = mean(page[0..=row])`. In
/// a capture, `page` and `row` are the graph's slots.
fn step<B: Builtins>(
    dev: &Device<B>,
    k: &Kernels,
    seq: &Sequence,
    h: &Buffer,
    page: &Buffer,
    row: u32,
) -> Result<()> {
    let grid = Dims::grid([DIM.div_ceil(BLOCK), 1, 1]).block([BLOCK, 1, 1]);
    let scale = Builtin::MulScalar;
    dev.launch(
        S,
        &k.scale,
        [1, 1, 1],
        &[Arg::read(&seq.x), Arg::write(h)],
        &scale.info(u64::from(DIM), 2.0),
    )?;
    let pos = Arg::scalar(row).slot("pos");
    dev.launch(
        S,
        &k.append,
        grid,
        &[
            Arg::read(h),
            Arg::read_write(page).slot("kv"),
            pos.clone(),
            Arg::scalar(DIM),
        ],
        &[],
    )?;
    dev.launch(
        S,
        &k.attend,
        grid,
        &[
            Arg::read(page).slot("kv"),
            Arg::write(&seq.out),
            pos,
            Arg::scalar(DIM),
        ],
        &[],
    )
}

fn zeroed<B: Builtins>(dev: &Device<B>, bytes: u64) -> Result<Buffer> {
    let b = dev.alloc(S, bytes)?;
    dev.write(S, &b, 0, vec![0u8; bytes as usize])?;
    Ok(b)
}

fn run<B: Builtins>(
    dev: Device<B>,
    append: B::KernelSource,
    attend: B::KernelSource,
    backend: &str,
    tokens: u32,
) -> Result<()> {
    let k = Kernels {
        scale: dev.builtin(Builtin::MulScalar),
        append: dev.kernel(append),
        attend: dev.kernel(attend),
    };
    let row_bytes = u64::from(DIM) * 4;
    let pages = tokens.div_ceil(ROWS);
    let sequences: Vec<Sequence> = (0..SEQUENCES)
        .map(|_| {
            Ok(Sequence {
                x: zeroed(&dev, row_bytes)?,
                out: dev.alloc(S, row_bytes)?,
                pages: (0..pages)
                    .map(|_| zeroed(&dev, row_bytes * u64::from(ROWS)))
                    .collect::<Result<_>>()?,
            })
        })
        .collect::<Result<_>>()?;
    // Eager: every token of every sequence, the step run call by call.
    let h = dev.alloc(S, row_bytes)?;
    let mut eager = Vec::new();
    for t in 0..tokens {
        for (n, seq) in sequences.iter().enumerate() {
            dev.write_values(S, &seq.x, 0, &input(n as u32, t))?;
            step(&dev, &k, seq, &h, &seq.pages[(t / ROWS) as usize], t % ROWS)?;
            eager.push(dev.read_values::<f32>(S, &seq.out)?);
        }
    }
    drop(h);
    // The same pages again, from zero, for the replays.
    for seq in &sequences {
        for page in &seq.pages {
            dev.write(
                S,
                page,
                0,
                vec![0u8; (row_bytes * u64::from(ROWS)) as usize],
            )?;
        }
    }
    // One graph per sequence, in one pool: each capture's `h` is the pool's memory.
    // Every slot points at a scratch page during the capture, so warmup writes no page
    // of the cache.
    let pool = dev.graph_pool("paged sequences")?;
    let scratch = zeroed(&dev, row_bytes * u64::from(ROWS))?;
    let graphs: Vec<GraphHandle> = sequences
        .iter()
        .map(|seq| {
            dev.capture_in(S, &pool, |d| {
                let h = d.alloc(S, row_bytes)?;
                step(d, &k, seq, &h, &scratch, 0)
            })
        })
        .collect::<Result<_>>()?;
    // The slot handles, taken once: per token no name is looked up.
    let handles = graphs
        .iter()
        .map(|g| Ok((g.slot::<u32>("pos")?, g.buffer_slot("kv")?)))
        .collect::<Result<Vec<_>>>()?;
    let mut worst = 0.0f32;
    let mut rebinds = 0;
    for t in 0..tokens {
        for (n, seq) in sequences.iter().enumerate() {
            let (pos, kv) = &handles[n];
            dev.write_values(S, &seq.x, 0, &input(n as u32, t))?;
            // Both slots in one call: the row, and the page (a new one every ROWS tokens).
            graphs[n].update([pos.to(t % ROWS), kv.to(&seq.pages[(t / ROWS) as usize])])?;
            rebinds += usize::from(t % ROWS == 0);
            dev.replay(S, &graphs[n], 1)?;
            let out: Vec<f32> = dev.read_values(S, &seq.out)?;
            let want = &eager[(t * SEQUENCES) as usize + n];
            if out != *want {
                return Err(ServerError::invalid(
                    "replay",
                    t,
                    format!("sequence {n}'s token {t} differs from the eager step's"),
                ));
            }
            for (got, want) in out.iter().zip(reference(n as u32, t)) {
                worst = worst.max((got - want).abs() / want.abs().max(1.0));
            }
        }
    }
    if worst > 1e-5 {
        return Err(ServerError::invalid(
            "reference",
            worst,
            "the device's step is this far from the plain-Rust reference",
        ));
    }
    let report = dev.memory_report();
    println!(
        "paged_step on {backend}: {SEQUENCES} sequences x {tokens} tokens over pages of \
         {ROWS} rows; each token's position and page set through the graph's slots \
         ({rebinds} page rebinds), every output bit for bit the eager step's, reference \
         within {worst:.1e}"
    );
    for pool in &report.pools {
        // Each member's intermediate in the pool's memory, counted once.
        println!("  graph pool {pool}");
    }
    drop(handles);
    for g in graphs {
        dev.drop_graph(g)?;
    }
    dev.sync(S)
}

mod mock {
    //! On the mock: the engine's kernels are Rust functions over the launch's bytes.

    use super::*;
    use capture_graphs::mock::{MockBackend, MockKernel};

    fn f(b: &[u8], i: usize) -> f32 {
        f32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().expect("4 bytes"))
    }

    pub(crate) const APPEND_KERNEL: MockKernel = MockKernel {
        name: "paged_append",
        signature: APPEND,
        f: |b, words| {
            let (row, dim) = (words[0] as usize, words[1] as usize);
            for i in 0..dim {
                let v = f(&b[0], i);
                b[1][(row * dim + i) * 4..(row * dim + i) * 4 + 4]
                    .copy_from_slice(&v.to_le_bytes());
            }
        },
    };

    pub(crate) const ATTEND_KERNEL: MockKernel = MockKernel {
        name: "paged_attend",
        signature: ATTEND,
        f: |b, words| {
            let (pos, dim) = (words[0] as usize, words[1] as usize);
            for i in 0..dim {
                let mut acc = 0.0f32;
                for r in 0..=pos {
                    acc += f(&b[0], r * dim + i);
                }
                let v = acc / (pos + 1) as f32;
                b[1][i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
            }
        },
    };

    pub(crate) fn run(tokens: u32) -> Result<()> {
        let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
        super::run(dev, APPEND_KERNEL, ATTEND_KERNEL, "mock", tokens)
    }
}

#[cfg(feature = "vulkan")]
mod vulkan {
    //! On Vulkan: the engine's kernels are WGSL, their row and width push constants.

    use super::*;
    use capture_graphs::vulkan::{VulkanBackend, VulkanKernelSource, VulkanOptions};

    const APPEND_WGSL: &str = "
struct P { row: u32, dim: u32 }
var<immediate> p: P;
@group(0) @binding(0) var<storage, read> h: array<f32>;
@group(0) @binding(1) var<storage, read_write> page: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < p.dim { page[p.row * p.dim + id.x] = h[id.x]; }
}
";

    const ATTEND_WGSL: &str = "
struct P { pos: u32, dim: u32 }
var<immediate> p: P;
@group(0) @binding(0) var<storage, read> page: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i < p.dim {
        var acc = 0.0;
        for (var r = 0u; r <= p.pos; r++) { acc += page[r * p.dim + i]; }
        out[i] = acc / f32(p.pos + 1u);
    }
}
";

    pub(crate) fn run(tokens: u32, validation: bool) -> Result<()> {
        let options = VulkanOptions {
            validation,
            ..VulkanOptions::from_env()
        };
        let backend = match VulkanBackend::new(options) {
            Ok(b) => b,
            Err(why) => {
                println!("SKIP: paged_step on vulkan: {why}");
                return Ok(());
            }
        };
        let keep = backend.clone();
        let append = VulkanKernelSource::wgsl("paged_append", APPEND_WGSL, "main", APPEND)?;
        let attend = VulkanKernelSource::wgsl("paged_attend", ATTEND_WGSL, "main", ATTEND)?;
        let dev = Device::new(backend, DeviceConfig::new())?;
        super::run(dev, append, attend, "vulkan", tokens)?;
        let messages = keep.take_validation_messages();
        if validation {
            if !messages.is_empty() {
                return Err(ServerError::invalid(
                    "validation",
                    messages.len(),
                    format!("the validation layer reported: {}", messages.join("; ")),
                ));
            }
            println!("  validation layer: no messages");
        }
        Ok(())
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    //! On CUDA: the engine's kernels are CUDA C shipped as PTX (`paged_step.cu`).

    use super::*;
    use capture_graphs::cuda::{CudaBackend, CudaKernelSource};

    /// The PTX NVRTC made of `paged_step.cu` (virtual architecture compute_80).
    const PTX: &str = include_str!("paged_step.compute_80.ptx");

    pub(crate) fn run(tokens: u32) -> Result<()> {
        let backend = match CudaBackend::new(0) {
            Ok(b) => b,
            Err(why) => {
                if std::env::var("CAPTURE_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
                    return Err(why.into());
                }
                println!("SKIP: paged_step on cuda: {why}");
                return Ok(());
            }
        };
        let source = |entry: &'static str, signature| {
            CudaKernelSource::ptx(entry, PTX.to_owned(), entry, signature)
        };
        let (append, attend) = (
            source("paged_append", APPEND)?,
            source("paged_attend", ATTEND)?,
        );
        let dev = Device::new(backend, DeviceConfig::new())?;
        super::run(dev, append, attend, "cuda", tokens)
    }
}

fn main() -> std::process::ExitCode {
    let mut backend = String::from("mock");
    let mut tokens = 12;
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
        #[cfg(feature = "cuda")]
        "cuda" => cuda::run(tokens),
        other => {
            return usage(&format!(
                "backend {other} is not built in (mock; vulkan with --features vulkan; cuda \
                 with --features cuda)"
            ));
        }
    };
    match ran {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("paged_step: {}", Chain(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

fn usage(why: &str) -> std::process::ExitCode {
    eprintln!(
        "paged_step: {why}\nusage: paged_step [--backend mock|vulkan|cuda] [--tokens N] \
         [--validation (vulkan)]"
    );
    std::process::ExitCode::from(2)
}
