//! One `capture decode` run: prefill a prompt eagerly, generate eagerly, capture the
//! step once, prefill again and generate by replaying it; then the three checks
//! (eager and replayed ids identical, every step's logits bit for bit, and the host
//! reference within [`TOLERANCE`]).

use std::time::{Duration, Instant};

use capture_graphs::{Device, DeviceConfig, GraphLedger, Result, ServerError, StreamId};

use super::backend::DecodeBackend;
use super::host::{HostModel, argmax};
use super::model::Config;
use super::step::{DeviceModel, Footprint};
use super::weights::Weights;

/// How far a backend's logit may sit from the host reference's:
/// `|device - host| <= TOLERANCE * max(1, |host|)`. Device `exp`, `sin`, `cos`, `pow`
/// and a driver's freedom to fuse multiply-adds account for it.
pub const TOLERANCE: f32 = 1e-3;

/// The stream everything runs on.
const S: StreamId = StreamId::new(0);

/// What to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeOptions {
    /// The model's sizes.
    pub config: Config,
    /// Tokens generated per mode.
    pub tokens: u32,
    /// The weights' and prompt's seed.
    pub seed: u64,
    /// Prompt length (at least one token).
    pub prompt: u32,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        Self {
            config: Config::default(),
            tokens: 64,
            seed: 14,
            prompt: 4,
        }
    }
}

impl DecodeOptions {
    /// Checks the run fits the model: the prompt and every generated token need a
    /// cache row.
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] naming what does not fit.
    pub fn check(&self) -> Result<()> {
        self.config.check()?;
        if self.tokens == 0 || self.prompt == 0 {
            return Err(ServerError::invalid(
                "tokens",
                self.tokens,
                "tokens and prompt must be positive",
            ));
        }
        if u64::from(self.prompt) - 1 + u64::from(self.tokens) > u64::from(self.config.context) {
            return Err(ServerError::invalid(
                "tokens",
                self.tokens,
                format!(
                    "a {}-token prompt and {} generated tokens need {} cache rows; the \
                     context has {}",
                    self.prompt,
                    self.tokens,
                    self.prompt - 1 + self.tokens,
                    self.config.context
                ),
            ));
        }
        Ok(())
    }

    /// The position the first generated token is computed at (the prompt's last).
    pub fn first_position(&self) -> u32 {
        self.prompt - 1
    }
}

/// One mode's generation.
#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    /// Wall time of the generation loop, through the final sync (prefill excluded).
    pub seconds: f64,
    /// The calling thread's CPU time over the same loop: what generating cost the host
    /// (`None` where the thread CPU clock is missing).
    pub cpu_seconds: Option<f64>,
    /// The generated ids, in order.
    pub ids: Vec<u32>,
    /// Each step's logits, `[tokens, vocab]`, read once at the end.
    pub logits: Vec<f32>,
}

impl Generation {
    /// Microseconds per generated token.
    pub fn us_per_token(&self) -> f64 {
        self.seconds * 1e6 / self.ids.len() as f64
    }

    /// Generated tokens per second.
    pub fn tokens_per_second(&self) -> f64 {
        self.ids.len() as f64 / self.seconds
    }
}

/// The host reference's verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct HostCheck {
    /// The largest `|device - host| / max(1, |host|)` over every step and logit.
    pub worst: f32,
    /// The step it was found at.
    pub worst_step: usize,
    /// Steps whose ids differ although the host's top-two margin exceeded the
    /// tolerance: `(step, device id, host id, margin)`.
    pub id_mismatches: Vec<(usize, u32, u32, f32)>,
    /// Steps whose top-two margin was within the tolerance (ids may then differ).
    pub near_ties: usize,
}

impl HostCheck {
    /// Whether the logits are within tolerance and the ids agree where they must.
    pub fn passed(&self) -> bool {
        self.worst <= TOLERANCE && self.id_mismatches.is_empty()
    }
}

