//! Decode until the device says stop (rule 30): the step is captured once, its sampler
//! sets a stop flag on the end token (or when the context is full), and one
//! `replay_until` runs the graph on the device token after token until the flag is set,
//! with no host round trip per token. The token is fed back on the device (the step
//! reads its position and token from a state buffer and advances it).
//!
//! Per token: `toy_logits` (a stand-in for the model: small integers every backend
//! computes exactly) and `toy_sample` (the argmax, the token's id into the history, the
//! state advanced, the flag set on the end token). Checked: the loop's tokens and count
//! are exactly the eager step's (which checks the flag on the host after every token)
//! and the plain-Rust reference's. Timed, for the record: per-token replays with a
//! host check each, `replay(g, 8)` with a host check every 8 (overshooting the end),
//! and the loop.
//!
//! ```text
//! cargo run -p capture-graphs --example decode_until [-- --backend mock|vulkan|cuda]
//! ```
//!
//! `--validation` runs Vulkan under the Khronos validation layer and fails on any message.
//! `vulkan` needs `--features vulkan`, `cuda` needs `--features cuda`. A backend whose
//! device cannot be opened prints `SKIP:` and exits 0.

use std::time::Instant;

use capture_graphs::{
    Arg, Backend, Buffer, Chain, Device, DeviceConfig, GraphHandle, KernelHandle, KernelSignature,
    Param, Result, ServerError, StreamId,
};

const S: StreamId = StreamId::new(0);
/// The vocabulary.
const VOCAB: u32 = 64;
/// The context: the most tokens a sequence has.
const CONTEXT: u32 = 48;
/// The prompt's token.
const PROMPT: u32 = 5;
/// Threads per block (workgroup) of the logits kernel.
const BLOCK: u32 = 64;
/// Tokens per `replay(g, K)` in the timed comparison.
const K: u32 = 8;

/// `toy_logits(state, logits, vocab)`.
const LOGITS: KernelSignature =
    KernelSignature::of(&[Param::READ, Param::WRITE, Param::scalar::<u32>()]);
/// `toy_sample(state, logits, ids, done, vocab, eos, context)`.
const SAMPLE: KernelSignature = KernelSignature::of(&[
    Param::READ_WRITE,
    Param::READ,
    Param::READ_WRITE,
    Param::WRITE,
    Param::scalar::<u32>(),
    Param::scalar::<u32>(),
    Param::scalar::<u32>(),
]);

/// The plain-Rust reference: the ids a sequence from `prompt` emits until `eos` or the
/// context's end.
fn reference(prompt: u32, eos: Option<u32>) -> Vec<u32> {
    let (mut pos, mut tok, mut ids) = (0u32, prompt, Vec::new());
    loop {
        let logit = |v: u32| (tok * 131 + pos * 17 + v * 29) % 97;
        let best = (1..VOCAB).fold(0, |b, v| if logit(v) > logit(b) { v } else { b });
        ids.push(best);
        pos += 1;
        tok = best;
        if Some(best) == eos || pos >= CONTEXT {
            return ids;
        }
    }
}

/// The step's buffers and kernels.
struct Step {
    state: Buffer,
    logits: Buffer,
    ids: Buffer,
    done: Buffer,
    logits_kernel: KernelHandle,
    sample_kernel: KernelHandle,
    eos: u32,
}

impl Step {
    /// One token: the logits, then the sampler, whose `done` is the graph's stop flag
    /// (inside a window; outside one the name does nothing).
    fn launch<B: Backend>(&self, dev: &Device<B>) -> Result<()> {
        dev.launch(
            S,
            &self.logits_kernel,
            [VOCAB.div_ceil(BLOCK), 1, 1],
            &[
                Arg::read(&self.state),
                Arg::write(&self.logits),
                Arg::scalar(VOCAB),
            ],
            &[],
        )?;
        dev.launch(
            S,
            &self.sample_kernel,
            [1, 1, 1],
            &[
                Arg::read_write(&self.state),
                Arg::read(&self.logits),
                Arg::read_write(&self.ids),
                Arg::write(&self.done).stop_flag(),
                Arg::scalar(VOCAB),
                Arg::scalar(self.eos),
                Arg::scalar(CONTEXT),
            ],
            &[],
        )
    }

