//! `capture decode --until-eos`: decode until the device says stop (rule 30). The step
//! ends with [`Kernel::StopAt`](super::Kernel::StopAt), which sets a stop flag once the
//! token just chosen is the end token (or the context is full); the step is captured
//! once and the sequence decoded four ways from the same prefill: eagerly with the flag
//! read on the host after every token, by one replay per token with the same host check,
//! by `replay(g, k)` with a host check every `k` tokens (running past the end token and
//! throwing the overshoot away), and by one `replay_until` the device ends. Every way
//! must give the eager ids token for token, the loop as many iterations as the eager
//! run took steps, and its logits must match the host reference.

use std::time::Instant;

use capture_graphs::{Buffer, Device, DeviceConfig, GraphHandle, Result, ServerError, StreamId};

use super::backend::DecodeBackend;
use super::run::{Check, DecodeOptions, HostCheck, collect, host_check, prefill};
use super::step::DeviceModel;
use super::weights::Weights;

/// The stream everything runs on.
const S: StreamId = StreamId::new(0);

/// What `--until-eos` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UntilOptions {
    /// The model, the prompt and the most tokens a sequence generates (`tokens`).
    pub decode: DecodeOptions,
    /// The end token; `None`: the token the eager run emits at three quarters of
    /// `tokens`, so the sequence ends there or where that token first comes.
    pub eos: Option<u32>,
    /// Tokens per `replay(g, k)` between host checks.
    pub every: u32,
}

impl Default for UntilOptions {
    fn default() -> Self {
        Self {
            decode: DecodeOptions::default(),
            eos: None,
            every: 8,
        }
    }
}

/// One way of decoding the sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct UntilMode {
    /// How it decoded.
    pub name: &'static str,
    /// Wall seconds from the prefilled state to the ids known on the host.
    pub seconds: f64,
    /// Steps the device ran (past the end token, for `replay(g, k)`).
    pub steps: u32,
    /// The ids, up to and including the end token.
    pub ids: Vec<u32>,
}

impl UntilMode {
    /// Tokens of the sequence per second.
    pub fn tokens_per_second(&self) -> f64 {
        self.ids.len() as f64 / self.seconds.max(1e-12)
    }
}

/// What an `--until-eos` run found.
#[derive(Clone, Debug, PartialEq)]
pub struct UntilReport {
    /// The backend's name.
    pub backend: &'static str,
    /// Whether its figures measure host overhead only.
    pub host_only: bool,
    /// What ran.
    pub options: UntilOptions,
    /// The end token.
    pub eos: u32,
    /// The loop's iteration counter, as the device left it.
    pub iterations: u32,
    /// Eager, per-token replays, `replay(g, k)`, and the loop, in that order.
    pub modes: Vec<UntilMode>,
    /// The host reference's verdict on the loop's logits.
    pub host: HostCheck,
}

impl UntilReport {
    /// The checks: every mode's ids the eager run's, the loop's iterations its token
    /// count, the sequence ended by the end token (or the most tokens), the host
    /// reference.
    pub fn checks(&self) -> Vec<Check> {
        let eager = &self.modes[0];
        let differs = self.modes[1..].iter().find(|m| m.ids != eager.ids);
        let ended = eager.ids.last() == Some(&self.eos)
            && !eager.ids[..eager.ids.len() - 1].contains(&self.eos)
            || eager.ids.len() == self.options.decode.tokens as usize;
        vec![
            Check {
                name: "every mode's ids the eager run's",
                passed: differs.is_none(),
                detail: match differs {
                    None => format!(
                        "{} ids identical in all {} modes",
                        eager.ids.len(),
                        self.modes.len()
                    ),
                    Some(m) => format!("eager {:?} but {} {:?}", eager.ids, m.name, m.ids),
                },
            },
            Check {
                name: "the loop ran one iteration per token and stopped at the end token",
                passed: self.iterations as usize == eager.ids.len() && ended,
                detail: format!(
                    "{} iterations for {} tokens ending in {:?} (end token {})",
                    self.iterations,
                    eager.ids.len(),
                    eager.ids.last(),
                    self.eos
                ),
            },
            Check {
                name: "host reference within tolerance",
                passed: self.host.passed(),
                detail: format!(
                    "worst logit error {:.2e} (step {}), {} id mismatches",
                    self.host.worst,
                    self.host.worst_step,
                    self.host.id_mismatches.len()
                ),
            },
        ]
    }

