//! The decode kernels for the mock: Rust functions over the launch's bytes and its
//! scalars (one word each, in parameter order: the mock's form), summing in the host
//! reference's order, registered as [`MockKernel`]s. The CUDA driver model runs these
//! same functions for the CUDA kernels' entry points, through the program's kernel
//! library (`examples/cuda_model_kernels.rs`).

use capture_graphs::ServerError;
use capture_graphs::mock::{MockBackend, MockKernel};

use super::backend::DecodeBackend;
use super::model::{Kernel, paged_row};

fn f(b: &[u8], i: usize) -> f32 {
    f32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().expect("4 bytes"))
}

fn set_f(b: &mut [u8], i: usize, v: f32) {
    b[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
}

fn u(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().expect("4 bytes"))
}

fn set_u(b: &mut [u8], i: usize, v: u32) {
    b[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
}

fn word(scalars: &[u64], i: usize) -> usize {
    scalars[i] as usize
}

fn float(scalars: &[u64], i: usize) -> f32 {
    f32::from_bits(scalars[i] as u32)
}

fn embed(b: &mut [Vec<u8>], info: &[u64]) {
    let d = word(info, 0);
    let token = u(&b[0], 1) as usize;
    for i in 0..d {
        let v = f(&b[1], token * d + i);
        set_f(&mut b[2], i, v);
    }
}

fn rmsnorm(b: &mut [Vec<u8>], info: &[u64]) {
    let (n, eps) = (word(info, 0), float(info, 1));
    for i in 0..n {
        let mut ss = 0.0f32;
        for j in 0..n {
            let x = f(&b[0], j);
            ss += x * x;
        }
        let r = 1.0 / (ss / n as f32 + eps).sqrt();
        let v = f(&b[0], i) * r * f(&b[1], i);
        set_f(&mut b[2], i, v);
    }
}

fn dot_row(w: &[u8], x: &[u8], row: usize, cols: usize) -> f32 {
    let mut acc = 0.0f32;
    for c in 0..cols {
        acc += f(w, row * cols + c) * f(x, c);
    }
    acc
}

fn matvec(b: &mut [Vec<u8>], info: &[u64]) {
    let (rows, cols) = (word(info, 0), word(info, 1));
    for r in 0..rows {
        let v = dot_row(&b[0], &b[1], r, cols);
        set_f(&mut b[2], r, v);
    }
}

fn matvec_residual(b: &mut [Vec<u8>], info: &[u64]) {
    let (rows, cols) = (word(info, 0), word(info, 1));
    for r in 0..rows {
        let v = f(&b[2], r) + dot_row(&b[0], &b[1], r, cols);
        set_f(&mut b[2], r, v);
    }
}

fn rope(b: &mut [Vec<u8>], info: &[u64]) {
    let (d, heads, theta) = (word(info, 0), word(info, 1), float(info, 2));
    let hd = (d / heads) as u32;
    let pos = u(&b[0], 0);
    for p in 0..d / 2 {
        let i = 2 * p;
        let j = (i as u32 % hd) as f32;
        let angle = pos as f32 * theta.powf(-(j / hd as f32));
        let (s, c) = angle.sin_cos();
        for v in &mut b[1..=2] {
            let (x0, x1) = (f(v, i), f(v, i + 1));
            set_f(v, i, x0 * c - x1 * s);
            set_f(v, i + 1, x0 * s + x1 * c);
        }
    }
}

/// The block table's entries.
fn table(b: &[u8]) -> Vec<u32> {
    (0..b.len() / 4).map(|i| u(b, i)).collect()
}

fn kv_store(b: &mut [Vec<u8>], info: &[u64]) {
    let (d, ctx, br) = (word(info, 0), word(info, 1), word(info, 2));
    let pos = u(&b[0], 0) as usize;
    if pos >= ctx {
        return;
    }
    let row = paged_row(&table(&b[1]), pos, br);
    for i in 0..d {
        let (k, v) = (f(&b[2], i), f(&b[3], i));
        set_f(&mut b[4], row * d + i, k);
        set_f(&mut b[5], row * d + i, v);
    }
}

fn attn_scores(b: &mut [Vec<u8>], info: &[u64]) {
    let (d, heads, ctx, scale, br) = (
        word(info, 0),
        word(info, 1),
        word(info, 2),
        float(info, 3),
        word(info, 4),
    );
    let hd = d / heads;
    let pos = u(&b[0], 0) as usize;
    let table = table(&b[1]);
    // Rows outermost, one invocation per (row, head) pair, as the GPU kernels run: a
    // grid that does not cover a pair leaves its score as it was (the slotted step's
    // grid must cover the rows its position reads). Outside the mock's queue (the CUDA
    // driver model runs this function and checks the grid itself), every pair.
    let invocations = capture_graphs::mock::launch_grid().map_or(usize::MAX, |g| {
        g[0] as usize * <MockBackend as DecodeBackend>::BLOCK as usize
    });
    for h in 0..heads {
        for t in 0..ctx {
            if t * heads + h >= invocations {
                continue;
            }
            let mut s = 0.0f32;
            if t <= pos {
                let row = paged_row(&table, t, br);
                let mut acc = 0.0f32;
                for j in 0..hd {
                    acc += f(&b[2], h * hd + j) * f(&b[3], row * d + h * hd + j);
                }
                s = acc * scale;
            }
            set_f(&mut b[4], h * ctx + t, s);
        }
    }
}

fn attn_softmax(b: &mut [Vec<u8>], info: &[u64]) {
    let (heads, ctx) = (word(info, 0), word(info, 1));
    let rows = (u(&b[0], 0) as usize + 1).min(ctx);
    for h in 0..heads {
        let s = &mut b[1];
        let mut m = f(s, h * ctx);
        for t in 0..rows {
            m = m.max(f(s, h * ctx + t));
        }
        let mut sum = 0.0f32;
        for t in 0..rows {
            let e = (f(s, h * ctx + t) - m).exp();
            set_f(s, h * ctx + t, e);
            sum += e;
        }
        for t in 0..rows {
            let p = f(s, h * ctx + t) / sum;
            set_f(s, h * ctx + t, p);
        }
    }
}

fn attn_mix(b: &mut [Vec<u8>], info: &[u64]) {
    let (d, heads, ctx, br) = (word(info, 0), word(info, 1), word(info, 2), word(info, 3));
    let hd = d / heads;
    let rows = (u(&b[0], 0) as usize + 1).min(ctx);
    let table = table(&b[1]);
    for i in 0..d {
        let h = i / hd;
        let mut acc = 0.0f32;
        for t in 0..rows {
            let row = paged_row(&table, t, br);
            acc += f(&b[2], h * ctx + t) * f(&b[3], row * d + i);
        }
        set_f(&mut b[4], i, acc);
    }
}

fn swiglu(b: &mut [Vec<u8>], info: &[u64]) {
    for i in 0..word(info, 0) {
        let (g, up) = (f(&b[0], i), f(&b[1], i));
        set_f(&mut b[2], i, g / (1.0 + (-g).exp()) * up);
    }
}

fn record_logits(b: &mut [Vec<u8>], info: &[u64]) {
    let (v, ctx) = (word(info, 0), word(info, 1));
    let pos = u(&b[0], 0) as usize;
    if pos >= ctx {
        return;
    }
    for i in 0..v {
        let x = f(&b[1], i);
        set_f(&mut b[2], pos * v + i, x);
    }
}

fn argmax(b: &mut [Vec<u8>], info: &[u64]) {
    let (v, ctx) = (word(info, 0), word(info, 1));
    let pos = u(&b[0], 0);
    let mut best = 0;
    for i in 1..v {
        if f(&b[1], i) > f(&b[1], best) {
            best = i;
        }
    }
    if (pos as usize) < ctx {
        set_u(&mut b[2], pos as usize, best as u32);
    }
    set_u(&mut b[0], 1, best as u32);
    set_u(&mut b[0], 0, pos + 1);
}

fn set_position(b: &mut [Vec<u8>], info: &[u64]) {
    set_u(&mut b[0], 0, info[0] as u32);
}

fn stop_at(b: &mut [Vec<u8>], info: &[u64]) {
    let (eos, context) = (info[0] as u32, info[1] as u32);
    let (pos, token) = (u(&b[0], 0), u(&b[0], 1));
    if token == eos || pos >= context {
        set_u(&mut b[1], 0, 1);
    }
}

impl DecodeBackend for MockBackend {
    const NAME: &'static str = "mock";
    const HOST_ONLY: bool = true;
    // The mock runs a kernel as one host function; it checks the block and shared
    // memory against its own limits as CUDA does.
    const BLOCK: u32 = 256;
    const DYNAMIC_SHARED: bool = true;

    fn decode_kernel(kernel: Kernel) -> Result<MockKernel, ServerError> {
        let f = match kernel {
            Kernel::Embed => embed,
            Kernel::RmsNorm => rmsnorm,
            Kernel::Matvec => matvec,
            Kernel::MatvecResidual => matvec_residual,
            Kernel::Rope => rope,
            Kernel::KvStore => kv_store,
            Kernel::AttnScores => attn_scores,
            Kernel::AttnSoftmax => attn_softmax,
            Kernel::AttnMix => attn_mix,
            Kernel::SwiGlu => swiglu,
            Kernel::RecordLogits => record_logits,
            Kernel::Argmax => argmax,
            Kernel::SetPosition => set_position,
            Kernel::StopAt => stop_at,
        };
        Ok(MockKernel {
            name: kernel.name(),
            signature: kernel.signature(),
            f,
        })
    }
}
