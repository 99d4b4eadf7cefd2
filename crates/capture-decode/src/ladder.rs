//! `capture decode --buckets 1,2,4,8`: the decoder stepping a batch of sequences at once
//! over a paged KV cache, its step captured once per batch-size bucket into one graph
//! pool (rule 23), as an inference server captures its decode step.
//!
//! - **Paged cache.** Each layer's K and V caches are one pool of blocks of
//!   `block_rows` rows; each sequence has a block table in device memory naming its
//!   blocks, allocated as it grows and freed when it ends, so tables change from step to
//!   step. The last block is the padding slots' scratch.
//! - **Buckets.** Slot `i` of a bucket is a sequence's state (`[position, token]`), table
//!   and logits. A step with `n` live sequences picks the smallest bucket of at least
//!   `n` slots and pads the rest (position 0, every table entry the padding block).
//! - **Per-op allocation.** Each slot's intermediates are allocated inside the capture
//!   closure and dropped after the slot, as an engine allocates per op: a bucket's graph
//!   holds `bucket` slots' worth, and one pool holds the ladder's largest member once.
//! - **Three worlds, one schedule.** The same sequences (ids, lengths, tables) step in
//!   three copies of the buffers: eagerly, through the shared-pool ladder, and through a
//!   ladder of separate pools (one per bucket). Every live slot's logits must be bit for
//!   bit the same in all three; the next token is the eager logits' argmax.

use std::time::Instant;

use capture_graphs::{
    Buffer, Device, DeviceConfig, DeviceReport, GraphHandle, GraphPool, Result, ServerError,
    StreamId,
};

use super::backend::DecodeBackend;
use super::host::argmax;
use super::model::Config;
use super::run::Check;
use super::step::{AttnGrid, DeviceModel, Scratch, Sequence};
use super::weights::{Rng, Weights};

/// The stream everything runs on.
const S: StreamId = StreamId::new(0);

/// The most a shared ladder's pool may hold against its largest member captured alone.
pub const LADDER_BOUND: f64 = 1.05;

/// What `capture decode --buckets` runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LadderOptions {
    /// The model's sizes (its context is each sequence's longest).
    pub config: Config,
    /// The batch-size buckets, ascending, each captured once per ladder.
    pub buckets: Vec<u32>,
    /// Decode steps (at least 32).
    pub steps: u32,
    /// Replays after the steps that must leave the memory report as it was.
    pub replays: u32,
    /// Rows per cache block.
    pub block_rows: u32,
    /// The weights' and the schedule's seed.
    pub seed: u64,
}

impl LadderOptions {
    /// The ladder's default model: small enough that three copies of a batch of eight
    /// step quickly on a CPU driver.
    pub const CONFIG: Config = Config {
        dim: 64,
        layers: 1,
        heads: 2,
        vocab: 128,
        context: 64,
    };

    /// Defaults for `buckets`.
    pub fn new(buckets: Vec<u32>) -> Self {
        Self {
            config: Self::CONFIG,
            buckets,
            steps: 40,
            replays: 1000,
            block_rows: 8,
            seed: 14,
        }
    }

    /// Checks the run fits: buckets ascending and distinct, 1 to 64 slots; at least 32
    /// steps; a block of at least one row that the context holds.
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] naming what does not fit.
    pub fn check(&self) -> Result<()> {
        self.config.check()?;
        let listed = self
            .buckets
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        if self.buckets.is_empty()
            || self.buckets.windows(2).any(|w| w[0] >= w[1])
            || self.buckets[0] == 0
            || self.largest() > 64
        {
            return Err(ServerError::invalid(
                "buckets",
                listed,
                "one to 64 slots each, ascending, no repeats",
            ));
        }
        if self.steps < 32 {
            return Err(ServerError::invalid(
                "steps",
                self.steps,
                "the ladder steps at least 32 times (up and down every bucket)",
            ));
        }
        if self.block_rows == 0 || self.block_rows > self.config.context {
            return Err(ServerError::invalid(
                "block rows",
                self.block_rows,
                format!("1 to the context's {} rows", self.config.context),
            ));
        }
        Ok(())
    }

    /// The largest bucket.
    pub fn largest(&self) -> u32 {
        self.buckets.last().copied().unwrap_or(1)
    }

    /// Blocks one sequence's table holds.
    fn blocks_per_sequence(&self) -> u32 {
        self.config.context.div_ceil(self.block_rows)
    }

    /// Blocks of each cache: every slot's longest sequence, and the padding block.
    fn blocks(&self) -> u32 {
        self.largest() * self.blocks_per_sequence() + 1
    }

    /// The padding slots' block: the last.
    fn padding_block(&self) -> u32 {
        self.blocks() - 1
    }
}