    /// Whether every check held.
    pub fn passed(&self) -> bool {
        self.checks().iter().all(|c| c.passed)
    }

    /// The mode called `name`.
    pub fn mode(&self, name: &str) -> Option<&UntilMode> {
        self.modes.iter().find(|m| m.name == name)
    }
}

/// The names of the four modes, in the report's order.
pub const UNTIL_MODES: [&str; 4] = [
    "eager, host check per token",
    "replay per token, host check each",
    "replay x k, host check each k",
    "replay_until (loop on the device)",
];

/// The ids of the first `n` steps, up to and including the first `eos`.
fn ids<B: DecodeBackend>(
    dev: &Device<B>,
    model: &DeviceModel<B>,
    options: &DecodeOptions,
    n: u32,
    eos: u32,
) -> Result<Vec<u32>> {
    let first = u64::from(options.first_position());
    let mut ids = vec![0u32; n as usize];
    dev.read_values_into(S, &model.id_history, first * 4, &mut ids)?;
    if let Some(end) = ids.iter().position(|&t| t == eos) {
        ids.truncate(end + 1);
    }
    Ok(ids)
}

fn flag<B: DecodeBackend>(dev: &Device<B>, done: &Buffer) -> Result<bool> {
    let mut word = [0u32];
    dev.read_values_into(S, done, 0, &mut word)?;
    Ok(word[0] != 0)
}

/// Decodes from the prefilled state with `advance(k)` (which runs `k` steps) and a host
/// check of the flag after each call; returns the seconds and the steps run.
fn checked(
    tokens: u32,
    every: u32,
    done: &Buffer,
    dev_flag: impl Fn(&Buffer) -> Result<bool>,
    mut advance: impl FnMut(u32) -> Result<()>,
) -> Result<(f64, u32)> {
    let start = Instant::now();
    let mut steps = 0;
    while steps < tokens {
        let k = every.min(tokens - steps);
        advance(k)?;
        steps += k;
        if dev_flag(done)? {
            break;
        }
    }
    Ok((start.elapsed().as_secs_f64(), steps))
}