/// Everything a run found.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodeReport {
    /// The backend's name.
    pub backend: &'static str,
    /// Whether its figures measure host overhead only.
    pub host_only: bool,
    /// What ran.
    pub options: DecodeOptions,
    /// The prompt's ids.
    pub prompt: Vec<u32>,
    /// Launches per step.
    pub kernels_per_step: u64,
    /// Which path the matrix-vector products took: a library's GEMM through foreign
    /// work, or the decoder's own kernel.
    pub gemm: String,
    /// Eager prefill time (first mode).
    pub prefill_seconds: f64,
    /// Eager generation.
    pub eager: Generation,
    /// Replayed generation: one `replay(s, graph, 1)` per token.
    pub replayed: Generation,
    /// The same, all T replays in one call (`replay(s, graph, T)`): one submission.
    pub one_call: Generation,
    /// The slotted step's graph, captured once: per token its position and attention
    /// grid set through its slots ([`DeviceModel::update`], rule 26), then one replay.
    pub updated: Generation,
    /// The slotted step without slots, captured per token at that token's position (no
    /// warmup: prepare, begin, record, end), replayed once and dropped: what an engine
    /// without graph updates pays.
    pub recaptured: Generation,
    /// Wall time of `Device::capture` (warmup, record, seal).
    pub capture_seconds: f64,
    /// The graph's ledger, as the core reports it once the intermediates' handles are
    /// dropped: `user_bytes` are the weights, caches, state and histories the program
    /// keeps, `graph_only_bytes` the intermediates only the graph holds.
    pub ledger: GraphLedger,
    /// The program's own count of the buffers the step binds, by kind: the user's
    /// (weights, cache, io) break the ledger's `user_bytes` down, and `scratch` is the
    /// intermediates it dropped after capture. The decode test checks the ledger against
    /// it.
    pub footprint: Footprint,
    /// The host reference's verdict on the replayed logits.
    pub host: HostCheck,
}

/// A check's outcome, for printing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// What was checked.
    pub name: &'static str,
    /// Whether it held.
    pub passed: bool,
    /// What was found.
    pub detail: String,
}

impl DecodeReport {
    /// The three checks; the first two compare eager with both replayed modes.
    pub fn checks(&self) -> Vec<Check> {
        let vocab = self.options.config.vocab as usize;
        let modes = [
            ("replayed", &self.replayed),
            ("replayed in one call", &self.one_call),
            ("updated through its slots", &self.updated),
            ("re-captured per token", &self.recaptured),
        ];
        let mut ids = (
            true,
            format!(
                "{} ids identical in all {} modes",
                self.eager.ids.len(),
                modes.len() + 1
            ),
        );
        let mut bits = (
            true,
            format!(
                "{} steps x {vocab} logits bit-identical in all {} modes",
                self.eager.ids.len(),
                modes.len() + 1
            ),
        );
        for (mode, generation) in modes {
            let e = &self.eager;
            let id_at = (0..e.ids.len().max(generation.ids.len()))
                .find(|&i| e.ids.get(i) != generation.ids.get(i));
            if let (true, Some(i)) = (ids.0, id_at) {
                ids = (
                    false,
                    format!(
                        "step {i}: eager {:?} but {mode} {:?}",
                        e.ids.get(i),
                        generation.ids.get(i)
                    ),
                );
            }
            let bit_at = (0..e.logits.len().max(generation.logits.len())).find(|&i| {
                e.logits.get(i).map(|v| v.to_bits())
                    != generation.logits.get(i).map(|v| v.to_bits())
            });
            if let (true, Some(i)) = (bits.0, bit_at) {
                let shown = |v: Option<&f32>| {
                    v.map_or_else(
                        || "missing".into(),
                        |v| format!("{v} (0x{:08x})", v.to_bits()),
                    )
                };
                bits = (
                    false,
                    format!(
                        "step {} logit {}: eager {} but {mode} {}",
                        i / vocab,
                        i % vocab,
                        shown(e.logits.get(i)),
                        shown(generation.logits.get(i))
                    ),
                );
            }
        }
        let h = &self.host;
        let host_detail = match h.id_mismatches.first() {
            Some((step, dev, host, margin)) => format!(
                "step {step}: device chose {dev}, host {host}, with a top-two margin of \
                 {margin:.2e} > {TOLERANCE:.0e}"
            ),
            None => format!(
                "worst logit error {:.2e} (step {}) against a tolerance of {TOLERANCE:.0e} \
                 x max(1, |logit|); ids identical wherever the margin exceeds it ({} \
                 near ties)",
                h.worst, h.worst_step, h.near_ties
            ),
        };
        vec![
            Check {
                name: "eager and replayed ids identical",
                passed: ids.0,
                detail: ids.1,
            },
            Check {
                name: "logits of every step bit for bit, eager against replayed",
                passed: bits.0,
                detail: bits.1,
            },
            Check {
                name: "host reference within tolerance",
                passed: h.passed(),
                detail: host_detail,
            },
        ]
    }