/// One copy of the batch's buffers: per slot a state, a block table and logits; per
/// layer the paged K and V caches.
struct World {
    states: Vec<Buffer>,
    tables: Vec<Buffer>,
    logits: Vec<Buffer>,
    k_pages: Vec<Buffer>,
    v_pages: Vec<Buffer>,
}

impl World {
    fn new<B: DecodeBackend>(dev: &Device<B>, o: &LadderOptions) -> Result<Self> {
        let c = o.config;
        let zeroed = |bytes: u64| -> Result<Buffer> {
            let b = dev.alloc(S, bytes)?;
            dev.write(S, &b, 0, vec![0u8; bytes as usize])?;
            Ok(b)
        };
        let slots = o.largest() as usize;
        let cache = u64::from(o.blocks()) * u64::from(o.block_rows) * u64::from(c.dim) * 4;
        Ok(Self {
            states: (0..slots).map(|_| zeroed(16)).collect::<Result<_>>()?,
            tables: (0..slots)
                .map(|_| zeroed(u64::from(o.blocks_per_sequence()) * 4))
                .collect::<Result<_>>()?,
            logits: (0..slots)
                .map(|_| zeroed(u64::from(c.vocab) * 4))
                .collect::<Result<_>>()?,
            k_pages: (0..c.layers)
                .map(|_| zeroed(cache))
                .collect::<Result<_>>()?,
            v_pages: (0..c.layers)
                .map(|_| zeroed(cache))
                .collect::<Result<_>>()?,
        })
    }

    /// Slot `i` as a step reads it.
    fn sequence(&self, i: usize, block_rows: u32) -> Sequence<'_> {
        Sequence {
            state: &self.states[i],
            table: &self.tables[i],
            block_rows,
            k_caches: self.k_pages.iter().collect(),
            v_caches: self.v_pages.iter().collect(),
        }
    }

    /// Writes slot `i`'s state and block table.
    fn set<B: DecodeBackend>(
        &self,
        dev: &Device<B>,
        i: usize,
        state: [u32; 2],
        table: &[u32],
    ) -> Result<()> {
        dev.write_values(S, &self.states[i], 0, &[state[0], state[1], 0, 0])?;
        dev.write_values(S, &self.tables[i], 0, table)
    }
}

/// The step of `slots` slots of `world`: each slot's intermediates allocated for it and
/// dropped after it, as an engine allocates per op.
fn batch_step<B: DecodeBackend>(
    dev: &Device<B>,
    model: &DeviceModel<B>,
    world: &World,
    slots: usize,
    block_rows: u32,
) -> Result<()> {
    for i in 0..slots {
        let scratch = Scratch::new(dev, S, model.config())?;
        model.sequence_step(
            dev,
            &world.sequence(i, block_rows),
            &scratch,
            &world.logits[i],
            AttnGrid::Full,
        )?;
    }
    Ok(())
}

/// One live sequence of the schedule.
#[derive(Clone, Debug)]
struct Live {
    position: u32,
    token: u32,
    blocks: Vec<u32>,
    /// The position it ends at.
    end: u32,
}

/// A number below `n` from the weights' generator: the schedule's draws.
fn below(rng: &mut Rng, n: u32) -> u32 {
    (rng.next_u64() % u64::from(n.max(1))) as u32
}

/// The live batch size of each step: up the ladder one sequence at a time to the
/// largest bucket, back down to one, then seeded sizes, `steps` in all.
fn batch_sizes(o: &LadderOptions, rng: &mut Rng) -> Vec<u32> {
    let top = o.largest();
    let mut sizes: Vec<u32> = (1..=top).chain((1..top).rev()).collect();
    while sizes.len() < o.steps as usize {
        sizes.push(1 + below(rng, top));
    }
    sizes.truncate(o.steps as usize);
    sizes
}

/// One bucket's figures.
#[derive(Clone, Debug, PartialEq)]
pub struct BucketFigures {
    /// Slots.
    pub bucket: u32,
    /// Steps it ran.
    pub steps: u32,
    /// Live sequences it stepped over those steps (tokens made).
    pub tokens: u64,
    /// Seconds of eager steps (launches through the sync).
    pub eager_seconds: f64,
    /// Seconds of shared-ladder replays (through the sync).
    pub replay_seconds: f64,
    /// Milliseconds its capture into the shared pool took.
    pub capture_ms: f64,
    /// What its graph holds alone, in its own pool (graph-only bytes).
    pub separate_bytes: u64,
    /// Launches its graph recorded.
    pub launches: u64,
}