    /// A fresh sequence: position 0, the prompt, no ids, the flag down.
    fn reset<B: Backend>(&self, dev: &Device<B>) -> Result<()> {
        dev.write_values(S, &self.state, 0, &[0u32, PROMPT])?;
        dev.write_values(S, &self.ids, 0, &[u32::MAX; CONTEXT as usize])?;
        dev.write_values(S, &self.done, 0, &[0u32])
    }

    /// The sequence's ids so far: up to and including the first end token.
    fn ids<B: Backend>(&self, dev: &Device<B>, count: u32) -> Result<Vec<u32>> {
        let all: Vec<u32> = dev.read_values(S, &self.ids)?;
        let mut ids: Vec<u32> = all[..count.min(CONTEXT) as usize].to_vec();
        if let Some(end) = ids.iter().position(|&t| t == self.eos) {
            ids.truncate(end + 1);
        }
        Ok(ids)
    }

    fn flag<B: Backend>(&self, dev: &Device<B>) -> Result<bool> {
        Ok(dev.read_values::<u32>(S, &self.done)?[0] != 0)
    }
}

/// Tokens per second over `tokens` in `seconds`.
fn rate(tokens: usize, seconds: f64) -> f64 {
    tokens as f64 / seconds.max(1e-9)
}

fn run<B: Backend>(
    dev: Device<B>,
    logits: B::KernelSource,
    sample: B::KernelSource,
    backend: &str,
) -> Result<()> {
    // The end token: the one the reference emits 20th, so the sequence stops there (or
    // earlier, where it first comes).
    let eos = reference(PROMPT, None)[19];
    let want = reference(PROMPT, Some(eos));
    let step = Step {
        state: dev.alloc(S, 8)?,
        logits: dev.alloc(S, u64::from(VOCAB) * 4)?,
        ids: dev.alloc(S, u64::from(CONTEXT) * 4)?,
        done: dev.alloc(S, 4)?,
        logits_kernel: dev.kernel(logits),
        sample_kernel: dev.kernel(sample),
        eos,
    };

    // Eager: the flag checked on the host after every token.
    step.reset(&dev)?;
    let mut n = 0;
    while n < CONTEXT {
        step.launch(&dev)?;
        n += 1;
        if step.flag(&dev)? {
            break;
        }
    }
    let eager = step.ids(&dev, n)?;

    // Captured once (warmup runs the step for real, so the sequence starts afresh).
    step.reset(&dev)?;
    let graph = dev.capture(S, |d| step.launch(d))?;

    // One loop first, untimed: a graph's first loop replay builds its loop (CUDA
    // instantiates the loop graph, Vulkan loads the loop's setter kernel), once.
    step.reset(&dev)?;
    dev.replay_until(S, &graph, 1)?;

    // The loop: one call, the device stops it.
    step.reset(&dev)?;
    let started = Instant::now();
    let counter = dev.replay_until(S, &graph, CONTEXT)?;
    let ran: u32 = dev.read_values(S, &counter)?[0];
    let loop_s = started.elapsed().as_secs_f64();
    let looped = step.ids(&dev, ran)?;
    let check = |what: &str, got: &[u32]| -> Result<()> {
        if got == want.as_slice() {
            Ok(())
        } else {
            Err(ServerError::invalid(
                "tokens",
                what.to_string(),
                format!("{what} gave {got:?}, the reference {want:?}"),
            ))
        }
    };
    check("the eager step", &eager)?;
    check("the loop", &looped)?;
    if ran as usize != want.len() {
        return Err(ServerError::invalid(
            "iterations",
            ran,
            format!("the loop ran {ran} iterations for {} tokens", want.len()),
        ));
    }

    // For the record: per-token replays, and replays of K with a host check each.
    let per_token_s = timed(&dev, &step, &graph, 1)?;
    let chunks_s = timed(&dev, &step, &graph, K)?;
    let tokens = want.len();
    println!(
        "decode_until on {backend}: {tokens} tokens until the end token {eos} (context \
         {CONTEXT}), the loop's {ran} iterations ended on the device; every token the \
         eager step's and the reference's"
    );
    println!(
        "  tokens/s: loop {:.0}, replay x{K} with a host check each {:.0}, per-token \
         replays {:.0}",
        rate(tokens, loop_s),
        rate(tokens, chunks_s),
        rate(tokens, per_token_s)
    );
    dev.drop_graph(graph)?;
    dev.sync(S)
}

