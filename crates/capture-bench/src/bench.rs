//! `capture bench`'s measurement: the matrix of rows from launch-bound to
//! execution-bound, each run eagerly and as a replayed graph, rounds interleaved, on any
//! backend that provides the builtins, beside a hand-written floor where the backend has
//! one.
//!
//! A row is a chain of `kernels` dependent add-one launches over `elements` f32
//! elements, ping-ponging between two buffers A and B (launch i reads A and writes B when
//! i is even, the reverse when odd; `kernels` is even, so the result lands in A), in
//! workgroups of 256 (one for the 64-element rows). A *pass* is the chain followed by a
//! full readback of A. A *round* is `passes` passes of one mode, from A reset to zeros;
//! at its end A must hold `passes × kernels` in every element, or the row fails. Rounds
//! of the modes alternate (eager, replay, the programmatic replay, then the floor's), so
//! drift hits all of them alike; each figure is the median over rounds of a round's mean
//! per pass.
//!
//! Where the device runs programmatic dependent launches and the chain's kernel waits
//! for its grid dependency (CUDA on compute capability 9.0 and later, whose builtins
//! wait), a second graph records the same chain with every launch after the first
//! allowed to overlap the one before ([`Dims::programmatic`]), and its replay is
//! measured beside the plain one; elsewhere the row says why it is not measured.

use std::time::{Duration, Instant};

use capture_decode::cpu_time;

use capture_graphs::{
    Arg, Buffer, Builtin, Builtins, Chain, Device, DeviceConfig, Dims, GraphHandle, KernelHandle,
    ProgrammaticLaunch, ServerError, StreamId,
};

/// One row of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Row {
    /// The row's name, as `--rows` takes it.
    pub(crate) name: &'static str,
    /// f32 elements of each buffer.
    pub(crate) elements: u64,
    /// Dependent launches per pass (even).
    pub(crate) kernels: usize,
    /// A control row: execution-bound, where replay must read about 1.0×.
    pub(crate) control: bool,
}

/// The rows, launch-bound first, shaped like cubecl's wgpu `graph_bench`.
pub(crate) const ROWS: [Row; 5] = [
    Row::new("64x150", 64, 150, false),
    Row::new("64x1000", 64, 1000, false),
    Row::new("64x5000", 64, 5000, false),
    Row::new("64kx1000", 65_536, 1000, true),
    Row::new("1Mx500", 1 << 20, 500, true),
];

/// Launches per round the default pass count aims at.
const LAUNCHES_PER_ROUND: usize = 10_000;
/// Element-launches per round the default pass count stays under.
const WORK_PER_ROUND: u64 = 64 << 20;

impl Row {
    pub(crate) const fn new(
        name: &'static str,
        elements: u64,
        kernels: usize,
        control: bool,
    ) -> Self {
        Self {
            name,
            elements,
            kernels,
            control,
        }
    }

    /// Passes per round by default: about [`LAUNCHES_PER_ROUND`] launches, under
    /// [`WORK_PER_ROUND`] element-launches, at least one.
    pub(crate) fn default_passes(&self) -> usize {
        let by_launches = LAUNCHES_PER_ROUND / self.kernels;
        let by_work = WORK_PER_ROUND / (self.kernels as u64 * self.elements);
        by_launches.min(by_work as usize).max(1)
    }

    /// Workgroups of 256 over the row's elements.
    fn grid(&self) -> [u32; 3] {
        [self.elements.div_ceil(256) as u32, 1, 1]
    }

    /// The value every element of A holds after `passes` passes from zeros.
    fn expected(&self, passes: usize) -> f32 {
        (passes * self.kernels) as f32
    }
}

/// What to measure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BenchOptions {
    /// The rows, in order.
    pub(crate) rows: Vec<Row>,
    /// Rounds per mode (at least 5).
    pub(crate) rounds: usize,
    /// Passes per round; `None` for each row's default.
    pub(crate) passes: Option<usize>,
    /// Whether the decode row runs (`capture decode`'s decoder, [`DECODE_TOKENS`]
    /// tokens per mode).
    pub(crate) decode: bool,
    /// Whether the update row runs (a slot rebound per token against a re-capture per
    /// token, `update_row`).
    pub(crate) update: bool,
    /// Whether the fork row runs (a step forked over two streams against the same work
    /// on one, `fork_row`).
    pub(crate) fork: bool,
    /// Whether the until row runs (a loop replay ended on the device against replays
    /// with host checks, `until_row`).
    pub(crate) until: bool,
}