    /// Whether every check held.
    pub fn passed(&self) -> bool {
        self.checks().iter().all(|c| c.passed)
    }
}

/// Runs the prompt eagerly, the host writing each prompt token into the state; returns
/// the time it took. Leaves the state at the prompt's last token, ready to generate.
///
/// # Errors
/// What the runtime refused or the backend reported, as the launch or write met it.
pub fn prefill<B: DecodeBackend>(
    dev: &Device<B>,
    model: &DeviceModel<B>,
    prompt: &[u32],
) -> Result<f64> {
    let start = Instant::now();
    model.reset(dev)?;
    let last = prompt.len() - 1;
    for (pos, token) in prompt[..last].iter().enumerate() {
        model.set_state(dev, pos as u32, *token)?;
        model.step(dev)?;
    }
    model.set_state(dev, last as u32, prompt[last])?;
    dev.sync(S)?;
    Ok(start.elapsed().as_secs_f64())
}

/// Records what `step` launches on the decoder's stream into a graph, with no warmup
/// (prepare, begin, record, end): the step's launches do not run, so a state they
/// would advance stays as it is for the replay. A failed recording is aborted.
///
/// # Errors
/// What the capture or `step` met (the recording aborted first).
pub fn record<B: DecodeBackend>(
    dev: &Device<B>,
    step: impl FnOnce() -> Result<()>,
) -> Result<capture_graphs::GraphHandle> {
    dev.prepare(S)?;
    dev.begin(S)?;
    match step() {
        Ok(()) => dev.end(S),
        Err(e) => {
            let _ = dev.abort(S);
            Err(e)
        }
    }
}

/// Reads the generation's ids and logits: once, at the end.
///
/// # Errors
/// What the read-back met.
pub fn collect<B: DecodeBackend>(
    dev: &Device<B>,
    model: &DeviceModel<B>,
    options: &DecodeOptions,
    (seconds, cpu): (f64, Option<Duration>),
) -> Result<Generation> {
    let (first, n) = (
        u64::from(options.first_position()),
        u64::from(options.tokens),
    );
    let vocab = u64::from(options.config.vocab);
    let mut ids = vec![0u32; n as usize];
    dev.read_values_into(S, &model.id_history, first * 4, &mut ids)?;
    let mut logits = vec![0.0f32; (n * vocab) as usize];
    dev.read_values_into(S, &model.logit_history, first * vocab * 4, &mut logits)?;
    Ok(Generation {
        seconds,
        cpu_seconds: cpu.map(|c| c.as_secs_f64()),
        ids,
        logits,
    })
}

/// Runs `f`, returning its wall seconds and the calling thread's CPU time.
fn timed(f: impl FnOnce() -> Result<()>) -> Result<(f64, Option<Duration>)> {
    let start = Instant::now();
    let (ran, cpu) = crate::cpu_time::spent(f);
    ran?;
    Ok((start.elapsed().as_secs_f64(), cpu))
}

/// Judges a generation's logits against the host model, teacher-forced on the
/// device's ids so one near tie does not send the two down different sequences.
pub fn host_check(
    options: &DecodeOptions,
    weights: &Weights,
    prompt: &[u32],
    device: &Generation,
) -> HostCheck {
    let config = options.config;
    let vocab = config.vocab as usize;
    let mut host = HostModel::new(config, weights);
    let last = prompt.len() - 1;
    for (pos, token) in prompt[..last].iter().enumerate() {
        host.step(*token, pos as u32);
    }
    let mut check = HostCheck {
        worst: 0.0,
        worst_step: 0,
        id_mismatches: Vec::new(),
        near_ties: 0,
    };
    let mut token = prompt[last];
    for step in 0..device.ids.len() {
        let want = host.step(token, options.first_position() + step as u32);
        let got = &device.logits[step * vocab..(step + 1) * vocab];
        for (g, w) in got.iter().zip(&want) {
            let err = (g - w).abs() / w.abs().max(1.0);
            // A NaN is never within tolerance.
            if err.is_nan() || err > check.worst {
                check.worst = if err.is_nan() { f32::INFINITY } else { err };
                check.worst_step = step;
            }
        }
        let host_id = argmax(&want);
        let mut sorted = want.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        let margin = sorted[0] - sorted.get(1).copied().unwrap_or(f32::NEG_INFINITY);
        if margin <= TOLERANCE * sorted[0].abs().max(1.0) {
            check.near_ties += 1;
        } else if host_id != device.ids[step] {
            check
                .id_mismatches
                .push((step, device.ids[step], host_id, margin));
        }
        token = device.ids[step];
    }
    check
}

