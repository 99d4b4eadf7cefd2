//! A decode-style loop: the step is captured once and replayed per token, with the
//! position and the token id written in place into a small input buffer between
//! replays; the step's state (a stand-in for a KV cache) is updated in place on the
//! device. Every token is checked against the same step run eagerly.
//!
//! `cargo run -p capture-graphs --example decode_loop [-- --backend mock|vulkan] [--tokens N]`
//! (`vulkan` needs `--features vulkan`).

use std::time::Instant;

use capture_graphs::{Arg, Buffer, Builtin, Builtins, Device, DeviceConfig, Result, StreamId};

const S: StreamId = StreamId::new(0);
/// Floats in each buffer.
const N: u64 = 256;
const VOCAB: u32 = 512;

/// The step's buffers: what the host writes (`inputs`), what the device keeps (`state`)
/// and what the host reads (`logits`).
struct Step {
    inputs: Buffer,
    scaled: Buffer,
    state: Buffer,
    logits: Buffer,
}

/// Writes `[position, token]` repeated over the input buffer into `host` (the same
/// host buffer every token: nothing is allocated per token).
fn inputs(host: &mut [f32], position: u32, token: u32) {
    for pair in host.chunks_exact_mut(2) {
        pair.copy_from_slice(&[position as f32, token as f32]);
    }
}

impl Step {
    fn new<B: Builtins>(dev: &Device<B>) -> Result<Self> {
        let step = Step {
            inputs: dev.alloc(S, N * 4)?,
            scaled: dev.alloc(S, N * 4)?,
            state: dev.alloc(S, N * 4)?,
            logits: dev.alloc(S, N * 4)?,
        };
        dev.write_values(S, &step.state, 0, &[0.0f32; N as usize])?;
        Ok(step)
    }

    /// One decode step: three launches, the middle one updating `state` in place.
    fn launch<B: Builtins>(&self, dev: &Device<B>) -> Result<()> {
        let grid = [N.div_ceil(64) as u32, 1, 1];
        let (mul, axpy, add) = (Builtin::MulScalar, Builtin::Axpy, Builtin::AddScalar);
        let scale = [Arg::read(&self.inputs), Arg::write(&self.scaled)];
        dev.launch(S, &dev.builtin(mul), grid, &scale, &mul.info(N, 0.5))?;
        let accumulate = [Arg::read(&self.scaled), Arg::read_write(&self.state)];
        dev.launch(S, &dev.builtin(axpy), grid, &accumulate, &axpy.info(N, 1.0))?;
        let project = [Arg::read(&self.state), Arg::write(&self.logits)];
        dev.launch(S, &dev.builtin(add), grid, &project, &add.info(N, 1.0))
    }

    /// The host's choice of the next token from the first two logits, read into a
    /// host array (no allocation per token).
    fn next_token<B: Builtins>(&self, dev: &Device<B>) -> Result<u32> {
        let mut head = [0.0f32; 2];
        dev.read_values_into(S, &self.logits, 0, &mut head)?;
        Ok((head[0] as u32 * 31 + head[1] as u32 * 7) % VOCAB)
    }
}

/// Generates `tokens` tokens from `prompt` with `step` per token: eagerly, or by
/// replaying `graph`. Returns the ids and the wall time.
fn generate<B: Builtins>(
    dev: &Device<B>,
    step: &Step,
    graph: Option<&capture_graphs::GraphHandle>,
    prompt: u32,
    tokens: u32,
) -> Result<(Vec<u32>, f64)> {
    dev.write_values(S, &step.state, 0, &[0.0f32; N as usize])?;
    let mut ids = vec![prompt];
    let mut host = vec![0.0f32; N as usize];
    let start = Instant::now();
    for position in 0..tokens {
        let token = *ids.last().expect("the prompt");
        inputs(&mut host, position, token);
        dev.write_values(S, &step.inputs, 0, &host)?;
        match graph {
            Some(graph) => dev.replay(S, graph, 1)?,
            None => step.launch(dev)?,
        }
        ids.push(step.next_token(dev)?);
    }
    Ok((ids, start.elapsed().as_secs_f64()))
}

fn run<B: Builtins>(dev: Device<B>, name: &str, tokens: u32) -> Result<()> {
    let step = Step::new(&dev)?;
    let (eager, eager_s) = generate(&dev, &step, None, 1, tokens)?;
    // Captured once; warmup runs the step, so the state is reset before generating.
    let graph = dev.capture(S, |d| step.launch(d))?;
    let (replayed, replay_s) = generate(&dev, &step, Some(&graph), 1, tokens)?;
    assert_eq!(
        eager, replayed,
        "the replayed loop generates what the eager one did"
    );
    let per_token = |s: f64| s * 1e6 / f64::from(tokens);
    println!("backend {name}: {tokens} tokens, 3 kernels per step");
    println!("  eager:    {:8.1} µs per token", per_token(eager_s));
    println!("  replayed: {:8.1} µs per token", per_token(replay_s));
    println!("  ids: {:?}", &replayed[..replayed.len().min(12)]);
    if let Some(ledger) = dev.graph(&graph) {
        println!("  {ledger}");
    }
    dev.drop_graph(graph)
}

fn main() -> std::process::ExitCode {
    let mut backend = String::from("mock");
    let mut tokens = 64;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--backend", Some(b)) => backend = b,
            ("--tokens", Some(t)) => match t.parse() {
                Ok(t) if t > 0 => tokens = t,
                _ => return usage(&format!("--tokens wants a positive count, not {t}")),
            },
            (other, _) => return usage(&format!("unknown argument {other}")),
        }
    }
    let result = match backend.as_str() {
        "mock" => Device::new(
            capture_graphs::mock::MockBackend::new(),
            DeviceConfig::new(),
        )
        .and_then(|dev| run(dev, "mock", tokens)),
        #[cfg(feature = "vulkan")]
        "vulkan" => {
            use capture_graphs::vulkan::{VulkanBackend, VulkanOptions};
            match VulkanBackend::new(VulkanOptions::from_env()) {
                Ok(b) => {
                    Device::new(b, DeviceConfig::new()).and_then(|dev| run(dev, "vulkan", tokens))
                }
                Err(why) => {
                    println!("SKIP: decode_loop on vulkan: {why}");
                    return std::process::ExitCode::SUCCESS;
                }
            }
        }
        other => {
            return usage(&format!(
                "backend {other} is not built in (mock; vulkan with --features vulkan)"
            ));
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("decode_loop: {}", capture_graphs::Chain(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

fn usage(why: &str) -> std::process::ExitCode {
    eprintln!("decode_loop: {why}\nusage: decode_loop [--backend mock|vulkan] [--tokens N]");
    std::process::ExitCode::from(2)
}