/// Tokens per mode of the decode row.
pub(crate) const DECODE_TOKENS: u32 = 32;

/// The decode row's decoder: `capture decode`'s, small enough for a benchmark run.
pub(crate) fn decode_options() -> capture_decode::DecodeOptions {
    capture_decode::DecodeOptions {
        config: capture_decode::Config {
            dim: 64,
            layers: 2,
            heads: 4,
            vocab: 512,
            context: 64,
        },
        tokens: DECODE_TOKENS,
        ..capture_decode::DecodeOptions::default()
    }
}

/// The decode row: tokens per second eager, replayed once per token, and all tokens in
/// one replay call, over rounds of `capture decode` runs (each round runs the three
/// modes one after another, so drift hits them alike) whose checks must all hold.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DecodeRow {
    /// Tokens per mode.
    pub(crate) tokens: u32,
    /// Kernels per step.
    pub(crate) kernels: u64,
    /// Runs measured.
    pub(crate) rounds: usize,
    /// Tokens per second, eager: the median over rounds.
    pub(crate) eager: f64,
    /// Tokens per second, one replay per token: the median over rounds.
    pub(crate) replayed: f64,
    /// Tokens per second, every token in one replay call: the median over rounds.
    pub(crate) one_call: f64,
    /// Replayed per token against eager, each round's tokens/s ratio (above 1: faster).
    pub(crate) replayed_over_eager: Paired,
    /// One call against eager, the same way.
    pub(crate) one_call_over_eager: Paired,
    /// The calling thread's CPU time per token, µs (median over rounds): eager, replayed
    /// per token, one call; NaN where the clock is missing.
    pub(crate) cpu_us_per_token: [f64; 3],
    /// The checks that failed, in any round (empty: all hold).
    pub(crate) failed: Vec<String>,
}

/// Runs the decode row on `backend`: `rounds` runs.
///
/// # Errors
///
/// The decoder's runtime error, as text.
#[cfg_attr(not(feature = "any-backend"), allow(dead_code))]
pub(crate) fn decode_row<B: capture_decode::DecodeBackend + Clone>(
    backend: B,
    rounds: usize,
) -> Result<DecodeRow, String> {
    let options = decode_options();
    let mut rates: [Vec<f64>; 3] = Default::default();
    let mut cpu: [Vec<f64>; 3] = Default::default();
    let mut failed: Vec<String> = Vec::new();
    let mut kernels = 0;
    for _ in 0..rounds.max(1) {
        let report =
            capture_decode::run(backend.clone(), options).map_err(|e| Chain(&e).to_string())?;
        kernels = report.kernels_per_step;
        for (i, g) in [&report.eager, &report.replayed, &report.one_call]
            .into_iter()
            .enumerate()
        {
            rates[i].push(g.tokens_per_second());
            if let Some(c) = g.cpu_seconds {
                cpu[i].push(c * 1e6 / g.ids.len() as f64);
            }
        }
        for c in report.checks().into_iter().filter(|c| !c.passed) {
            let line = format!("{}: {}", c.name, c.detail);
            if !failed.contains(&line) {
                failed.push(line);
            }
        }
    }
    let [eager, replayed, one_call] = rates;
    let cpu_us_per_token = cpu.map(|mut v| median(&mut v));
    Ok(DecodeRow {
        tokens: options.tokens,
        kernels,
        rounds: eager.len(),
        replayed_over_eager: paired_values(&replayed, &eager),
        one_call_over_eager: paired_values(&one_call, &eager),
        eager: median(&mut eager.clone()),
        replayed: median(&mut replayed.clone()),
        one_call: median(&mut one_call.clone()),
        cpu_us_per_token,
        failed,
    })
}