impl BucketFigures {
    /// Tokens per second, eager.
    pub fn eager_tokens_per_second(&self) -> f64 {
        self.tokens as f64 / self.eager_seconds.max(f64::MIN_POSITIVE)
    }

    /// Tokens per second, replayed.
    pub fn replay_tokens_per_second(&self) -> f64 {
        self.tokens as f64 / self.replay_seconds.max(f64::MIN_POSITIVE)
    }
}

/// What one ladder run found.
#[derive(Clone, Debug)]
pub struct LadderReport {
    /// The backend's name.
    pub backend: &'static str,
    /// Whether its times measure host overhead only (the mock's).
    pub host_only: bool,
    /// What ran.
    pub options: LadderOptions,
    /// Per bucket, ascending.
    pub buckets: Vec<BucketFigures>,
    /// Each step's live batch size and the bucket it ran in.
    pub path: Vec<(u32, u32)>,
    /// Sequences started over the run.
    pub sequences: u32,
    /// Distinct block tables written to slots over the run.
    pub tables: usize,
    /// Steps whose replayed logits differed from eager: `(step, slot)`.
    pub eager_mismatches: Vec<(usize, usize)>,
    /// Steps whose shared-ladder logits differed from separate pools': `(step, slot)`.
    pub separate_mismatches: Vec<(usize, usize)>,
    /// Graph-only bytes the shared pool holds, the buckets captured ascending.
    pub shared_bytes: u64,
    /// The same, captured descending.
    pub descending_bytes: u64,
    /// The memory report before and after the further replays, when they differ.
    pub report_change: Option<(String, String)>,
    /// The memory report at the end.
    pub report: DeviceReport,
    /// Captures that failed, with why.
    pub capture_failures: Vec<String>,
}

impl LadderReport {
    /// The largest bucket's graph-only bytes captured alone (its own pool).
    pub fn largest_alone(&self) -> u64 {
        self.buckets.last().map_or(0, |b| b.separate_bytes)
    }

    /// The separate pools' graph-only bytes, summed.
    pub fn separate_total(&self) -> u64 {
        self.buckets.iter().map(|b| b.separate_bytes).sum()
    }

    fn ratio(a: u64, b: u64) -> f64 {
        a as f64 / b.max(1) as f64
    }

    /// Every check, in order.
    pub fn checks(&self) -> Vec<Check> {
        let o = &self.options;
        let used: Vec<u32> = o
            .buckets
            .iter()
            .copied()
            .filter(|b| self.path.iter().any(|(_, at)| at == b))
            .collect();
        let top = o.largest();
        let first_top = self.path.iter().position(|&(_, b)| b == top);
        let first_one = self.path.iter().position(|&(_, b)| b == o.buckets[0]);
        let down =
            first_top.is_some_and(|t| self.path[t..].iter().any(|&(_, b)| b == o.buckets[0]));
        let up = first_one.is_some_and(|t| self.path[t..].iter().any(|&(_, b)| b == top));
        let alone = self.largest_alone();
        let bound = (alone as f64 * LADDER_BOUND) as u64;
        vec![
            Check {
                name: "every bucket captures",
                passed: self.capture_failures.is_empty(),
                detail: if self.capture_failures.is_empty() {
                    format!(
                        "{} buckets, each into the shared pool (ascending and descending) and into a pool of its own",
                        o.buckets.len()
                    )
                } else {
                    self.capture_failures.join("; ")
                },
            },
            Check {
                name: "the schedule visits every bucket, up and down",
                passed: self.path.len() >= 32 && used.len() == o.buckets.len() && up && down,
                detail: format!(
                    "{} steps, buckets used {used:?}, {top} -> {} {}, {} -> {top} {}; {} sequences, {} distinct block tables",
                    self.path.len(),
                    o.buckets[0],
                    if down { "seen" } else { "missing" },
                    o.buckets[0],
                    if up { "seen" } else { "missing" },
                    self.sequences,
                    self.tables
                ),
            },
            Check {
                name: "replayed logits bit for bit, eager against the shared ladder",
                passed: self.eager_mismatches.is_empty(),
                detail: match self.eager_mismatches.first() {
                    None => format!("{} steps, every live slot identical", self.path.len()),
                    Some((step, slot)) => format!(
                        "{} slots differ, first at step {step} slot {slot}",
                        self.eager_mismatches.len()
                    ),
                },
            },
            Check {
                name: "the shared ladder bit for bit against separate pools",
                passed: self.separate_mismatches.is_empty(),
                detail: match self.separate_mismatches.first() {
                    None => format!("{} steps, every live slot identical", self.path.len()),
                    Some((step, slot)) => format!(
                        "{} slots differ, first at step {step} slot {slot}",
                        self.separate_mismatches.len()
                    ),
                },
            },
            Check {
                name: "the shared pool holds about its largest member",
                passed: self.shared_bytes <= bound && self.descending_bytes <= bound,
                detail: format!(
                    "shared {} B (ascending), {} B (descending) against {} B for bucket {top} alone (bound {LADDER_BOUND} x = {bound} B)",
                    self.shared_bytes, self.descending_bytes, alone
                ),
            },
            Check {
                name: "further replays leave the memory report unchanged",
                passed: self.report_change.is_none(),
                detail: match &self.report_change {
                    None => format!(
                        "{} replays, the report identical before and after",
                        o.replays
                    ),
                    Some((before, after)) => format!("before:\n{before}after:\n{after}"),
                },
            },
        ]
    }

