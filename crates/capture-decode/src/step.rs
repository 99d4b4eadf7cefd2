//! The decoder on a device: its buffers (weights, KV cache, state, histories and the
//! step's intermediates) and [`DeviceModel::step`], the fixed sequence of launches one
//! token costs. The step reads the position and the token from the state buffer and
//! advances it itself, so the same launches, recorded once, serve every position.

use std::collections::BTreeMap;

use capture_graphs::{Arg, Buffer, Device, Dims, GraphHandle, KernelHandle, Result, StreamId};

use super::backend::{DecodeBackend, GemmLibrary};
use super::model::{Config, EPS, Kernel, STATE_WORDS, THETA};
use super::weights::Weights;

fn r(b: &Buffer) -> Arg {
    Arg::read(b)
}

fn w(b: &Buffer) -> Arg {
    Arg::write(b)
}

fn rw(b: &Buffer) -> Arg {
    Arg::read_write(b)
}

fn s32(v: u32) -> Arg {
    Arg::scalar(v)
}

fn sf(v: f32) -> Arg {
    Arg::scalar(v)
}

/// The slotted step's position slot: a scalar of [`Kernel::SetPosition`] (rule 26).
pub const POSITION_SLOT: &str = "pos";

/// The slotted step's attention grid slot: every layer's [`Kernel::AttnScores`] launch,
/// its grid bounded by the context and set to the sequence's length per token.
pub const ATTENTION_SLOT: &str = "attn";

/// How the step's attention-score launches take their grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AttnGrid {
    /// Over the whole context: the kernel skips the rows past the state's position
    /// (the device loop, where only the device knows the position).
    Full,
    /// Over the sequence's `rows` rows so far; with `slot`, bounded by the context and
    /// named [`ATTENTION_SLOT`], so an update sets it per token.
    Rows { rows: u32, slot: bool },
}

impl AttnGrid {
    /// The launch of [`Kernel::AttnScores`] under `config` in blocks of `block` threads.
    fn dims(self, config: Config, block: u32) -> Dims {
        let threads = |rows: u32| (config.heads * rows).div_ceil(block).max(1);
        let full = [threads(config.context), 1, 1];
        match self {
            AttnGrid::Full => Dims::grid(full).block([block, 1, 1]),
            AttnGrid::Rows { rows, slot: false } => {
                Dims::grid([threads(rows.min(config.context)), 1, 1]).block([block, 1, 1])
            }
            AttnGrid::Rows { rows, slot: true } => {
                Dims::grid([threads(rows.min(config.context)), 1, 1])
                    .block([block, 1, 1])
                    .up_to(full)
                    .slot(ATTENTION_SLOT)
            }
        }
    }
}

/// The GEMM library the step's products run through, and the workspace it was handed:
/// a buffer of the decoder's, declared read-write by every call, so the graph owns it.
struct Gemm<B: DecodeBackend> {
    library: GemmLibrary<B>,
    workspace: Buffer,
}

impl<B: DecodeBackend> std::fmt::Debug for Gemm<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gemm")
            .field("library", &self.library.name)
            .field("workspace", &self.workspace)
            .finish()
    }
}

/// One layer's device buffers.
#[derive(Debug)]
struct Layer {
    attn_norm: Buffer,
    wq: Buffer,
    wk: Buffer,
    wv: Buffer,
    wo: Buffer,
    ffn_norm: Buffer,
    w1: Buffer,
    w2: Buffer,
    w3: Buffer,
    k_cache: Buffer,
    v_cache: Buffer,
}

/// The step's intermediates: written and read within one step, nothing carried over.
/// After capture the program drops these handles, and only the graph keeps them alive.
#[derive(Debug)]
pub(crate) struct Scratch {
    x: Buffer,
    xn: Buffer,
    q: Buffer,
    k: Buffer,
    v: Buffer,
    att: Buffer,
    scores: Buffer,
    gate: Buffer,
    up: Buffer,
    hidden: Buffer,
    logits: Buffer,
}