/// Decodes the sequence with `replay(graph, k)` and a host check of the flag after
/// each: the overshoot past the end token is run and thrown away. Returns the seconds.
fn timed<B: Backend>(dev: &Device<B>, step: &Step, graph: &GraphHandle, k: u32) -> Result<f64> {
    step.reset(dev)?;
    let started = Instant::now();
    let mut n = 0;
    while n < CONTEXT {
        dev.replay(S, graph, k)?;
        n += k;
        if step.flag(dev)? {
            break;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let ids = step.ids(dev, n)?;
    if ids != reference(PROMPT, Some(step.eos)) {
        return Err(ServerError::invalid(
            "tokens",
            k,
            format!("replays of {k} gave {ids:?}"),
        ));
    }
    Ok(seconds)
}

mod mock {
    //! On the mock: the kernels are Rust functions over the launch's bytes.

    use super::*;
    use capture_graphs::mock::{MockBackend, MockKernel};

    fn u(b: &[u8], i: usize) -> u32 {
        u32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().expect("4 bytes"))
    }

    fn f(b: &[u8], i: usize) -> f32 {
        f32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().expect("4 bytes"))
    }

    pub(crate) const LOGITS_KERNEL: MockKernel = MockKernel {
        name: "toy_logits",
        signature: LOGITS,
        f: |b, words| {
            let (pos, tok) = (u(&b[0], 0), u(&b[0], 1));
            for v in 0..words[0] as u32 {
                let logit = ((tok * 131 + pos * 17 + v * 29) % 97) as f32;
                b[1][v as usize * 4..v as usize * 4 + 4].copy_from_slice(&logit.to_le_bytes());
            }
        },
    };

    pub(crate) const SAMPLE_KERNEL: MockKernel = MockKernel {
        name: "toy_sample",
        signature: SAMPLE,
        f: |b, words| {
            let (vocab, eos, context) = (words[0] as usize, words[1] as u32, words[2] as u32);
            let best =
                (1..vocab).fold(0, |m, v| if f(&b[1], v) > f(&b[1], m) { v } else { m }) as u32;
            let pos = u(&b[0], 0);
            if pos < context {
                b[2][pos as usize * 4..pos as usize * 4 + 4].copy_from_slice(&best.to_le_bytes());
            }
            b[0][..4].copy_from_slice(&(pos + 1).to_le_bytes());
            b[0][4..8].copy_from_slice(&best.to_le_bytes());
            if best == eos || pos + 1 >= context {
                b[3][..4].copy_from_slice(&1u32.to_le_bytes());
            }
        },
    };

    pub(crate) fn run() -> Result<()> {
        let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
        super::run(dev, LOGITS_KERNEL, SAMPLE_KERNEL, "mock")
    }
}

#[cfg(feature = "vulkan")]
mod vulkan {
    //! On Vulkan: the kernels are WGSL, their scalars push constants.

    use super::*;
    use capture_graphs::vulkan::{VulkanBackend, VulkanKernelSource, VulkanOptions};