    /// Whether every check holds.
    pub fn passed(&self) -> bool {
        self.checks().iter().all(|c| c.passed)
    }
}

/// The graph-only bytes pool `pool` holds for its members.
fn pool_bytes(report: &DeviceReport, pool: &GraphPool) -> u64 {
    report
        .pools
        .iter()
        .find(|p| p.pool == pool.id())
        .map_or(0, |p| p.held_bytes)
}

/// Captures `buckets` (in the order given) of `world` into `pool`, each graph labelled.
fn capture_ladder<B: DecodeBackend>(
    dev: &Device<B>,
    model: &DeviceModel<B>,
    world: &World,
    pool: &GraphPool,
    buckets: &[u32],
    block_rows: u32,
    failures: &mut Vec<String>,
) -> Vec<(u32, Option<GraphHandle>, f64)> {
    let mut graphs = Vec::new();
    for &b in buckets {
        let started = Instant::now();
        let captured = dev.capture_in(S, pool, |d| {
            batch_step(d, model, world, b as usize, block_rows)
        });
        let ms = started.elapsed().as_secs_f64() * 1e3;
        match captured {
            Ok(graph) => {
                let _ = dev.label_graph(&graph, &format!("b={b} ({})", pool.label()));
                graphs.push((b, Some(graph), ms));
            }
            Err(e) => {
                failures.push(format!(
                    "bucket {b} into {}: {}",
                    pool.label(),
                    capture_graphs::Chain(&e)
                ));
                graphs.push((b, None, ms));
            }
        }
    }
    graphs
}

/// The memory report with what a drop queue happens to hold left out: what the
/// further-replays check compares.
fn settled(report: &DeviceReport) -> DeviceReport {
    let mut report = report.clone();
    for s in &mut report.streams {
        s.pending_drops = 0;
    }
    report
}