/// One pass's host times.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pass {
    /// Until the submission calls returned: the launches (eager) or the replay call.
    pub(crate) enqueue: Duration,
    /// Through the readback of A.
    pub(crate) total: Duration,
}

/// A mode's figures over the rounds of a row.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Figures {
    /// Median over rounds of the mean enqueue time per pass, µs.
    pub(crate) enqueue_us_per_pass: f64,
    /// Median over rounds of the mean end-to-end time per kernel, µs.
    pub(crate) e2e_us_per_kernel: f64,
    /// Each round's mean end-to-end time per kernel, µs, in order.
    pub(crate) rounds_us_per_kernel: Vec<f64>,
    /// Median over rounds of the calling thread's CPU time per kernel, µs, over whole
    /// passes: what the pass cost the host, a wait counted only where it spins (CUDA's
    /// `cuStreamSynchronize` on the primary context does; blocking waits do not); NaN
    /// where the clock is missing.
    pub(crate) cpu_us_per_kernel: f64,
}

/// A row measured on one backend.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RowReport {
    pub(crate) row: Row,
    pub(crate) passes: usize,
    pub(crate) rounds: usize,
    pub(crate) eager: Figures,
    pub(crate) replay: Figures,
    /// `Device::capture` of the chain (warmup, recording, seal), ms.
    pub(crate) capture_ms: f64,
    /// Device bytes the graph's ledger holds.
    pub(crate) graph_device_bytes: u64,
    /// Device bytes in use on the stream when the recording was sealed: its live
    /// working set.
    pub(crate) live_device_bytes: u64,
    /// The replay call alone, over every replayed pass: median and 99th percentile, µs.
    pub(crate) replay_call_p50_us: f64,
    pub(crate) replay_call_p99_us: f64,
    /// The hand-written floor's figures, where the backend has one.
    pub(crate) floor: Option<FloorFigures>,
    /// The replay of the chain recorded as programmatic dependent launches, or why the
    /// device or the kernel cannot run them.
    pub(crate) programmatic: Result<Figures, String>,
}

impl RowReport {
    /// Eager end-to-end over replayed end-to-end, per kernel.
    pub(crate) fn ratio(&self) -> f64 {
        self.eager.e2e_us_per_kernel / self.replay.e2e_us_per_kernel
    }
}

/// Why `device` cannot replay `kernel`'s chain as programmatic dependent launches, if it
/// cannot: the device's own reason, or the kernel's missing wait.
fn programmatic_refusal<B: Builtins>(device: &Device<B>, kernel: &KernelHandle) -> Option<String> {
    match device.programmatic_launch() {
        ProgrammaticLaunch::Unsupported(why) => Some(why.to_string()),
        ProgrammaticLaunch::Supported if !kernel.signature().waits_for_grid_dependency() => {
            Some(format!(
                "kernel {} does not wait for its grid dependency",
                device.kernel_name(kernel)
            ))
        }
        ProgrammaticLaunch::Supported => None,
    }
}

/// The floor's figures on a row: its eager pass and, where it has one, its replay.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct FloorFigures {
    /// The fastest of the eager variants (by median e2e): the floor.
    pub(crate) eager: Figures,
    /// Every eager variant measured, named ("whole pass", "every 64"), in the floor's
    /// order; one unnamed entry where the floor has no variants.
    pub(crate) eager_variants: Vec<(String, Figures)>,
    /// The name of the variant [`eager`](Self::eager) is.
    pub(crate) eager_best: String,
    pub(crate) replay: Option<Figures>,
}

/// The same chain done by hand against the driver, with no runtime in between.
pub(crate) trait Floor {
    /// Writes `values` into A, for a round to start from.
    fn reset(&mut self, values: &[f32]) -> Result<(), String>;
    /// The ways of running an eager pass worth measuring (Vulkan: the submission
    /// cadences), named; every round measures each, and the fastest is the floor. One
    /// unnamed way by default.
    fn eager_variants(&self) -> Vec<String> {
        vec![String::new()]
    }
    /// Runs the following eager passes the way `eager_variants()[variant]` names.
    fn choose_eager(&mut self, variant: usize) -> Result<(), String> {
        let _ = variant;
        Ok(())
    }
    /// One eager pass: the launches recorded and submitted, then A read back.
    fn eager_pass(&mut self) -> Result<Pass, String>;
    /// One replayed pass, where the floor has one: the chain recorded once, submitted.
    fn replay_pass(&mut self) -> Option<Result<Pass, String>>;
    /// A as the last pass read it.
    fn output(&self) -> &[f32];
}