impl Scratch {
    /// The intermediates of one sequence's step under `config`, allocated on `stream`.
    ///
    /// # Errors
    ///
    /// An allocation failed.
    pub(crate) fn new<B: DecodeBackend>(
        dev: &Device<B>,
        stream: StreamId,
        config: Config,
    ) -> Result<Self> {
        let f32s = |n: u32| dev.alloc(stream, u64::from(n) * 4);
        let (d, f) = (config.dim, config.hidden());
        Ok(Self {
            x: f32s(d)?,
            xn: f32s(d)?,
            q: f32s(d)?,
            k: f32s(d)?,
            v: f32s(d)?,
            att: f32s(d)?,
            scores: f32s(config.heads * config.context)?,
            gate: f32s(f)?,
            up: f32s(f)?,
            hidden: f32s(f)?,
            logits: f32s(config.vocab)?,
        })
    }

    /// Bytes the intermediates take, as requested.
    pub(crate) fn bytes(&self) -> u64 {
        self.buffers().iter().map(|b| b.size()).sum()
    }

    fn buffers(&self) -> [&Buffer; 11] {
        [
            &self.x,
            &self.xn,
            &self.q,
            &self.k,
            &self.v,
            &self.att,
            &self.scores,
            &self.gate,
            &self.up,
            &self.hidden,
            &self.logits,
        ]
    }
}

/// Bytes by what they are, for the ledger's breakdown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Weights (the user's, read only).
    pub weights: u64,
    /// KV caches (the user's, updated in place by the step).
    pub cache: u64,
    /// State, logits history and ids history (the user's, written by the step, the
    /// state also by the host between generations).
    pub io: u64,
    /// The step's intermediates.
    pub scratch: u64,
    /// The GEMM library's workspace (kept by the program, declared by every call, so
    /// the graph holds it too); 0 when the products run the decoder's own kernel.
    pub workspace: u64,
}

/// The decoder on a device of backend `B`.
#[derive(Debug)]
pub struct DeviceModel<B: DecodeBackend> {
    config: Config,
    stream: StreamId,
    kernels: BTreeMap<Kernel, KernelHandle>,
    embedding: Buffer,
    layers: Vec<Layer>,
    final_norm: Buffer,
    output: Buffer,
    /// `[position, token, 0, 0]` as `u32`.
    pub state: Buffer,
    /// `[context, vocab]` f32: each step's logits at its position's row.
    pub logit_history: Buffer,
    /// `[context]` u32: each step's chosen id at its position.
    pub id_history: Buffer,
    /// The sequence's block table: one block of `context` rows, block 0 (a plain cache).
    table: Buffer,
    scratch: Option<Scratch>,
    /// The GEMM library the products run through, where the backend has one.
    gemm: Option<Gemm<B>>,
}

impl<B: DecodeBackend> DeviceModel<B> {
    /// Registers the kernels, allocates every buffer on `stream` and uploads `weights`;
    /// the caches and histories start zeroed.
    ///
    /// # Errors
    ///
    /// A kernel source refused, or an allocation or write failed.
    pub fn new(
        dev: &Device<B>,
        stream: StreamId,
        config: Config,
        weights: &Weights,
    ) -> Result<Self> {
        Self::with_library(dev, stream, config, weights, true)
    }