/// Runs `capture decode --until-eos` on `backend`.
///
/// # Errors
///
/// Options that do not fit ([`ServerError::InvalidArgument`]), or any runtime failure.
pub fn run_until<B: DecodeBackend>(backend: B, options: UntilOptions) -> Result<UntilReport> {
    let o = options.decode;
    o.check()?;
    if options.every == 0 {
        return Err(ServerError::invalid(
            "every",
            options.every,
            "replays between host checks must be positive",
        ));
    }
    let config = o.config;
    if options.eos.is_some_and(|e| e >= config.vocab) {
        return Err(ServerError::invalid(
            "eos",
            options.eos.unwrap_or(0),
            format!(
                "the end token must be below the vocabulary ({})",
                config.vocab
            ),
        ));
    }
    let weights = Weights::random(&config, o.seed);
    let prompt = Weights::prompt(&config, o.seed, o.prompt);
    let dev = Device::new(backend, DeviceConfig::new())?;
    // The decoder's own kernels: a library's GEMM is foreign work, which a loop body
    // may not hold on every backend (CUDA's conditional bodies refuse it).
    let model = DeviceModel::with_library(&dev, S, config, &weights, false)?;
    let done = dev.alloc(S, 4)?;
    let eos = match options.eos {
        Some(eos) => eos,
        None => {
            prefill(&dev, &model, &prompt)?;
            for _ in 0..o.tokens {
                model.step(&dev)?;
            }
            let all = collect(&dev, &model, &o, (0.0, None))?;
            all.ids[(o.tokens as usize * 3 / 4).min(all.ids.len() - 1)]
        }
    };
    let flagged = |b: &Buffer| flag(&dev, b);
    let start_over = || -> Result<()> {
        prefill(&dev, &model, &prompt)?;
        dev.write_values(S, &done, 0, &[0u32])
    };
    let mut modes = Vec::with_capacity(4);

    // Eager, the flag read after every token.
    start_over()?;
    let (seconds, steps) = checked(o.tokens, 1, &done, flagged, |_| {
        model.step_until(&dev, &done, eos)
    })?;
    modes.push(UntilMode {
        name: UNTIL_MODES[0],
        seconds,
        steps,
        ids: ids(&dev, &model, &o, steps, eos)?,
    });

    // Captured once: warmup runs a step, so each mode below prefills afresh. One replay
    // and one loop replay, untimed, first: a graph's first loop builds its loop (CUDA
    // instantiates the loop graph, Vulkan loads the setter), a cost paid once.
    let graph = dev.capture(S, |d| model.step_until(d, &done, eos))?;
    start_over()?;
    dev.replay(S, &graph, 1)?;
    looped(&dev, &graph, 1)?;
    let replays = |k: u32| dev.replay(S, &graph, k);
    for (name, every) in [(UNTIL_MODES[1], 1), (UNTIL_MODES[2], options.every)] {
        start_over()?;
        let (seconds, steps) = checked(o.tokens, every, &done, flagged, replays)?;
        modes.push(UntilMode {
            name,
            seconds,
            steps,
            ids: ids(&dev, &model, &o, steps, eos)?,
        });
    }

    // The loop: one call, ended on the device.
    start_over()?;
    let (seconds, iterations) = looped(&dev, &graph, o.tokens)?;
    let loop_ids = ids(&dev, &model, &o, iterations, eos)?;
    let generation = collect(
        &dev,
        &model,
        &DecodeOptions {
            tokens: iterations.max(1),
            ..o
        },
        (seconds, None),
    )?;
    modes.push(UntilMode {
        name: UNTIL_MODES[3],
        seconds,
        steps: iterations,
        ids: loop_ids,
    });
    dev.drop_graph(graph)?;
    let host = host_check(&o, &weights, &prompt, &generation);
    Ok(UntilReport {
        backend: B::NAME,
        host_only: B::HOST_ONLY,
        options: UntilOptions {
            eos: Some(eos),
            ..options
        },
        eos,
        iterations,
        modes,
        host,
    })
}

/// One loop replay of at most `max` iterations; its seconds (through reading the
/// counter) and iterations.
fn looped<B: DecodeBackend>(dev: &Device<B>, graph: &GraphHandle, max: u32) -> Result<(f64, u32)> {
    let start = Instant::now();
    let counter = dev.replay_until(S, graph, max)?;
    let mut n = [0u32];
    dev.read_values_into(S, &counter, 0, &mut n)?;
    Ok((start.elapsed().as_secs_f64(), n[0]))
}

/// The report as `capture decode --until-eos` prints it.
pub fn render_until(report: &UntilReport) -> String {
    let o = &report.options.decode;
    let eager = &report.modes[0];
    let mut out = format!(
        "backend: {}{}\nmodel: dim {}, {} layer(s), {} heads, vocab {}, context {}; at most \
         {} tokens, end token {}\nsequence: {} tokens, the loop's {} iterations ended on \
         the device\n",
        report.backend,
        if report.host_only {
            " (host overhead only)"
        } else {
            ""
        },
        o.config.dim,
        o.config.layers,
        o.config.heads,
        o.config.vocab,
        o.config.context,
        o.tokens,
        report.eos,
        eager.ids.len(),
        report.iterations
    );
    out.push_str("mode                                  steps   tokens/s   x eager\n");
    for m in &report.modes {
        let every = report.options.every.to_string();
        let name = m
            .name
            .replace("x k", &format!("x {every}"))
            .replace("each k", &format!("each {every}"));
        out.push_str(&format!(
            "{name:<36} {:>7} {:>10.0} {:>9.2}\n",
            m.steps,
            m.tokens_per_second(),
            m.tokens_per_second() / eager.tokens_per_second()
        ));
    }
    out.push_str(&format!(
        "ids: {:?}\n",
        &eager.ids[..eager.ids.len().min(24)]
    ));
    for check in report.checks() {
        out.push_str(&format!(
            "check: {}: {} ({})\n",
            check.name,
            if check.passed { "ok" } else { "FAILED" },
            check.detail
        ));
    }
    out
}