/// Builds the floor of a row (or says why it cannot).
pub(crate) type FloorMaker<'a> = &'a dyn Fn(&Row) -> Result<Box<dyn Floor>, String>;

/// Why a row could not be measured.
#[derive(Debug)]
pub(crate) struct BenchError(pub(crate) String);

impl std::fmt::Display for BenchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

const STREAM: StreamId = StreamId::new(0);

/// The runtime's side of a row: the device, its two buffers, the kernel.
struct RowChain<'d, B: Builtins> {
    device: &'d Device<B>,
    row: Row,
    a: Buffer,
    b: Buffer,
    kernel: KernelHandle,
    info: [u64; 2],
}

impl<B: Builtins> RowChain<'_, B> {
    /// The chain; with `programmatic`, every launch after the first may overlap the one
    /// before it.
    fn launch(&self, d: &Device<B>, programmatic: bool) -> Result<(), ServerError> {
        let grid = self.row.grid();
        for i in 0..self.row.kernels {
            let (x, y) = if i % 2 == 0 {
                (&self.a, &self.b)
            } else {
                (&self.b, &self.a)
            };
            d.launch(
                STREAM,
                &self.kernel,
                Dims::grid(grid).programmatic(programmatic && i > 0),
                &[Arg::read(x), Arg::write(y)],
                &self.info,
            )?;
        }
        Ok(())
    }

    fn reset(&self) -> Result<(), ServerError> {
        let zeros = vec![0u8; (self.row.elements * 4) as usize];
        self.device.write(STREAM, &self.a, 0, zeros)?;
        self.device.sync(STREAM)
    }

    /// Reads A back; the bytes are kept for the round's check.
    fn read(&self) -> Result<Vec<u8>, ServerError> {
        self.device.read(STREAM, &self.a)
    }

    fn eager_pass(&self) -> Result<(Pass, Vec<u8>), ServerError> {
        let start = Instant::now();
        self.launch(self.device, false)?;
        let enqueue = start.elapsed();
        let out = self.read()?;
        Ok((
            Pass {
                enqueue,
                total: start.elapsed(),
            },
            out,
        ))
    }

    fn replay_pass(&self, graph: &GraphHandle) -> Result<(Pass, Vec<u8>), ServerError> {
        let start = Instant::now();
        self.device.replay(STREAM, graph, 1)?;
        let enqueue = start.elapsed();
        let out = self.read()?;
        Ok((
            Pass {
                enqueue,
                total: start.elapsed(),
            },
            out,
        ))
    }
}

/// Where A first differs from `expected`, as a message, if it does.
fn check(bytes: &[u8], expected: f32, elements: u64) -> Option<String> {
    if bytes.len() as u64 != elements * 4 {
        return Some(format!(
            "A read back {} bytes, not {}",
            bytes.len(),
            elements * 4
        ));
    }
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .enumerate()
        .find(|(_, v)| *v != expected)
        .map(|(i, v)| format!("element {i} of A is {v}, not {expected}"))
}

/// One figure against another round by round: each round's ratio, the two measured
/// side by side in that round (alternating, so drift hits both alike), then the median
/// and the spread of those ratios.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Paired {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

/// `over` against `under`, round by round (rounds past the shorter list are left out).
pub(crate) fn paired(over: &Figures, under: &Figures) -> Paired {
    paired_values(&over.rounds_us_per_kernel, &under.rounds_us_per_kernel)
}

/// Each round's `over[i] / under[i]`, their median and spread.
pub(crate) fn paired_values(over: &[f64], under: &[f64]) -> Paired {
    let mut ratios: Vec<f64> = over.iter().zip(under).map(|(o, u)| o / u).collect();
    let min = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let max = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Paired {
        median: median(&mut ratios),
        min,
        max,
    }
}

