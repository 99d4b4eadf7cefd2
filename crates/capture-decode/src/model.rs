//! The model's shape ([`Config`]) and its kernel set ([`Kernel`]): what each kernel
//! takes (buffers with their access, scalars by value) and how it is launched. The same twelve
//! kernels are written once per backend (`kernels_mock.rs`, `kernels_wgsl.rs`,
//! `kernels_cuda.rs`) and checked against the host reference (`host.rs`).

use capture_graphs::{Dims, KernelSignature, Param, ServerError};

/// Words of the state buffer: `[position, token, 0, 0]` as `u32`s. The host writes it
/// before a generation; the `argmax` kernel advances it on the device after that.
pub const STATE_WORDS: u64 = 4;

/// RMSNorm's epsilon.
pub const EPS: f32 = 1e-5;

/// Rotary embedding's base.
pub const THETA: f32 = 10_000.0;

/// The cache row of position `t` in a paged cache: block `table[t / block_rows]`, row
/// `t % block_rows` of it.
pub fn paged_row(table: &[u32], t: usize, block_rows: usize) -> usize {
    table[t / block_rows] as usize * block_rows + t % block_rows
}

/// A llama-shaped decoder's sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Model width.
    pub dim: u32,
    /// Transformer layers.
    pub layers: u32,
    /// Attention heads; `dim / heads` is the head width (even, for rotary pairs).
    pub heads: u32,
    /// Vocabulary size.
    pub vocab: u32,
    /// Context length: rows of each layer's KV cache.
    pub context: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            dim: 256,
            layers: 4,
            heads: 4,
            vocab: 512,
            context: 256,
        }
    }
}

impl Config {
    /// Checks the sizes fit together.
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] naming the size that does not fit.
    pub fn check(&self) -> Result<(), ServerError> {
        let nonzero = [
            ("dim", self.dim),
            ("layers", self.layers),
            ("heads", self.heads),
            ("vocab", self.vocab),
            ("context", self.context),
        ];
        for (what, v) in nonzero {
            if v == 0 {
                return Err(ServerError::invalid(
                    what,
                    v.to_string(),
                    "must be positive",
                ));
            }
        }
        if !self.dim.is_multiple_of(self.heads) || !(self.dim / self.heads).is_multiple_of(2) {
            return Err(ServerError::invalid(
                "dim",
                self.dim.to_string(),
                "must be a multiple of heads with an even head width",
            ));
        }
        Ok(())
    }

    /// The head width.
    pub fn head_dim(&self) -> u32 {
        self.dim / self.heads
    }

    /// The feed-forward width: llama's 8/3 of `dim`, rounded up to a multiple of 64.
    pub fn hidden(&self) -> u32 {
        (self.dim * 8).div_ceil(3).div_ceil(64) * 64
    }

    /// Launches in one decode step: an embedding gather, fifteen per layer, then the
    /// final norm, the logits, their record and the argmax.
    pub fn kernels_per_step(&self) -> u64 {
        1 + 15 * u64::from(self.layers) + 4
    }

    /// `1 / sqrt(head width)`, the attention scale, computed once on the host so every
    /// backend uses the same bits.
    pub fn scale(&self) -> f32 {
        1.0 / (self.head_dim() as f32).sqrt()
    }
}

/// The decode kernels, written as an engine writes them: buffers as plain pointers
/// (bindings on Vulkan) with the access the kernel makes, dimensions and constants as
/// scalars by value, in the order named. The reductions (norm, row dot products,
/// softmax, argmax) run one block per output with a tree over the block's threads in
/// shared memory; the rest run one thread per element.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kernel {
    /// `(state, table, x; dim)`: `x = table[token]`.
    Embed,
    /// `(x, w, out; n, eps)`: `out = x / rms(x) * w`, one block.
    RmsNorm,
    /// `(w, x, out; rows, cols)`: `out = w · x`, one block per row.
    Matvec,
    /// `(w, x, out; rows, cols)`: `out += w · x` (the residual add), one block per row.
    MatvecResidual,
    /// `(state, q, k; dim, heads, theta)`: rotary embedding of `q` and `k` in place at
    /// the state's position.
    Rope,
    /// `(state, table, k, v, k_cache, v_cache; dim, context, block_rows)`: `k` and `v`
    /// into the caches' row for the state's position. The caches are paged: position
    /// `t` lives in row `table[t / block_rows] * block_rows + t % block_rows` (a
    /// sequence's block table, as vLLM pages its cache); one block of `context` rows and
    /// `table = [0]` is a plain cache.
    KvStore,
    /// `(state, table, q, k_cache, scores; dim, heads, context, scale, block_rows)`: per
    /// head the scaled dot products with the cache rows of positions `0..=position`,
    /// one thread per (row, head), rows outermost (thread `t * heads + h`), so a grid of
    /// `heads * (position + 1)` threads covers the rows the step reads: the slotted step
    /// bounds this grid by the context and shrinks it per token.
    AttnScores,
    /// `(state, scores; heads, context)`: softmax over rows `0..=position`, in place, one
    /// block per head.
    AttnSoftmax,
    /// `(state, table, scores, v_cache, out; dim, heads, context, block_rows)`: per head
    /// the probability-weighted sum of the value rows of positions `0..=position`.
    AttnMix,
    /// `(gate, up, out; n)`: `out = silu(gate) * up`.
    SwiGlu,
    /// `(state, logits, history; vocab, context)`: the logits into the history's row at
    /// the state's position.
    RecordLogits,
    /// `(state, logits, ids; vocab, context)`: one block picks the first largest logit,
    /// writes it to `ids[position]` and the state's token, and advances the state's
    /// position.
    Argmax,
    /// `(state; position)`: the state's position set from a scalar, one thread. The
    /// slotted step starts with it, its position a graph slot (rule 26) the host sets
    /// per token instead of the device advancing it.
    SetPosition,
    /// `(state, done; eos, context)`: one thread sets `done` (the graph's stop flag,
    /// rule 30) once the state's token is the end token or its position reached the
    /// context's end; leaves it as it was otherwise. `capture decode --until-eos` ends
    /// each step with it.
    StopAt,
}