    const LOGITS_WGSL: &str = "
struct P { vocab: u32 }
var<immediate> p: P;
@group(0) @binding(0) var<storage, read> state: array<u32>;
@group(0) @binding(1) var<storage, read_write> logits: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let v = id.x;
    if v < p.vocab {
        logits[v] = f32((state[1] * 131u + state[0] * 17u + v * 29u) % 97u);
    }
}
";

    const SAMPLE_WGSL: &str = "
struct P { vocab: u32, eos: u32, context: u32 }
var<immediate> p: P;
@group(0) @binding(0) var<storage, read_write> state: array<u32>;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> done: array<u32>;
@compute @workgroup_size(1)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x != 0u { return; }
    var best = 0u;
    for (var v = 1u; v < p.vocab; v++) {
        if logits[v] > logits[best] { best = v; }
    }
    let pos = state[0];
    if pos < p.context { ids[pos] = best; }
    state[0] = pos + 1u;
    state[1] = best;
    if best == p.eos || pos + 1u >= p.context { done[0] = 1u; }
}
";

    pub(crate) fn run(validation: bool) -> Result<()> {
        let options = VulkanOptions {
            validation,
            ..VulkanOptions::from_env()
        };
        let backend = match VulkanBackend::new(options) {
            Ok(b) => b,
            Err(why) => {
                println!("SKIP: decode_until on vulkan: {why}");
                return Ok(());
            }
        };
        let keep = backend.clone();
        let logits = VulkanKernelSource::wgsl("toy_logits", LOGITS_WGSL, "main", LOGITS)?;
        let sample = VulkanKernelSource::wgsl("toy_sample", SAMPLE_WGSL, "main", SAMPLE)?;
        let dev = Device::new(backend, DeviceConfig::new())?;
        super::run(dev, logits, sample, "vulkan")?;
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
    //! On CUDA: the kernels are CUDA C shipped as PTX (`decode_until.cu`).

    use super::*;
    use capture_graphs::cuda::{CudaBackend, CudaKernelSource};

    /// The PTX NVRTC made of `decode_until.cu` (virtual architecture compute_80).
    const PTX: &str = include_str!("decode_until.compute_80.ptx");

    pub(crate) fn run() -> Result<()> {
        let backend = match CudaBackend::new(0) {
            Ok(b) => b,
            Err(why) => {
                if std::env::var("CAPTURE_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
                    return Err(why.into());
                }
                println!("SKIP: decode_until on cuda: {why}");
                return Ok(());
            }
        };
        let source = |entry: &'static str, signature| {
            CudaKernelSource::ptx(entry, PTX.to_owned(), entry, signature)
        };
        let (logits, sample) = (source("toy_logits", LOGITS)?, source("toy_sample", SAMPLE)?);
        let dev = Device::new(backend, DeviceConfig::new())?;
        super::run(dev, logits, sample, "cuda")
    }
}

fn main() -> std::process::ExitCode {
    let mut backend = String::from("mock");
    let mut validation = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--validation" {
            validation = true;
            continue;
        }
        match (arg.as_str(), args.next()) {
            ("--backend", Some(b)) => backend = b,
            (other, _) => return usage(&format!("unknown argument {other}")),
        }
    }
    if validation && backend != "vulkan" {
        return usage("--validation runs the Vulkan validation layer: it takes --backend vulkan");
    }
    let ran = match backend.as_str() {
        "mock" => mock::run(),
        #[cfg(feature = "vulkan")]
        "vulkan" => vulkan::run(validation),
        #[cfg(feature = "cuda")]
        "cuda" => cuda::run(),
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
            eprintln!("decode_until: {}", Chain(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

fn usage(why: &str) -> std::process::ExitCode {
    eprintln!(
        "decode_until: {why}\nusage: decode_until [--backend mock|vulkan|cuda] [--validation (vulkan)]"
    );
    std::process::ExitCode::from(2)
}