pub(crate) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// The `q`-quantile (nearest rank) of `values`, µs.
fn quantile(values: &mut [Duration], q: f64) -> f64 {
    values.sort();
    if values.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1].as_secs_f64() * 1e6
}

/// Rounds of one mode, gathered.
#[derive(Default)]
struct Gathered {
    enqueue_us_per_pass: Vec<f64>,
    rounds_us_per_kernel: Vec<f64>,
    cpu_us_per_kernel: Vec<f64>,
}

impl Gathered {
    /// A round's passes, and the calling thread's CPU time over them.
    fn push(&mut self, passes: &[Pass], kernels: usize, cpu: Option<Duration>) {
        let n = passes.len() as f64;
        if let Some(cpu) = cpu {
            self.cpu_us_per_kernel
                .push(cpu.as_secs_f64() * 1e6 / (n * kernels as f64));
        }
        let enqueue: Duration = passes.iter().map(|p| p.enqueue).sum();
        let total: Duration = passes.iter().map(|p| p.total).sum();
        self.enqueue_us_per_pass
            .push(enqueue.as_secs_f64() * 1e6 / n);
        self.rounds_us_per_kernel
            .push(total.as_secs_f64() * 1e6 / (n * kernels as f64));
    }

    fn figures(mut self) -> Figures {
        let rounds = self.rounds_us_per_kernel.clone();
        Figures {
            enqueue_us_per_pass: median(&mut self.enqueue_us_per_pass),
            e2e_us_per_kernel: median(&mut self.rounds_us_per_kernel),
            rounds_us_per_kernel: rounds,
            cpu_us_per_kernel: median(&mut self.cpu_us_per_kernel),
        }
    }
}