/// Runs the ladder on `backend`.
///
/// # Errors
///
/// The options do not fit, or the device failed (a capture that fails is a failed
/// check, not an error).
pub fn run_ladder<B: DecodeBackend>(backend: B, options: LadderOptions) -> Result<LadderReport> {
    options.check()?;
    let o = &options;
    let c = o.config;
    let dev = Device::new(backend, DeviceConfig::new())?;
    let weights = Weights::random(&c, o.seed);
    let model = DeviceModel::new(&dev, S, c, &weights)?;
    let worlds = [
        World::new(&dev, o)?,
        World::new(&dev, o)?,
        World::new(&dev, o)?,
    ];
    let [eager, shared, separate] = &worlds;
    let br = o.block_rows;
    let pad_table = vec![o.padding_block(); o.blocks_per_sequence() as usize];
    // Every slot padded while the ladders capture: their warmups write the padding
    // block only.
    for w in &worlds {
        for i in 0..o.largest() as usize {
            w.set(&dev, i, [0, 0], &pad_table)?;
        }
    }
    let mut failures = Vec::new();
    let shared_pool = dev.graph_pool("shared ladder")?;
    let ladder = capture_ladder(
        &dev,
        &model,
        shared,
        &shared_pool,
        &o.buckets,
        br,
        &mut failures,
    );
    let mut separate_graphs = Vec::new();
    let mut separate_pools = Vec::new();
    for &b in &o.buckets {
        let pool = dev.graph_pool(&format!("separate b={b}"))?;
        let mut one = capture_ladder(&dev, &model, separate, &pool, &[b], br, &mut failures);
        separate_graphs.push(one.pop().and_then(|(_, g, _)| g));
        separate_pools.push(pool);
    }
    // The same ladder captured largest first, for its figure only.
    let descending_pool = dev.graph_pool("descending ladder")?;
    let descending: Vec<u32> = o.buckets.iter().rev().copied().collect();
    let down = capture_ladder(
        &dev,
        &model,
        shared,
        &descending_pool,
        &descending,
        br,
        &mut failures,
    );
    let report = dev.memory_report();
    let shared_bytes = pool_bytes(&report, &shared_pool);
    let descending_bytes = pool_bytes(&report, &descending_pool);
    drop(down);
    let mut buckets: Vec<BucketFigures> = o
        .buckets
        .iter()
        .zip(&ladder)
        .zip(&separate_pools)
        .map(|((&bucket, (_, graph, ms)), pool)| BucketFigures {
            bucket,
            steps: 0,
            tokens: 0,
            eager_seconds: 0.0,
            replay_seconds: 0.0,
            capture_ms: *ms,
            separate_bytes: pool_bytes(&report, pool),
            launches: graph
                .as_ref()
                .and_then(|g| dev.graph(g))
                .map_or(0, |l| l.launches),
        })
        .collect();

    // The schedule.
    let mut rng = Rng::new(o.seed ^ 0x6c61_6464_6572);
    let sizes = batch_sizes(o, &mut rng);
    let mut free: Vec<u32> = (0..o.padding_block()).rev().collect();
    let mut live: Vec<Live> = Vec::new();
    let mut sequences = 0;
    let mut tables = std::collections::BTreeSet::new();
    let mut path = Vec::new();
    let (mut eager_mismatches, mut separate_mismatches) = (Vec::new(), Vec::new());
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (step, &size) in sizes.iter().enumerate() {
        // Sequences end (at their length, or to shrink the batch) and start.
        live.retain(|s| s.position < s.end);
        while live.len() > size as usize {
            let gone = live.remove(below(&mut rng, live.len() as u32) as usize);
            free.extend(gone.blocks);
        }
        while live.len() < size as usize {
            sequences += 1;
            live.push(Live {
                position: 0,
                token: below(&mut rng, c.vocab),
                blocks: Vec::new(),
                end: 2 + below(&mut rng, c.context - 1),
            });
        }
        // Their tables grow a block as they reach it; freed blocks go to whoever asks.
        for s in &mut live {
            while s.blocks.len() as u32 <= s.position / br {
                let block = free.pop().ok_or_else(|| {
                    ServerError::invalid("blocks", o.blocks(), "the cache ran out of blocks")
                })?;
                s.blocks.push(block);
            }
        }
        let n = live.len();
        let Some(at) = o.buckets.iter().position(|&b| b as usize >= n) else {
            return Err(ServerError::invalid("batch", n, "no bucket holds it"));
        };
        let bucket = o.buckets[at];
        path.push((n as u32, bucket));
        for w in &worlds {
            for i in 0..bucket as usize {
                match live.get(i) {
                    Some(s) => {
                        let mut table = pad_table.clone();
                        table[..s.blocks.len()].copy_from_slice(&s.blocks);
                        tables.insert(table.clone());
                        w.set(&dev, i, [s.position, s.token], &table)?;
                    }
                    None => w.set(&dev, i, [0, 0], &pad_table)?,
                }
            }
        }
        let started = Instant::now();
        batch_step(&dev, &model, eager, n, br)?;
        dev.sync(S)?;
        let eager_s = started.elapsed().as_secs_f64();
        let started = Instant::now();
        if let Some(graph) = &ladder[at].1 {
            dev.replay(S, graph, 1)?;
        }
        dev.sync(S)?;
        let replay_s = started.elapsed().as_secs_f64();
        if let Some(graph) = &separate_graphs[at] {
            dev.replay(S, graph, 1)?;
        }
        let figures = &mut buckets[at];
        figures.steps += 1;
        figures.tokens += n as u64;
        figures.eager_seconds += eager_s;
        figures.replay_seconds += replay_s;
        for (i, s) in live.iter_mut().enumerate() {
            let e = dev.read_values::<f32>(S, &eager.logits[i])?;
            let r = dev.read_values::<f32>(S, &shared.logits[i])?;
            let p = dev.read_values::<f32>(S, &separate.logits[i])?;
            if bits(&e) != bits(&r) {
                eager_mismatches.push((step, i));
            }
            if bits(&r) != bits(&p) {
                separate_mismatches.push((step, i));
            }
            s.token = argmax(&e);
            s.position += 1;
        }
    }

    // Further replays, every slot padded: the memory report must not move.
    for i in 0..o.largest() as usize {
        shared.set(&dev, i, [0, 0], &pad_table)?;
    }
    dev.sync(S)?;
    let _ = dev.cleanup();
    let before = settled(&dev.memory_report());
    let graphs: Vec<&GraphHandle> = ladder.iter().filter_map(|(_, g, _)| g.as_ref()).collect();
    for i in 0..o.replays as usize {
        if let Some(graph) = graphs.get(i % graphs.len().max(1)) {
            dev.replay(S, graph, 1)?;
        }
    }
    dev.sync(S)?;
    let _ = dev.cleanup();
    let report = dev.memory_report();
    let after = settled(&report);
    let report_change = (before != after).then(|| (format!("{before:#}"), format!("{after:#}")));
    Ok(LadderReport {
        backend: B::NAME,
        host_only: B::HOST_ONLY,
        options: options.clone(),
        buckets,
        path,
        sequences,
        tables: tables.len(),
        eager_mismatches,
        separate_mismatches,
        shared_bytes,
        descending_bytes,
        report_change,
        report,
        capture_failures: failures,
    })
}

