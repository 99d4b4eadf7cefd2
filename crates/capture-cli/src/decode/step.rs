//! The decoder on a device: its buffers (weights, KV cache, state, histories and the
//! step's intermediates) and [`DeviceModel::step`], the fixed sequence of launches one
//! token costs. The step reads the position and the token from the state buffer and
//! advances it itself, so the same launches, recorded once, serve every position.

use std::collections::BTreeMap;

use capture_graphs::{Arg, Buffer, Device, KernelHandle, Result, StreamId};

use super::backend::DecodeBackend;
use super::model::{Config, EPS, Kernel, STATE_WORDS, THETA, bits, groups};
use super::weights::Weights;

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
}

/// The decoder on a device.
#[derive(Debug)]
pub struct DeviceModel {
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
    scratch: Option<Scratch>,
}

impl DeviceModel {
    /// Registers the kernels, allocates every buffer on `stream` and uploads `weights`;
    /// the caches and histories start zeroed.
    ///
    /// # Errors
    ///
    /// A kernel source refused, or an allocation or write failed.
    pub fn new<B: DecodeBackend>(
        dev: &Device<B>,
        stream: StreamId,
        config: Config,
        weights: &Weights,
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
        let (d, f) = (config.dim, config.hidden());
        let scratch = Scratch {
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
        };
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
            scratch: Some(scratch),
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
    pub fn reset<B: DecodeBackend>(&self, dev: &Device<B>) -> Result<()> {
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
    pub fn set_state<B: DecodeBackend>(&self, dev: &Device<B>, pos: u32, token: u32) -> Result<()> {
        dev.write_values(self.stream, &self.state, 0, &[pos, token, 0, 0])
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
            io: size(&self.state) + size(&self.logit_history) + size(&self.id_history),
            scratch: self.scratch.as_ref().map_or(0, Scratch::bytes),
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
    pub fn step<B: DecodeBackend>(&self, dev: &Device<B>) -> Result<()> {
        let Some(s) = &self.scratch else {
            return Err(capture_graphs::ServerError::invalid(
                "step",
                "decode",
                "the intermediates were handed to the graph; replay it instead",
            ));
        };
        let c = self.config;
        let (d, f, h, ctx, v) = (c.dim, c.hidden(), c.heads, c.context, c.vocab);
        let (d64, f64_, h64, ctx64, v64) = (
            u64::from(d),
            u64::from(f),
            u64::from(h),
            u64::from(ctx),
            u64::from(v),
        );
        let k = |kernel: Kernel| &self.kernels[&kernel];
        let st = self.stream;
        let launch = |kernel: Kernel, threads: u32, args: &[Arg], info: &[u64]| {
            dev.launch(st, k(kernel), groups(threads), args, info)
        };
        let (r, w, rw) = (Arg::read, Arg::write, Arg::read_write);
        launch(
            Kernel::Embed,
            d,
            &[r(&self.state), r(&self.embedding), w(&s.x)],
            &[d64],
        )?;
        for l in &self.layers {
            launch(
                Kernel::RmsNorm,
                d,
                &[r(&s.x), r(&l.attn_norm), w(&s.xn)],
                &[d64, bits(EPS)],
            )?;
            for (wt, out) in [(&l.wq, &s.q), (&l.wk, &s.k), (&l.wv, &s.v)] {
                launch(Kernel::Matvec, d, &[r(wt), r(&s.xn), w(out)], &[d64, d64])?;
            }
            launch(
                Kernel::Rope,
                d / 2,
                &[r(&self.state), rw(&s.q), rw(&s.k)],
                &[d64, h64, bits(THETA)],
            )?;
            launch(
                Kernel::KvStore,
                d,
                &[
                    r(&self.state),
                    r(&s.k),
                    r(&s.v),
                    rw(&l.k_cache),
                    rw(&l.v_cache),
                ],
                &[d64, ctx64],
            )?;
            launch(
                Kernel::AttnScores,
                h * ctx,
                &[r(&self.state), r(&s.q), r(&l.k_cache), w(&s.scores)],
                &[d64, h64, ctx64, bits(c.scale())],
            )?;
            launch(
                Kernel::AttnSoftmax,
                h,
                &[r(&self.state), rw(&s.scores)],
                &[h64, ctx64],
            )?;
            launch(
                Kernel::AttnMix,
                d,
                &[r(&self.state), r(&s.scores), r(&l.v_cache), w(&s.att)],
                &[d64, h64, ctx64],
            )?;
            launch(
                Kernel::MatvecResidual,
                d,
                &[r(&l.wo), r(&s.att), rw(&s.x)],
                &[d64, d64],
            )?;
            launch(
                Kernel::RmsNorm,
                d,
                &[r(&s.x), r(&l.ffn_norm), w(&s.xn)],
                &[d64, bits(EPS)],
            )?;
            launch(
                Kernel::Matvec,
                f,
                &[r(&l.w1), r(&s.xn), w(&s.gate)],
                &[f64_, d64],
            )?;
            launch(
                Kernel::Matvec,
                f,
                &[r(&l.w3), r(&s.xn), w(&s.up)],
                &[f64_, d64],
            )?;
            launch(
                Kernel::SwiGlu,
                f,
                &[r(&s.gate), r(&s.up), w(&s.hidden)],
                &[f64_],
            )?;
            launch(
                Kernel::MatvecResidual,
                d,
                &[r(&l.w2), r(&s.hidden), rw(&s.x)],
                &[d64, f64_],
            )?;
        }
        launch(
            Kernel::RmsNorm,
            d,
            &[r(&s.x), r(&self.final_norm), w(&s.xn)],
            &[d64, bits(EPS)],
        )?;
        launch(
            Kernel::Matvec,
            v,
            &[r(&self.output), r(&s.xn), w(&s.logits)],
            &[v64, d64],
        )?;
        launch(
            Kernel::RecordLogits,
            v,
            &[r(&self.state), r(&s.logits), rw(&self.logit_history)],
            &[v64, ctx64],
        )?;
        launch(
            Kernel::Argmax,
            1,
            &[rw(&self.state), r(&s.logits), rw(&self.id_history)],
            &[v64, ctx64],
        )
    }
}