/// Runs `capture decode` on `backend`.
///
/// # Errors
///
/// Options that do not fit ([`ServerError::InvalidArgument`]), or any runtime failure.
pub fn run<B: DecodeBackend>(backend: B, options: DecodeOptions) -> Result<DecodeReport> {
    options.check()?;
    let config = options.config;
    let weights = Weights::random(&config, options.seed);
    let prompt = Weights::prompt(&config, options.seed, options.prompt);
    let dev = Device::new(backend, DeviceConfig::new())?;
    let mut model = DeviceModel::new(&dev, S, config, &weights)?;

    // Eager: prefill, then T steps, then one read.
    let prefill_seconds = prefill(&dev, &model, &prompt)?;
    let eager = timed(|| {
        for _ in 0..options.tokens {
            model.step(&dev)?;
        }
        dev.sync(S)
    })?;
    let eager = collect(&dev, &model, &options, eager)?;

    // Capture once (warmup runs one step on whatever the state holds; the prefill
    // below starts the sequence afresh), then hand the intermediates to the graph.
    let start = Instant::now();
    let graph = dev.capture(S, |d| model.step(d))?;
    let capture_seconds = start.elapsed().as_secs_f64();
    // The slotted step, captured once too: its position and attention grid are slots.
    let first = options.first_position();
    let slotted = dev.capture(S, |d| model.slotted_step(d, first, true))?;

    // Replayed in one call: the same prefill, then `replay(s, graph, T)`, one read.
    prefill(&dev, &model, &prompt)?;
    let one_call = timed(|| {
        dev.replay(S, &graph, options.tokens)?;
        dev.sync(S)
    })?;
    let one_call = collect(&dev, &model, &options, one_call)?;

    // Updated: the same prefill, then per token the slots set and one replay; the
    // host says the position, nothing is written between replays.
    prefill(&dev, &model, &prompt)?;
    let updated = timed(|| {
        for i in 0..options.tokens {
            model.update(&slotted, first + i)?;
            dev.replay(S, &slotted, 1)?;
        }
        dev.sync(S)
    })?;
    let updated = collect(&dev, &model, &options, updated)?;

    // Re-captured: the same prefill, then per token the step at that position
    // recorded into a graph of its own, replayed once and dropped.
    prefill(&dev, &model, &prompt)?;
    let recaptured = timed(|| {
        for i in 0..options.tokens {
            let g = record(&dev, || model.slotted_step(&dev, first + i, false))?;
            dev.replay(S, &g, 1)?;
            dev.drop_graph(g)?;
        }
        dev.sync(S)
    })?;
    let recaptured = collect(&dev, &model, &options, recaptured)?;

    // Replayed: the same prefill (eager, so it still needs the intermediates), then
    // T replays, then one read.
    prefill(&dev, &model, &prompt)?;
    let footprint = model.footprint();
    model.drop_scratch();
    let ledger = dev
        .graph(&graph)
        .ok_or(ServerError::UnknownGraph(graph.id()))?;
    let replayed = timed(|| {
        for _ in 0..options.tokens {
            dev.replay(S, &graph, 1)?;
        }
        dev.sync(S)
    })?;
    let replayed = collect(&dev, &model, &options, replayed)?;
    dev.drop_graph(graph)?;
    dev.drop_graph(slotted)?;

    let host = host_check(&options, &weights, &prompt, &replayed);
    Ok(DecodeReport {
        backend: B::NAME,
        host_only: B::HOST_ONLY,
        options,
        prompt,
        kernels_per_step: config.kernels_per_step(),
        gemm: model.gemm_path(),
        prefill_seconds,
        eager,
        replayed,
        one_call,
        updated,
        recaptured,
        capture_seconds,
        ledger,
        footprint,
        host,
    })
}
