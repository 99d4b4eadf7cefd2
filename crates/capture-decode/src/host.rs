//! The host reference: the same model in plain Rust over `Vec<f32>`, one function per
//! kernel, each with the kernels' summation order. It is the judge the backends are
//! compared with, within [`TOLERANCE`](super::TOLERANCE).

use super::model::{Config, EPS, THETA};
use super::weights::Weights;

/// The reference decoder: its weights and its own KV cache.
#[derive(Debug)]
pub struct HostModel<'w> {
    config: Config,
    weights: &'w Weights,
    k_cache: Vec<Vec<f32>>,
    v_cache: Vec<Vec<f32>>,
}

/// `x / rms(x) * w`.
pub fn rmsnorm(x: &[f32], w: &[f32]) -> Vec<f32> {
    let mut ss = 0.0f32;
    for v in x {
        ss += v * v;
    }
    let r = 1.0 / (ss / x.len() as f32 + EPS).sqrt();
    x.iter().zip(w).map(|(v, w)| v * r * w).collect()
}

/// `w · x`, `w` row-major `[rows, x.len()]`.
pub fn matvec(w: &[f32], x: &[f32]) -> Vec<f32> {
    w.chunks_exact(x.len())
        .map(|row| {
            let mut acc = 0.0f32;
            for (a, b) in row.iter().zip(x) {
                acc += a * b;
            }
            acc
        })
        .collect()
}

/// Rotary embedding in place at `pos`, pairs `(2i, 2i+1)` within each head.
pub fn rope(v: &mut [f32], pos: u32, head_dim: u32) {
    for p in 0..v.len() / 2 {
        let i = 2 * p;
        let j = (i as u32 % head_dim) as f32;
        let freq = THETA.powf(-(j / head_dim as f32));
        let angle = pos as f32 * freq;
        let (s, c) = angle.sin_cos();
        let (a, b) = (v[i], v[i + 1]);
        v[i] = a * c - b * s;
        v[i + 1] = a * s + b * c;
    }
}

/// `silu(gate) * up`.
pub fn swiglu(gate: &[f32], up: &[f32]) -> Vec<f32> {
    gate.iter()
        .zip(up)
        .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
        .collect()
}

/// The first largest value's index.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in logits.iter().enumerate() {
        if *v > logits[best] {
            best = i;
        }
    }
    best as u32
}

impl<'w> HostModel<'w> {
    /// A reference over `weights` with an empty cache.
    pub fn new(config: Config, weights: &'w Weights) -> Self {
        Self {
            config,
            weights,
            k_cache: vec![Vec::new(); config.layers as usize],
            v_cache: vec![Vec::new(); config.layers as usize],
        }
    }

    /// One decode step: `token` at `pos` (the next cache row), returning the logits.
    ///
    /// # Panics
    ///
    /// If `pos` is not the next row of the cache.
    pub fn step(&mut self, token: u32, pos: u32) -> Vec<f32> {
        let c = self.config;
        let (d, hd) = (c.dim as usize, c.head_dim() as usize);
        let w = self.weights;
        let t = token as usize;
        let mut x = w.embedding[t * d..(t + 1) * d].to_vec();
        for (l, lw) in w.layers.iter().enumerate() {
            assert_eq!(self.k_cache[l].len(), pos as usize * d, "steps in order");
            let xn = rmsnorm(&x, &lw.attn_norm);
            let mut q = matvec(&lw.wq, &xn);
            let mut k = matvec(&lw.wk, &xn);
            let v = matvec(&lw.wv, &xn);
            rope(&mut q, pos, c.head_dim());
            rope(&mut k, pos, c.head_dim());
            self.k_cache[l].extend_from_slice(&k);
            self.v_cache[l].extend_from_slice(&v);
            let rows = pos as usize + 1;
            let mut att = vec![0.0f32; d];
            for h in 0..c.heads as usize {
                let qh = &q[h * hd..(h + 1) * hd];
                let mut scores: Vec<f32> = (0..rows)
                    .map(|r| {
                        let kr = &self.k_cache[l][r * d + h * hd..r * d + (h + 1) * hd];
                        let mut acc = 0.0f32;
                        for (a, b) in qh.iter().zip(kr) {
                            acc += a * b;
                        }
                        acc * c.scale()
                    })
                    .collect();
                let mut m = scores[0];
                for s in &scores {
                    m = m.max(*s);
                }
                let mut sum = 0.0f32;
                for s in &mut scores {
                    *s = (*s - m).exp();
                    sum += *s;
                }
                for s in &mut scores {
                    *s /= sum;
                }
                for (i, out) in att.iter_mut().enumerate().skip(h * hd).take(hd) {
                    let mut acc = 0.0f32;
                    for (r, p) in scores.iter().enumerate() {
                        acc += p * self.v_cache[l][r * d + i];
                    }
                    *out = acc;
                }
            }
            for (xi, o) in x.iter_mut().zip(matvec(&lw.wo, &att)) {
                *xi += o;
            }
            let xn = rmsnorm(&x, &lw.ffn_norm);
            let g = swiglu(&matvec(&lw.w1, &xn), &matvec(&lw.w3, &xn));
            for (xi, o) in x.iter_mut().zip(matvec(&lw.w2, &g)) {
                *xi += o;
            }
        }
        matvec(&w.output, &rmsnorm(&x, &w.final_norm))
    }
}