    /// As [`new`](Self::new), the products through the backend's GEMM library only
    /// where `library` allows it: a loop body (rule 30) on CUDA takes no foreign work,
    /// so `--until-eos` runs the decoder's own kernels.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub fn with_library(
        dev: &Device<B>,
        stream: StreamId,
        config: Config,
        weights: &Weights,
        library: bool,
    ) -> Result<Self> {
        let mut kernels = BTreeMap::new();
        for k in Kernel::ALL {
            kernels.insert(k, dev.kernel(B::decode_kernel(k)?));
        }
        let upload = |v: &[f32]| -> Result<Buffer> {
            let b = dev.alloc(stream, v.len() as u64 * 4)?;
            dev.write_values(stream, &b, 0, v)?;
            Ok(b)
        };
        let f32s = |n: u32| dev.alloc(stream, u64::from(n) * 4);
        let cache_bytes = u64::from(config.context) * u64::from(config.dim) * 4;
        let layers = weights
            .layers
            .iter()
            .map(|w| {
                Ok(Layer {
                    attn_norm: upload(&w.attn_norm)?,
                    wq: upload(&w.wq)?,
                    wk: upload(&w.wk)?,
                    wv: upload(&w.wv)?,
                    wo: upload(&w.wo)?,
                    ffn_norm: upload(&w.ffn_norm)?,
                    w1: upload(&w.w1)?,
                    w2: upload(&w.w2)?,
                    w3: upload(&w.w3)?,
                    k_cache: dev.alloc(stream, cache_bytes)?,
                    v_cache: dev.alloc(stream, cache_bytes)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let scratch = Scratch::new(dev, stream, config)?;
        let model = Self {
            config,
            stream,
            kernels,
            embedding: upload(&weights.embedding)?,
            layers,
            final_norm: upload(&weights.final_norm)?,
            output: upload(&weights.output)?,
            state: dev.alloc(stream, STATE_WORDS * 4)?,
            logit_history: f32s(config.context * config.vocab)?,
            id_history: dev.alloc(stream, u64::from(config.context) * 4)?,
            table: {
                let table = dev.alloc(stream, 4)?;
                dev.write_values(stream, &table, 0, &[0u32])?;
                table
            },
            scratch: Some(scratch),
            gemm: match if library { B::gemm_library(dev)? } else { None } {
                Some(library) => Some(Gemm {
                    workspace: {
                        let workspace = dev.alloc(stream, library.workspace_bytes)?;
                        dev.write(
                            stream,
                            &workspace,
                            0,
                            vec![0u8; library.workspace_bytes as usize],
                        )?;
                        workspace
                    },
                    library,
                }),
                None => None,
            },
        };
        model.reset(dev)?;
        Ok(model)
    }

    /// Zeroes the caches and the histories, and sets the state to position 0: a fresh
    /// sequence.
    /// (The step reads only rows it wrote, but every byte a launch binds must have
    /// been written once.)
    ///
    /// # Errors
    ///
    /// A write failed.
    pub fn reset(&self, dev: &Device<B>) -> Result<()> {
        let zero = |b: &Buffer| dev.write(self.stream, b, 0, vec![0u8; b.size() as usize]);
        for l in &self.layers {
            zero(&l.k_cache)?;
            zero(&l.v_cache)?;
        }
        zero(&self.logit_history)?;
        zero(&self.id_history)?;
        self.set_state(dev, 0, 0)
    }

    /// Writes `[position, token]` into the state buffer.
    ///
    /// # Errors
    ///
    /// The write failed.
    pub fn set_state(&self, dev: &Device<B>, pos: u32, token: u32) -> Result<()> {
        dev.write_values(self.stream, &self.state, 0, &[pos, token, 0, 0])
    }

    /// Which path the step's matrix-vector products take: the library's GEMM (named)
    /// through foreign work, or the decoder's own kernel.
    pub fn gemm_path(&self) -> String {
        match &self.gemm {
            Some(g) => format!(
                "{} through foreign work ({} B workspace owned by the graph)",
                g.library.name,
                g.workspace.size()
            ),
            None => format!(
                "own kernel (matvec, one block of {} threads per row)",
                B::BLOCK
            ),
        }
    }

    /// Drops the handles of the step's intermediates: after capture only the graph
    /// holds them. Returns their bytes.
    pub fn drop_scratch(&mut self) -> u64 {
        self.scratch.take().map_or(0, |s| s.bytes())
    }

    /// What the device buffers take, by kind (bytes as requested).
    pub fn footprint(&self) -> Footprint {
        let size = |b: &Buffer| b.size();
        let weights = size(&self.embedding)
            + size(&self.final_norm)
            + size(&self.output)
            + self
                .layers
                .iter()
                .map(|l| {
                    [
                        &l.attn_norm,
                        &l.wq,
                        &l.wk,
                        &l.wv,
                        &l.wo,
                        &l.ffn_norm,
                        &l.w1,
                        &l.w2,
                        &l.w3,
                    ]
                    .iter()
                    .map(|b| b.size())
                    .sum::<u64>()
                })
                .sum::<u64>();
        Footprint {
            weights,
            cache: self
                .layers
                .iter()
                .map(|l| size(&l.k_cache) + size(&l.v_cache))
                .sum(),
            io: size(&self.state)
                + size(&self.logit_history)
                + size(&self.id_history)
                + size(&self.table),
            scratch: self.scratch.as_ref().map_or(0, Scratch::bytes),
            workspace: self.gemm.as_ref().map_or(0, |g| g.workspace.size()),
        }
    }

    /// Every buffer the model holds, each with the kind it counts under.
    pub fn buffers(&self) -> Vec<(&'static str, &Buffer)> {
        let mut all = vec![
            ("weights", &self.embedding),
            ("weights", &self.final_norm),
            ("weights", &self.output),
            ("io", &self.state),
            ("io", &self.logit_history),
            ("io", &self.id_history),
            ("io", &self.table),
        ];
        for l in &self.layers {
            for b in [
                &l.attn_norm,
                &l.wq,
                &l.wk,
                &l.wv,
                &l.wo,
                &l.ffn_norm,
                &l.w1,
                &l.w2,
                &l.w3,
            ] {
                all.push(("weights", b));
            }
            all.push(("cache", &l.k_cache));
            all.push(("cache", &l.v_cache));
        }
        if let Some(g) = &self.gemm {
            all.push(("workspace", &g.workspace));
        }
        if let Some(s) = &self.scratch {
            all.extend(s.buffers().into_iter().map(|b| ("scratch", b)));
        }
        all
    }

    /// One decode step: [`Config::kernels_per_step`] launches, reading the position and
    /// token from the state and advancing it.
    ///
    /// # Errors
    ///
    /// A launch failed, or the intermediates were dropped (the step can only be
    /// replayed then).
    pub fn step(&self, dev: &Device<B>) -> Result<()> {
        let s = self.scratch()?;
        let sequence = self.own_sequence();
        self.sequence_step(dev, &sequence, s, &s.logits, AttnGrid::Full)?;
        self.finish(dev, s)
    }

    /// The slotted step at `pos`: [`Kernel::SetPosition`] writes the position into the
    /// state first, then the step as [`step`](Self::step) runs it, the attention grid
    /// over the `pos + 1` rows so far. With `slots`, inside a capture the position is
    /// the graph's [`POSITION_SLOT`] and the attention grid its [`ATTENTION_SLOT`]
    /// (bounded by the context), so one graph serves every position through
    /// [`DeviceModel::update`]; without, the graph is this position's alone (what a
    /// capture per token records).
    ///
    /// # Errors
    ///
    /// As [`step`](Self::step).
    pub fn slotted_step(&self, dev: &Device<B>, pos: u32, slots: bool) -> Result<()> {
        let s = self.scratch()?;
        let position = if slots {
            Arg::scalar(pos).slot(POSITION_SLOT)
        } else {
            Arg::scalar(pos)
        };
        let dims = Kernel::SetPosition.dims(1, B::BLOCK, B::DYNAMIC_SHARED);
        dev.launch(
            self.stream,
            &self.kernels[&Kernel::SetPosition],
            dims,
            &[rw(&self.state), position],
            &[],
        )?;
        let sequence = self.own_sequence();
        let attn = AttnGrid::Rows {
            rows: pos + 1,
            slot: slots,
        };
        self.sequence_step(dev, &sequence, s, &s.logits, attn)?;
        self.finish(dev, s)
    }

    /// One decode step ended by [`Kernel::StopAt`]: `done` (one `u32`) is set once the
    /// token just chosen is `eos` or the context is full. Inside a window `done` is the
    /// graph's stop flag (rule 30), so `Device::replay_until` decodes until the device
    /// says stop.
    ///
    /// # Errors
    ///
    /// As [`step`](Self::step).
    pub fn step_until(&self, dev: &Device<B>, done: &Buffer, eos: u32) -> Result<()> {
        self.step(dev)?;
        let dims = Kernel::StopAt.dims(1, B::BLOCK, B::DYNAMIC_SHARED);
        dev.launch(
            self.stream,
            &self.kernels[&Kernel::StopAt],
            dims,
            &[
                r(&self.state),
                w(done).stop_flag(),
                s32(eos),
                s32(self.config.context),
            ],
            &[],
        )
    }

    /// Points a graph of the slotted step (captured with slots) at position `pos`: its
    /// position and its attention grid, for the replays enqueued after it.
    ///
    /// # Errors
    ///
    /// The graph's refusal ([`capture_graphs::ServerError::SlotRefused`] for a graph
    /// without these slots, or a grid past the context).
    pub fn update(&self, graph: &GraphHandle, pos: u32) -> Result<()> {
        graph.set(POSITION_SLOT, pos)?;
        let rows = (pos + 1).min(self.config.context);
        let grid = AttnGrid::Rows { rows, slot: false }.dims(self.config, B::BLOCK);
        graph.set_grid(ATTENTION_SLOT, grid.grid_shape())
    }

    /// The intermediates, while the program still holds them.
    fn scratch(&self) -> Result<&Scratch> {
        self.scratch.as_ref().ok_or_else(|| {
            capture_graphs::ServerError::invalid(
                "step",
                "decode",
                "the intermediates were handed to the graph; replay it instead",
            )
        })
    }

    /// The model's own sequence: its state, a plain cache (one block of the context).
    fn own_sequence(&self) -> Sequence<'_> {
        Sequence {
            state: &self.state,
            table: &self.table,
            block_rows: self.config.context,
            k_caches: self.layers.iter().map(|l| &l.k_cache).collect(),
            v_caches: self.layers.iter().map(|l| &l.v_cache).collect(),
        }
    }

    /// The step's last two launches: the logits into the history, and the argmax.
    fn finish(&self, dev: &Device<B>, s: &Scratch) -> Result<()> {
        let c = self.config;
        let (v, ctx) = (c.vocab, c.context);
        let k = |kernel: Kernel| &self.kernels[&kernel];
        let launch = |kernel: Kernel, n: u32, args: &[Arg]| {
            let dims = kernel.dims(n, B::BLOCK, B::DYNAMIC_SHARED);
            dev.launch(self.stream, k(kernel), dims, args, &[])
        };
        launch(
            Kernel::RecordLogits,
            v,
            &[
                r(&self.state),
                r(&s.logits),
                rw(&self.logit_history),
                s32(v),
                s32(ctx),
            ],
        )?;
        launch(
            Kernel::Argmax,
            1,
            &[
                rw(&self.state),
                r(&s.logits),
                rw(&self.id_history),
                s32(v),
                s32(ctx),
            ],
        )
    }

    /// One sequence's step up to its logits: the embedding of the state's token, every
    /// layer at the state's position (its K and V into the paged caches through the
    /// sequence's block table), the final norm and the logits into `logits`. Reads the
    /// state, never advances it.
    ///
    /// # Errors
    ///
    /// A launch failed.
    pub(crate) fn sequence_step(
        &self,
        dev: &Device<B>,
        seq: &Sequence<'_>,
        s: &Scratch,
        logits: &Buffer,
        attn: AttnGrid,
    ) -> Result<()> {
        let c = self.config;
        let (d, f, h, ctx, v) = (c.dim, c.hidden(), c.heads, c.context, c.vocab);
        let br = seq.block_rows;
        let k = |kernel: Kernel| &self.kernels[&kernel];
        let st = self.stream;
        // `n`: the outputs (elements, or blocks for a reduction: rows, heads, 1).
        let launch = |kernel: Kernel, n: u32, args: &[Arg]| {
            let dims = kernel.dims(n, B::BLOCK, B::DYNAMIC_SHARED);
            dev.launch(st, k(kernel), dims, args, &[])
        };
        // `out = w · x` (or `out += w · x`): the library's GEMM where the backend has
        // one, the decoder's own kernel otherwise.
        let matvec =
            |wt: &Buffer, x: &Buffer, out: &Buffer, rows: u32, cols: u32, residual: bool| {
                let out_arg = if residual { rw(out) } else { w(out) };
                match &self.gemm {
                    Some(gemm) => dev.foreign_work(
                        st,
                        &[r(wt), r(x), out_arg, rw(&gemm.workspace)],
                        (gemm.library.work)(rows, cols, residual),
                    ),
                    None => {
                        let kernel = if residual {
                            Kernel::MatvecResidual
                        } else {
                            Kernel::Matvec
                        };
                        let dims = kernel.dims(rows, B::BLOCK, B::DYNAMIC_SHARED);
                        let args = [r(wt), r(x), out_arg, s32(rows), s32(cols)];
                        dev.launch(st, k(kernel), dims, &args, &[])
                    }
                }
            };
        let state = seq.state;
        launch(
            Kernel::Embed,
            d,
            &[r(state), r(&self.embedding), w(&s.x), s32(d)],
        )?;
        for (i, l) in self.layers.iter().enumerate() {
            let (k_cache, v_cache) = (seq.k_caches[i], seq.v_caches[i]);
            launch(
                Kernel::RmsNorm,
                1,
                &[r(&s.x), r(&l.attn_norm), w(&s.xn), s32(d), sf(EPS)],
            )?;
            for (wt, out) in [(&l.wq, &s.q), (&l.wk, &s.k), (&l.wv, &s.v)] {
                matvec(wt, &s.xn, out, d, d, false)?;
            }
            launch(
                Kernel::Rope,
                d / 2,
                &[r(state), rw(&s.q), rw(&s.k), s32(d), s32(h), sf(THETA)],
            )?;
            launch(
                Kernel::KvStore,
                d,
                &[
                    r(state),
                    r(seq.table),
                    r(&s.k),
                    r(&s.v),
                    rw(k_cache),
                    rw(v_cache),
                    s32(d),
                    s32(ctx),
                    s32(br),
                ],
            )?;
            dev.launch(
                st,
                k(Kernel::AttnScores),
                attn.dims(c, B::BLOCK),
                &[
                    r(state),
                    r(seq.table),
                    r(&s.q),
                    r(k_cache),
                    w(&s.scores),
                    s32(d),
                    s32(h),
                    s32(ctx),
                    sf(c.scale()),
                    s32(br),
                ],
                &[],
            )?;
            launch(
                Kernel::AttnSoftmax,
                h,
                &[r(state), rw(&s.scores), s32(h), s32(ctx)],
            )?;
            launch(
                Kernel::AttnMix,
                d,
                &[
                    r(state),
                    r(seq.table),
                    r(&s.scores),
                    r(v_cache),
                    w(&s.att),
                    s32(d),
                    s32(h),
                    s32(ctx),
                    s32(br),
                ],
            )?;
            matvec(&l.wo, &s.att, &s.x, d, d, true)?;
            launch(
                Kernel::RmsNorm,
                1,
                &[r(&s.x), r(&l.ffn_norm), w(&s.xn), s32(d), sf(EPS)],
            )?;
            matvec(&l.w1, &s.xn, &s.gate, f, d, false)?;
            matvec(&l.w3, &s.xn, &s.up, f, d, false)?;
            launch(
                Kernel::SwiGlu,
                f,
                &[r(&s.gate), r(&s.up), w(&s.hidden), s32(f)],
            )?;
            matvec(&l.w2, &s.hidden, &s.x, d, f, true)?;
        }
        launch(
            Kernel::RmsNorm,
            1,
            &[r(&s.x), r(&self.final_norm), w(&s.xn), s32(d), sf(EPS)],
        )?;
        matvec(&self.output, &s.xn, logits, v, d, false)
    }

    /// The model's sizes.
    pub fn config(&self) -> Config {
        self.config
    }

    /// The stream it runs on.
    pub fn stream(&self) -> StreamId {
        self.stream
    }
}

/// One sequence's buffers as a step reads them: its state (`[position, token, ..]`), its
/// block table and the paged caches of every layer, `block_rows` rows per block.
pub(crate) struct Sequence<'a> {
    pub(crate) state: &'a Buffer,
    pub(crate) table: &'a Buffer,
    pub(crate) block_rows: u32,
    pub(crate) k_caches: Vec<&'a Buffer>,
    pub(crate) v_caches: Vec<&'a Buffer>,
}
