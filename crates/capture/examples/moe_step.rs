//! A small MoE layer's step with its two experts on two streams, captured as one graph:
//! a gate on the step's stream, then the shared expert forked onto a second stream
//! beside the routed expert, joined back before the combine (rules 28 and 29). The
//! step is captured once and replayed per token, the token's input written in place.
//!
//! Per token: `g = x·0.5`; shared expert (on the branch) `s = (x + 1)·3 − 0.5`; routed
//! expert `r = (g + 2)·1.5`; after the join `y = r + s`. Checked: every token's `y` from
//! the forked graph is, bit for bit, what the same step run eagerly on one stream gives,
//! and what a graph captured on one stream gives; and the plain-Rust reference agrees.
//!
//! ```text
//! cargo run -p capture-graphs --example moe_step [-- --backend mock|vulkan|cuda] [--tokens N]
//! ```
//!
//! `--validation` runs Vulkan under the Khronos validation layer (synchronisation
//! validation on) and fails on any message. `vulkan` needs `--features vulkan`, `cuda`
//! needs `--features cuda`. A backend whose device cannot be opened prints `SKIP:` and
//! exits 0.

use capture_graphs::{
    Arg, Buffer, Builtin, Builtins, Device, DeviceConfig, KernelHandle, Result, StreamId,
};

/// The step's stream and the branch's.
const S: StreamId = StreamId::new(0);
const SIDE: StreamId = StreamId::new(1);
/// Floats per activation.
const DIM: u64 = 4096;

/// The builtins the step launches, and its buffers.
struct Layer<'d, B: Builtins> {
    dev: &'d Device<B>,
    add: KernelHandle,
    mul: KernelHandle,
    copy: KernelHandle,
    axpy: KernelHandle,
    x: Buffer,
    g: Buffer,
    r: Buffer,
    s: Buffer,
    t: Buffer,
    y: Buffer,
}

impl<'d, B: Builtins> Layer<'d, B> {
    fn new(dev: &'d Device<B>) -> Result<Self> {
        let f32s = || dev.alloc(S, DIM * 4);
        Ok(Self {
            add: dev.builtin(Builtin::AddScalar),
            mul: dev.builtin(Builtin::MulScalar),
            copy: dev.builtin(Builtin::Copy),
            axpy: dev.builtin(Builtin::Axpy),
            x: f32s()?,
            g: f32s()?,
            r: f32s()?,
            s: f32s()?,
            t: f32s()?,
            y: f32s()?,
            dev,
        })
    }

    fn launch(&self, on: StreamId, which: Builtin, args: &[Arg], a: f32) -> Result<()> {
        let k = match which {
            Builtin::AddScalar => &self.add,
            Builtin::MulScalar => &self.mul,
            Builtin::Copy => &self.copy,
            _ => &self.axpy,
        };
        self.dev.launch(on, k, [1, 1, 1], args, &which.info(DIM, a))
    }

    /// The step; with `forked`, the shared expert runs on a branch.
    fn step(&self, forked: bool) -> Result<()> {
        use Builtin::{AddScalar, Axpy, Copy, MulScalar};
        let (x, g, r, s, t, y) = (&self.x, &self.g, &self.r, &self.s, &self.t, &self.y);
        self.launch(S, MulScalar, &[Arg::read(x), Arg::write(g)], 0.5)?;
        // From here the side stream is a branch of the window: it follows the gate's
        // launch, and runs beside the routed expert until the join.
        let branch = if forked {
            Some(self.dev.fork(S, SIDE)?)
        } else {
            None
        };
        let shared_on = if forked { SIDE } else { S };
        self.launch(shared_on, AddScalar, &[Arg::read(x), Arg::write(t)], 1.0)?;
        self.launch(shared_on, MulScalar, &[Arg::read(t), Arg::write(s)], 3.0)?;
        self.launch(shared_on, AddScalar, &[Arg::read(s), Arg::write(t)], -0.5)?;
        self.launch(S, AddScalar, &[Arg::read(g), Arg::write(r)], 2.0)?;
        self.launch(S, MulScalar, &[Arg::read(r), Arg::write(g)], 1.5)?;
        if let Some(branch) = branch {
            self.dev.join(branch)?;
        }
        // After the join the combine may read what the branch wrote.
        self.launch(S, Copy, &[Arg::read(g), Arg::write(y)], 0.0)?;
        self.launch(S, Axpy, &[Arg::read(t), Arg::read_write(y)], 1.0)
    }
}

