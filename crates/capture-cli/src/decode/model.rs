//! The model's shape ([`Config`]) and its kernel set ([`Kernel`]): what each kernel
//! takes, how many threads it runs, and the info words it reads. The same twelve
//! kernels are written once per backend (`kernels_mock.rs`, `kernels_wgsl.rs`,
//! `kernels_cuda.rs`) and checked against the host reference (`host.rs`).

use capture_graphs::{KernelSignature, ServerError};

/// Threads per workgroup (Vulkan) or block (CUDA) of every decode kernel.
pub const WORKGROUP: u32 = 64;

/// Words of the state buffer: `[position, token, 0, 0]` as `u32`s. The host writes it
/// before a generation; the `argmax` kernel advances it on the device after that.
pub const STATE_WORDS: u64 = 4;

/// RMSNorm's epsilon.
pub const EPS: f32 = 1e-5;

/// Rotary embedding's base.
pub const THETA: f32 = 10_000.0;

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

/// The decode kernels. Buffers are named in argument order; every kernel's info words
/// are `u64`s, floats as their bits in the low half.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kernel {
    /// `(state, table, x)`, info `[dim]`: `x = table[token]`.
    Embed,
    /// `(x, w, out)`, info `[n, eps]`: `out = x / rms(x) * w`.
    RmsNorm,
    /// `(w, x, out)`, info `[rows, cols]`: `out = w · x`, one thread per row.
    Matvec,
    /// `(w, x, out)`, info `[rows, cols]`: `out += w · x` (the residual add).
    MatvecResidual,
    /// `(state, q, k)`, info `[dim, heads, theta]`: rotary embedding of `q` and `k` in
    /// place at the state's position.
    Rope,
    /// `(state, k, v, k_cache, v_cache)`, info `[dim, context]`: `k` and `v` into the
    /// caches' row at the state's position.
    KvStore,
    /// `(state, q, k_cache, scores)`, info `[dim, heads, context, scale]`: per head the
    /// scaled dot products with cache rows `0..=position`.
    AttnScores,
    /// `(state, scores)`, info `[heads, context]`: softmax over rows `0..=position`,
    /// in place, one thread per head.
    AttnSoftmax,
    /// `(state, scores, v_cache, out)`, info `[dim, heads, context]`: per head the
    /// probability-weighted sum of value rows `0..=position`.
    AttnMix,
    /// `(gate, up, out)`, info `[n]`: `out = silu(gate) * up`.
    SwiGlu,
    /// `(state, logits, history)`, info `[vocab, context]`: the logits into the history's
    /// row at the state's position.
    RecordLogits,
    /// `(state, logits, ids)`, info `[vocab, context]`: one thread picks the first
    /// largest logit, writes it to `ids[position]` and the state's token, and advances
    /// the state's position.
    Argmax,
}

impl Kernel {
    /// Every kernel, in registration order.
    pub const ALL: [Kernel; 12] = [
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
        }
    }

    /// Buffers and info words the kernel takes.
    pub const fn signature(self) -> KernelSignature {
        let (buffers, info) = match self {
            Kernel::Embed => (3, 1),
            Kernel::RmsNorm => (3, 2),
            Kernel::Matvec | Kernel::MatvecResidual => (3, 2),
            Kernel::Rope => (3, 3),
            Kernel::KvStore => (5, 2),
            Kernel::AttnScores => (4, 4),
            Kernel::AttnSoftmax => (2, 2),
            Kernel::AttnMix => (4, 3),
            Kernel::SwiGlu => (3, 1),
            Kernel::RecordLogits | Kernel::Argmax => (3, 2),
        };
        KernelSignature::new(buffers, info)
    }
}

/// Workgroups that cover `threads` threads.
pub fn groups(threads: u32) -> [u32; 3] {
    [threads.div_ceil(WORKGROUP).max(1), 1, 1]
}

/// A float's bits as an info word.
pub fn bits(v: f32) -> u64 {
    u64::from(v.to_bits())
}