/// The ladder's report as the program prints it.
pub fn render_ladder(r: &LadderReport) -> String {
    use std::fmt::Write;
    let o = &r.options;
    let c = o.config;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "backend: {}{}",
        r.backend,
        if r.host_only {
            " (host overhead only: its kernels are Rust functions)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        out,
        "model: dim {}, {} layer(s), {} heads, vocab {}, context {}; paged KV cache: {} blocks of {} rows",
        c.dim,
        c.layers,
        c.heads,
        c.vocab,
        c.context,
        o.blocks(),
        o.block_rows
    );
    let _ = writeln!(
        out,
        "ladder: buckets {:?}, one graph each in one pool; {} steps, {} sequences, {} distinct block tables",
        o.buckets,
        r.path.len(),
        r.sequences,
        r.tables
    );
    let _ = writeln!(
        out,
        "batch sizes: {}",
        r.path
            .iter()
            .map(|(n, b)| if n == b {
                n.to_string()
            } else {
                format!("{n}({b})")
            })
            .collect::<Vec<_>>()
            .join(" ")
    );
    let _ = writeln!(
        out,
        "{:>6} {:>6} {:>7} {:>9} {:>13} {:>13} {:>7} {:>11}",
        "bucket",
        "steps",
        "tokens",
        "launches",
        "eager tok/s",
        "replay tok/s",
        "ratio",
        "capture ms"
    );
    for b in &r.buckets {
        let _ = writeln!(
            out,
            "{:>6} {:>6} {:>7} {:>9} {:>13.0} {:>13.0} {:>6.2}x {:>11.1}",
            b.bucket,
            b.steps,
            b.tokens,
            b.launches,
            b.eager_tokens_per_second(),
            b.replay_tokens_per_second(),
            b.replay_tokens_per_second() / b.eager_tokens_per_second().max(f64::MIN_POSITIVE),
            b.capture_ms
        );
    }
    let alone = r.largest_alone();
    let _ = writeln!(out, "ladder memory (graph-only bytes, each byte once):");
    let _ = writeln!(
        out,
        "  shared pool:    {} B captured ascending, {} B descending; the largest bucket alone {} B ({:.3}x, {:.3}x)",
        r.shared_bytes,
        r.descending_bytes,
        alone,
        LadderReport::ratio(r.shared_bytes, alone),
        LadderReport::ratio(r.descending_bytes, alone)
    );
    let _ = writeln!(
        out,
        "  separate pools: {} B ({}), growing with the buckets",
        r.separate_total(),
        r.buckets
            .iter()
            .map(|b| format!("b={} {} B", b.bucket, b.separate_bytes))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(
        out,
        "  separate / shared = {:.2}",
        LadderReport::ratio(r.separate_total(), r.shared_bytes)
    );
    let _ = writeln!(out, "memory report:\n{}", r.report);
    let _ = writeln!(out, "checks");
    for check in r.checks() {
        let _ = writeln!(
            out,
            "  {:<4} {}: {}",
            if check.passed { "ok" } else { "FAIL" },
            check.name,
            check.detail
        );
    }
    out
}