/// Token `k`'s input.
fn input(k: u32) -> Vec<f32> {
    (0..DIM)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ k.wrapping_mul(40_503)) as f32 / 4e9)
        .collect()
}

/// The reference, in plain Rust.
fn reference(x: &[f32]) -> Vec<f32> {
    x.iter()
        .map(|&v| ((v * 0.5) + 2.0) * 1.5 + (((v + 1.0) * 3.0) + -0.5))
        .collect()
}

fn run<B: Builtins>(dev: Device<B>, backend: &str, tokens: u32) -> Result<()> {
    let layer = Layer::new(&dev)?;
    let mut eager = Vec::new();
    for k in 0..tokens {
        dev.write_values(S, &layer.x, 0, &input(k))?;
        layer.step(false)?;
        eager.push(dev.read_values::<f32>(S, &layer.y)?);
    }
    let forked = dev.capture(S, |_| layer.step(true))?;
    let single = dev.capture(S, |_| layer.step(false))?;
    let mut worst = 0.0f32;
    for k in 0..tokens {
        dev.write_values(S, &layer.x, 0, &input(k))?;
        for (graph, what) in [(&forked, "forked"), (&single, "one-stream")] {
            dev.replay(S, graph, 1)?;
            let y: Vec<f32> = dev.read_values(S, &layer.y)?;
            if y != eager[k as usize] {
                return Err(capture_graphs::ServerError::invalid(
                    "replay",
                    k,
                    format!("the {what} graph's token {k} differs from the eager step's"),
                ));
            }
        }
        for (got, want) in eager[k as usize].iter().zip(reference(&input(k))) {
            worst = worst.max((got - want).abs() / want.abs().max(1.0));
        }
    }
    if worst > 1e-5 {
        return Err(capture_graphs::ServerError::invalid(
            "reference",
            worst,
            "the device's step is this far from the plain-Rust reference",
        ));
    }
    println!(
        "moe_step on {backend}: {tokens} tokens, the forked graph bit for bit the eager step \
         and the one-stream graph; reference within {worst:.1e}"
    );
    dev.drop_graph(forked)?;
    dev.drop_graph(single)?;
    dev.sync(S)
}

fn config() -> Result<DeviceConfig> {
    DeviceConfig::new().streams(2)
}

fn main() -> std::process::ExitCode {
    let mut backend = String::from("mock");
    let mut tokens = 16;
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
    let result = match backend.as_str() {
        "mock" => config()
            .and_then(|c| Device::new(capture_graphs::mock::MockBackend::new(), c))
            .and_then(|dev| run(dev, "mock", tokens)),
        #[cfg(feature = "vulkan")]
        "vulkan" => {
            use capture_graphs::vulkan::{VulkanBackend, VulkanOptions};
            let options = VulkanOptions {
                validation,
                ..VulkanOptions::from_env()
            };
            match VulkanBackend::new(options) {
                Ok(b) => {
                    let keep = b.clone();
                    let ran = config()
                        .and_then(|c| Device::new(b, c))
                        .and_then(|dev| run(dev, "vulkan", tokens));
                    let messages = keep.take_validation_messages();
                    match ran {
                        Ok(()) if validation && !messages.is_empty() => {
                            Err(capture_graphs::ServerError::invalid(
                                "validation",
                                messages.len(),
                                format!("the validation layer reported: {}", messages.join("; ")),
                            ))
                        }
                        Ok(()) => {
                            if validation {
                                println!("  validation layer: no messages");
                            }
                            Ok(())
                        }
                        Err(e) => Err(e),
                    }
                }
                Err(why) => {
                    println!("SKIP: moe_step on vulkan: {why}");
                    return std::process::ExitCode::SUCCESS;
                }
            }
        }
        #[cfg(feature = "cuda")]
        "cuda" => match capture_graphs::cuda::CudaBackend::new(0) {
            Ok(b) => config()
                .and_then(|c| Device::new(b, c))
                .and_then(|dev| run(dev, "cuda", tokens)),
            Err(why) => {
                println!("SKIP: moe_step on cuda: {why}");
                return std::process::ExitCode::SUCCESS;
            }
        },
        other => {
            return usage(&format!(
                "backend {other} is not built in (mock; vulkan with --features vulkan; cuda \
                 with --features cuda)"
            ));
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("moe_step: {}", capture_graphs::Chain(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

fn usage(why: &str) -> std::process::ExitCode {
    eprintln!(
        "moe_step: {why}\nusage: moe_step [--backend mock|vulkan|cuda] [--tokens N] \
         [--validation (vulkan)]"
    );
    std::process::ExitCode::from(2)
}