/// Measures `row` on a fresh device of `backend`, with its floor if `floor` is given.
/// `progress` hears of each round of a long row.
pub(crate) fn bench_row<B: Builtins>(
    backend: B,
    row: Row,
    options: &BenchOptions,
    floor: Option<FloorMaker<'_>>,
    progress: &mut dyn FnMut(&str),
) -> Result<RowReport, BenchError> {
    let fail =
        |what: &str, e: ServerError| BenchError(format!("{}: {what}: {}", row.name, Chain(&e)));
    let device = Device::new(backend, DeviceConfig::new().streams(1).expect("one stream"))
        .map_err(|e| fail("opening the device", e))?;
    let bytes = row.elements * 4;
    let chain = RowChain {
        device: &device,
        row,
        a: device.alloc(STREAM, bytes).map_err(|e| fail("alloc", e))?,
        b: device.alloc(STREAM, bytes).map_err(|e| fail("alloc", e))?,
        kernel: device.kernel(B::builtin(Builtin::AddScalar)),
        info: Builtin::AddScalar.info(row.elements, 1.0),
    };
    chain.reset().map_err(|e| fail("reset", e))?;
    // B is written by the first launch before anything reads it; zeros make the
    // capture's warmup read defined bytes too.
    device
        .write(STREAM, &chain.b, 0, vec![0u8; bytes as usize])
        .map_err(|e| fail("write", e))?;

    let start = Instant::now();
    let graph = device
        .capture(STREAM, |d| chain.launch(d, false))
        .map_err(|e| fail("capture", e))?;
    let capture_ms = start.elapsed().as_secs_f64() * 1e3;
    let programmatic_graph = match programmatic_refusal(&device, &chain.kernel) {
        Some(why) => Err(why),
        None => Ok(device
            .capture(STREAM, |d| chain.launch(d, true))
            .map_err(|e| fail("programmatic capture", e))?),
    };
    let ledger = device
        .graph(&graph)
        .ok_or_else(|| BenchError(format!("{}: the captured graph has no ledger", row.name)))?;
    let live_device_bytes: u64 = device
        .memory_report()
        .streams
        .iter()
        .map(|s| s.device.in_use())
        .sum();
    let mut floor = match floor {
        Some(make) => {
            Some(make(&row).map_err(|e| BenchError(format!("{}: floor: {e}", row.name)))?)
        }
        None => None,
    };

    // One untimed pass of each mode warms everything up.
    chain.eager_pass().map_err(|e| fail("eager warmup", e))?;
    chain
        .replay_pass(&graph)
        .map_err(|e| fail("replay warmup", e))?;
    if let Ok(g) = &programmatic_graph {
        chain
            .replay_pass(g)
            .map_err(|e| fail("programmatic replay warmup", e))?;
    }
    // The floor's eager way of each variant (its command buffers, say) too.
    let floor_variants = floor.as_ref().map_or_else(Vec::new, |f| f.eager_variants());
    if let Some(f) = floor.as_mut() {
        let warmup = |e: String| BenchError(format!("{}: floor warmup: {e}", row.name));
        for v in 0..floor_variants.len() {
            f.choose_eager(v).map_err(warmup)?;
            f.eager_pass().map_err(warmup)?;
        }
        if let Some(r) = f.replay_pass() {
            r.map_err(warmup)?;
        }
    }

    let passes = options.passes.unwrap_or_else(|| row.default_passes());
    let expected = row.expected(passes);
    let (mut eager, mut replay) = (Gathered::default(), Gathered::default());
    let mut programmatic = Gathered::default();
    // Eager, replayed, and (where it was captured) replayed as programmatic launches.
    let modes: Vec<(&str, Option<&GraphHandle>)> = [
        Some(("eager", None)),
        Some(("replayed", Some(&graph))),
        programmatic_graph
            .as_ref()
            .ok()
            .map(|g| ("programmatic replayed", Some(g))),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut floor_eager: Vec<Gathered> =
        floor_variants.iter().map(|_| Gathered::default()).collect();
    let mut floor_replay = Gathered::default();
    let mut replay_calls = Vec::with_capacity(passes * options.rounds);
    let zeros = vec![0f32; row.elements as usize];
    let round_start = Instant::now();
    for round in 0..options.rounds {
        for (i, &(mode, replayed)) in modes.iter().enumerate() {
            chain.reset().map_err(|e| fail("reset", e))?;
            let mut times = Vec::with_capacity(passes);
            let mut last = Vec::new();
            let (ran, cpu) = cpu_time::spent(|| -> Result<(), BenchError> {
                for _ in 0..passes {
                    let (pass, out) = match replayed {
                        Some(g) => chain.replay_pass(g).map_err(|e| fail(mode, e))?,
                        None => chain.eager_pass().map_err(|e| fail("eager", e))?,
                    };
                    if i == 1 {
                        replay_calls.push(pass.enqueue);
                    }
                    times.push(pass);
                    last = out;
                }
                Ok(())
            });
            ran?;
            if let Some(wrong) = check(&last, expected, row.elements) {
                return Err(BenchError(format!(
                    "{}: after {passes} {mode} passes, {wrong}",
                    row.name
                )));
            }
            [&mut eager, &mut replay, &mut programmatic][i].push(&times, row.kernels, cpu);
        }
        if let Some(f) = floor.as_mut() {
            let floor_err = |e: String| BenchError(format!("{}: floor: {e}", row.name));
            let runs = (0..floor_variants.len())
                .map(Some)
                .chain([None])
                .collect::<Vec<_>>();
            for variant in runs {
                // `Some(v)`: eager, the way variant `v` names; `None`: replayed.
                if let Some(v) = variant {
                    f.choose_eager(v).map_err(floor_err)?;
                }
                f.reset(&zeros).map_err(floor_err)?;
                let mut times = Vec::with_capacity(passes);
                let (ran, cpu) = cpu_time::spent(|| -> Result<(), BenchError> {
                    for _ in 0..passes {
                        let pass = match variant {
                            None => match f.replay_pass() {
                                Some(p) => p.map_err(floor_err)?,
                                None => break,
                            },
                            Some(_) => f.eager_pass().map_err(floor_err)?,
                        };
                        times.push(pass);
                    }
                    Ok(())
                });
                ran?;
                if times.is_empty() {
                    continue;
                }
                if let Some(v) = f.output().iter().find(|v| **v != expected) {
                    let how = match variant {
                        Some(v) if !floor_variants[v].is_empty() => {
                            format!(" (eager, {})", floor_variants[v])
                        }
                        _ => String::new(),
                    };
                    return Err(floor_err(format!(
                        "after {passes} passes{how} an element of A is {v}, not {expected}"
                    )));
                }
                match variant {
                    Some(v) => floor_eager[v].push(&times, row.kernels, cpu),
                    None => floor_replay.push(&times, row.kernels, cpu),
                }
            }
        }
        if round + 1 < options.rounds && round_start.elapsed() > Duration::from_secs(1) {
            progress(&format!(
                "{}: round {} of {} done ({:.1} s)",
                row.name,
                round + 1,
                options.rounds,
                round_start.elapsed().as_secs_f64()
            ));
        }
    }
    device
        .drop_graph(graph)
        .map_err(|e| fail("drop graph", e))?;
    let programmatic = match programmatic_graph {
        Ok(g) => {
            device.drop_graph(g).map_err(|e| fail("drop graph", e))?;
            Ok(programmatic.figures())
        }
        Err(why) => Err(why),
    };
    device.sync(STREAM).map_err(|e| fail("sync", e))?;

    let floor = floor.map(|_| {
        let eager_variants: Vec<(String, Figures)> = floor_variants
            .into_iter()
            .zip(floor_eager)
            .map(|(name, gathered)| (name, gathered.figures()))
            .collect();
        let (eager_best, eager) = eager_variants
            .iter()
            .min_by(|a, b| a.1.e2e_us_per_kernel.total_cmp(&b.1.e2e_us_per_kernel))
            .cloned()
            .unwrap_or_default();
        FloorFigures {
            eager,
            eager_variants,
            eager_best,
            replay: (!floor_replay.rounds_us_per_kernel.is_empty()).then(|| floor_replay.figures()),
        }
    });
    Ok(RowReport {
        row,
        passes,
        rounds: options.rounds,
        eager: eager.figures(),
        replay: replay.figures(),
        capture_ms,
        graph_device_bytes: ledger.device_bytes,
        live_device_bytes,
        replay_call_p50_us: quantile(&mut replay_calls, 0.5),
        replay_call_p99_us: quantile(&mut replay_calls, 0.99),
        floor,
        programmatic,
    })
}

#[cfg(all(test, feature = "mock"))]
mod tests {
    use capture_graphs::mock::{AffineMock, MockBackend};

    use super::*;

    fn quick(row: Row) -> BenchOptions {
        BenchOptions {
            rows: vec![row],
            rounds: 5,
            passes: Some(2),
            decode: false,
            update: false,
            until: false,
            fork: false,
        }
    }

    #[test]
    fn a_row_is_measured_and_checked_on_both_mock_modes() {
        let row = Row::new("64x150", 64, 150, false);
        for report in [
            bench_row(MockBackend::new(), row, &quick(row), None, &mut |_| {}),
            bench_row(AffineMock::new(), row, &quick(row), None, &mut |_| {}),
        ] {
            let report = report.expect("the row runs");
            assert_eq!(report.passes, 2);
            assert_eq!(report.eager.rounds_us_per_kernel.len(), 5);
            assert_eq!(report.replay.rounds_us_per_kernel.len(), 5);
            assert!(report.eager.e2e_us_per_kernel > 0.0);
            assert!(report.replay.enqueue_us_per_pass > 0.0);
            assert!(report.replay_call_p99_us >= report.replay_call_p50_us);
            // The graph pins the two buffers (and its info words), all of them live.
            assert!(report.graph_device_bytes >= 2 * 64 * 4);
            assert!(report.live_device_bytes >= report.graph_device_bytes);
            assert!(report.floor.is_none());
            // The mock runs no programmatic dependent launch: the row says so.
            let why = report.programmatic.expect_err("not measured on the mock");
            assert!(why.contains("the mock runs no programmatic"), "{why}");
        }
    }

    /// A floor that does the chain on the host in three ways, each reporting its own
    /// fixed time per pass, the `wrong` one (if any) computing it wrong.
    struct HostFloor {
        a: Vec<f32>,
        kernels: usize,
        way: usize,
        wrong: Option<usize>,
    }

    /// Each way's pass time, µs: the second is the fastest.
    const WAY_US: [u64; 3] = [300, 100, 200];

    impl Floor for HostFloor {
        fn reset(&mut self, values: &[f32]) -> Result<(), String> {
            self.a = values.to_vec();
            Ok(())
        }
        fn eager_variants(&self) -> Vec<String> {
            vec!["one".into(), "two".into(), "three".into()]
        }
        fn choose_eager(&mut self, variant: usize) -> Result<(), String> {
            self.way = variant;
            Ok(())
        }
        fn eager_pass(&mut self) -> Result<Pass, String> {
            let add = if self.wrong == Some(self.way) {
                2.0
            } else {
                1.0
            };
            for v in &mut self.a {
                *v += add * self.kernels as f32;
            }
            let total = Duration::from_micros(WAY_US[self.way]);
            Ok(Pass {
                enqueue: total / 2,
                total,
            })
        }
        fn replay_pass(&mut self) -> Option<Result<Pass, String>> {
            None
        }
        fn output(&self) -> &[f32] {
            &self.a
        }
    }

    #[test]
    fn a_floor_is_measured_beside_the_runtime_each_way_and_checked_too() {
        let row = Row::new("64x150", 64, 150, false);
        let make = |wrong: Option<usize>| {
            move |r: &Row| -> Result<Box<dyn Floor>, String> {
                Ok(Box::new(HostFloor {
                    a: Vec::new(),
                    kernels: r.kernels,
                    way: 0,
                    wrong,
                }))
            }
        };
        let right = make(None);
        let report = bench_row(
            MockBackend::new(),
            row,
            &quick(row),
            Some(&right),
            &mut |_| {},
        )
        .expect("the row runs");
        let floor = report.floor.expect("a floor was measured");
        // Every way is measured in every round; the floor is the fastest of them.
        let names: Vec<&str> = floor
            .eager_variants
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        assert_eq!(names, ["one", "two", "three"]);
        for ((_, f), us) in floor.eager_variants.iter().zip(WAY_US) {
            assert_eq!(f.rounds_us_per_kernel.len(), 5);
            assert_eq!(f.e2e_us_per_kernel, us as f64 / 150.0);
        }
        assert_eq!(floor.eager_best, "two");
        assert_eq!(floor.eager, floor.eager_variants[1].1);
        assert!(floor.replay.is_none());
        // A way that computes the chain wrong fails the row, naming the way.
        let wrong = make(Some(2));
        let error = bench_row(
            MockBackend::new(),
            row,
            &quick(row),
            Some(&wrong),
            &mut |_| {},
        )
        .expect_err("a wrong floor is caught");
        assert!(error.0.contains("floor"), "{error}");
        assert!(error.0.contains("(eager, three)"), "{error}");
    }

    #[test]
    fn a_ratio_is_taken_round_by_round() {
        let figures = |rounds: &[f64]| Figures {
            rounds_us_per_kernel: rounds.to_vec(),
            ..Figures::default()
        };
        // The library's slow round is the floor's slow round too: paired, they cancel.
        let lib = figures(&[2.0, 4.0, 2.2, 6.0, 2.1]);
        let floor = figures(&[1.0, 2.0, 2.0, 3.0, 1.0]);
        let p = paired(&lib, &floor);
        assert_eq!(p.median, 2.0);
        assert_eq!((p.min, p.max), (1.1, 2.1));
        // Rounds past the shorter list are left out.
        let p = paired(&figures(&[3.0, 9.0]), &figures(&[1.0]));
        assert_eq!((p.median, p.min, p.max), (3.0, 3.0, 3.0));
    }

    #[test]
    fn default_passes_keep_rounds_short() {
        assert_eq!(ROWS[0].default_passes(), 66);
        assert_eq!(ROWS[2].default_passes(), 2);
        assert_eq!(ROWS[4].default_passes(), 1);
        assert!(ROWS.iter().all(|r| r.kernels % 2 == 0));
    }

    #[test]
    fn quantiles_and_medians() {
        let mut d: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(quantile(&mut d, 0.5), 50.0);
        assert_eq!(quantile(&mut d, 0.99), 99.0);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
