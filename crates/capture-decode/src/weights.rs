//! Seeded random weights: a SplitMix64 stream turned into uniform floats, scaled so
//! activations stay of order one through every layer. No download, the same bytes for
//! the same seed and sizes on every machine.

use super::model::Config;

/// SplitMix64: a tiny, well-mixed generator, enough for weights.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A float uniform in `[-1, 1)`, exactly representable (24 random bits).
    pub fn uniform(&mut self) -> f32 {
        let bits = (self.next_u64() >> 40) as u32;
        (bits as f32 / (1u32 << 23) as f32) - 1.0
    }

    /// `n` floats uniform in `[-scale, scale)`.
    pub fn fill(&mut self, n: u32, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform() * scale).collect()
    }
}

/// One layer's weights, row-major `[rows, cols]` matrices.
#[derive(Clone, Debug)]
pub struct LayerWeights {
    /// RMSNorm weight before attention, `[dim]`.
    pub attn_norm: Vec<f32>,
    /// Query projection, `[dim, dim]`.
    pub wq: Vec<f32>,
    /// Key projection, `[dim, dim]`.
    pub wk: Vec<f32>,
    /// Value projection, `[dim, dim]`.
    pub wv: Vec<f32>,
    /// Output projection, `[dim, dim]`.
    pub wo: Vec<f32>,
    /// RMSNorm weight before the feed-forward, `[dim]`.
    pub ffn_norm: Vec<f32>,
    /// Gate projection, `[hidden, dim]`.
    pub w1: Vec<f32>,
    /// Down projection, `[dim, hidden]`.
    pub w2: Vec<f32>,
    /// Up projection, `[hidden, dim]`.
    pub w3: Vec<f32>,
}

/// The whole model's weights.
#[derive(Clone, Debug)]
pub struct Weights {
    /// Token embeddings, `[vocab, dim]`.
    pub embedding: Vec<f32>,
    /// Every layer's.
    pub layers: Vec<LayerWeights>,
    /// Final RMSNorm weight, `[dim]`.
    pub final_norm: Vec<f32>,
    /// Output projection (the logits), `[vocab, dim]`.
    pub output: Vec<f32>,
}

impl Weights {
    /// The weights for `config` from `seed`: uniform matrices scaled by `1/sqrt(cols)`
    /// (residual projections by a further half), norm weights near one.
    pub fn random(config: &Config, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let (d, f, v) = (config.dim, config.hidden(), config.vocab);
        let sd = 1.0 / (d as f32).sqrt();
        let sf = 1.0 / (f as f32).sqrt();
        let norm = |rng: &mut Rng| rng.fill(d, 0.1).into_iter().map(|x| 1.0 + x).collect();
        let embedding = rng.fill(v * d, 1.0);
        let layers = (0..config.layers)
            .map(|_| LayerWeights {
                attn_norm: norm(&mut rng),
                wq: rng.fill(d * d, sd),
                wk: rng.fill(d * d, sd),
                wv: rng.fill(d * d, sd),
                wo: rng.fill(d * d, sd * 0.5),
                ffn_norm: norm(&mut rng),
                w1: rng.fill(f * d, sd),
                w2: rng.fill(d * f, sf * 0.5),
                w3: rng.fill(f * d, sd),
            })
            .collect();
        let final_norm = norm(&mut rng);
        let output = rng.fill(v * d, sd * 2.0);
        Self {
            embedding,
            layers,
            final_norm,
            output,
        }
    }

    /// A prompt of `len` token ids drawn from `seed` (a stream apart from the weights').
    pub fn prompt(config: &Config, seed: u64, len: u32) -> Vec<u32> {
        let mut rng = Rng::new(seed ^ 0x5EED_F00D_u64);
        (0..len)
            .map(|_| (rng.next_u64() % u64::from(config.vocab)) as u32)
            .collect()
    }
}