const R: Param = Param::READ;
const W: Param = Param::WRITE;
const RW: Param = Param::READ_WRITE;
const U: Param = Param::scalar::<u32>();
const F: Param = Param::scalar::<f32>();

impl Kernel {
    /// Every kernel, in registration order.
    pub const ALL: [Kernel; 14] = [
        Kernel::Embed,
        Kernel::RmsNorm,
        Kernel::Matvec,
        Kernel::MatvecResidual,
        Kernel::Rope,
        Kernel::KvStore,
        Kernel::AttnScores,
        Kernel::AttnSoftmax,
        Kernel::AttnMix,
        Kernel::SwiGlu,
        Kernel::RecordLogits,
        Kernel::Argmax,
        Kernel::SetPosition,
        Kernel::StopAt,
    ];

    /// The name kernels register under (also the CUDA entry point, `decode_` + name).
    pub const fn name(self) -> &'static str {
        match self {
            Kernel::Embed => "embed",
            Kernel::RmsNorm => "rmsnorm",
            Kernel::Matvec => "matvec",
            Kernel::MatvecResidual => "matvec_residual",
            Kernel::Rope => "rope",
            Kernel::KvStore => "kv_store",
            Kernel::AttnScores => "attn_scores",
            Kernel::AttnSoftmax => "attn_softmax",
            Kernel::AttnMix => "attn_mix",
            Kernel::SwiGlu => "swiglu",
            Kernel::RecordLogits => "record_logits",
            Kernel::Argmax => "argmax",
            Kernel::SetPosition => "set_position",
            Kernel::StopAt => "stop_at",
        }
    }

    /// The kernel's parameters: its buffers with their access, then its scalars (`u32`
    /// dimensions, `f32` constants).
    pub const fn signature(self) -> KernelSignature {
        let params: &[Param] = match self {
            Kernel::Embed => &[R, R, W, U],
            Kernel::RmsNorm => &[R, R, W, U, F],
            Kernel::Matvec => &[R, R, W, U, U],
            Kernel::MatvecResidual => &[R, R, RW, U, U],
            Kernel::Rope => &[R, RW, RW, U, U, F],
            Kernel::KvStore => &[R, R, R, R, RW, RW, U, U, U],
            Kernel::AttnScores => &[R, R, R, R, W, U, U, U, F, U],
            Kernel::AttnSoftmax => &[R, RW, U, U],
            Kernel::AttnMix => &[R, R, R, R, W, U, U, U, U],
            Kernel::SwiGlu => &[R, R, W, U],
            Kernel::RecordLogits => &[R, R, RW, U, U],
            Kernel::Argmax => &[RW, R, RW, U, U],
            Kernel::SetPosition => &[RW, U],
            Kernel::StopAt => &[R, W, U, U],
        };
        KernelSignature::of(params)
    }

    /// Bytes of shared memory per thread a reduction kernel's tree takes (a float, and
    /// for the argmax an index beside it); 0 for the one-thread-per-element kernels.
    pub const fn shared_per_thread(self) -> u32 {
        match self {
            Kernel::RmsNorm | Kernel::Matvec | Kernel::MatvecResidual | Kernel::AttnSoftmax => 4,
            Kernel::Argmax => 8,
            _ => 0,
        }
    }

    /// The launch of this kernel over `n` outputs (elements for the one-thread-per-
    /// element kernels, blocks for the reductions: rows, heads, or 1) in blocks of
    /// `block` threads, its tree's shared memory given per launch where the backend
    /// takes it (`dynamic_shared`; a Vulkan shader declares its own).
    pub fn dims(self, n: u32, block: u32, dynamic_shared: bool) -> Dims {
        let per_thread = self.shared_per_thread();
        let grid = if per_thread > 0 {
            n.max(1)
        } else {
            n.div_ceil(block).max(1)
        };
        let dims = Dims::grid([grid, 1, 1]).block([block, 1, 1]);
        if dynamic_shared && per_thread > 0 {
            dims.shared_bytes(per_thread * block)
        } else {
            dims
        }
    }
}
