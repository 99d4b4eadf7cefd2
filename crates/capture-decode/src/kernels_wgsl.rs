//! The decode kernels for Vulkan: WGSL as an engine writes it, compiled to SPIR-V by
//! naga when the kernels are registered: storage buffers at bindings `0..n` of set 0
//! with the access each kernel makes, dimensions and constants as push constants
//! (WGSL's `var<immediate>`), workgroups of [`WORKGROUP`] threads; the reductions (norm,
//! row dot products, softmax, argmax) run one workgroup per output with a tree in
//! workgroup memory. The backend reflects each module's bindings, accesses, push
//! constants and workgroup size, and checks them against [`Kernel::signature`].

use capture_graphs::ServerError;
use capture_graphs::vulkan::{VulkanBackend, VulkanKernelSource, compile_wgsl};

use super::backend::DecodeBackend;
use super::model::Kernel;

/// Threads per workgroup of every decode kernel (fixed in each shader).
pub const WORKGROUP: u32 = 64;

/// The WGSL of `kernel`: one module with one entry point, `main`, 64 threads a group.
pub fn wgsl(kernel: Kernel) -> &'static str {
    match kernel {
        Kernel::Embed => EMBED,
        Kernel::RmsNorm => RMSNORM,
        Kernel::Matvec => MATVEC,
        Kernel::MatvecResidual => MATVEC_RESIDUAL,
        Kernel::Rope => ROPE,
        Kernel::KvStore => KV_STORE,
        Kernel::AttnScores => ATTN_SCORES,
        Kernel::AttnSoftmax => ATTN_SOFTMAX,
        Kernel::AttnMix => ATTN_MIX,
        Kernel::SwiGlu => SWIGLU,
        Kernel::RecordLogits => RECORD_LOGITS,
        Kernel::Argmax => ARGMAX,
        Kernel::SetPosition => SET_POSITION,
        Kernel::StopAt => STOP_AT,
    }
}

/// `kernel`'s WGSL compiled to SPIR-V words by naga (push constants allowed).
///
/// # Errors
///
/// [`ServerError::InvalidArgument`] naming the kernel when naga refuses the WGSL.
pub fn spirv(kernel: Kernel) -> Result<Vec<u32>, ServerError> {
    compile_wgsl(kernel.name(), wgsl(kernel))
}

impl DecodeBackend for VulkanBackend {
    const NAME: &'static str = "vulkan";
    const HOST_ONLY: bool = false;
    const BLOCK: u32 = WORKGROUP;
    const DYNAMIC_SHARED: bool = false;

    fn decode_kernel(kernel: Kernel) -> Result<VulkanKernelSource, ServerError> {
        VulkanKernelSource::wgsl(kernel.name(), wgsl(kernel), "main", kernel.signature())
    }
}

/// The tree that sums each invocation's `acc` into `partial[0]` over a workgroup of 64,
/// in workgroup memory (`partial`), shared by every reduction below.
macro_rules! tree_sum {
    () => {
        "
    partial[t] = acc;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s / 2u) {
        if t < s {
            partial[t] += partial[t + s];
        }
        workgroupBarrier();
    }
"
    };
}

/// A row's dot product per workgroup, its result stored by `$store` (`out[row]` from
/// `partial[0]`): the matvec and its residual form.
macro_rules! matvec {
    ($store:literal) => {
        concat!(
            "
struct Params { rows: u32, cols: u32 }
var<immediate> p: Params;
@group(0) @binding(0) var<storage, read> w: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
var<workgroup> partial: array<f32, 64>;
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let t = lid.x;
    let row = wid.x;
    var acc = 0.0;
    for (var c = t; c < p.cols; c += 64u) {
        acc += w[row * p.cols + c] * x[c];
    }",
            tree_sum!(),
            "    if t == 0u && row < p.rows {
        ",
            $store,
            "
    }
}
"
        )
    };
}

const EMBED: &str = "
struct Params { d: u32 }
var<immediate> p: Params;
@group(0) @binding(0) var<storage, read> state: array<u32>;
@group(0) @binding(1) var<storage, read> table: array<f32>;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if i < p.d {
        x[i] = table[state[1] * p.d + i];
    }
}
";

const RMSNORM: &str = concat!(
    "
struct Params { n: u32, eps: f32 }
var<immediate> p: Params;
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
var<workgroup> partial: array<f32, 64>;
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>) {
    let t = lid.x;
    var acc = 0.0;
    for (var j = t; j < p.n; j += 64u) {
        acc += x[j] * x[j];
    }",
    tree_sum!(),
    "    let r = 1.0 / sqrt(partial[0] / f32(p.n) + p.eps);
    for (var i = t; i < p.n; i += 64u) {
        out[i] = x[i] * r * w[i];
    }
}
"
);

const MATVEC: &str = matvec!("out[row] = partial[0];");

const MATVEC_RESIDUAL: &str = matvec!("out[row] = out[row] + partial[0];");

const ROPE: &str = "
struct Params { d: u32, heads: u32, theta: f32 }
var<immediate> p: Params;
@group(0) @binding(0) var<storage, read> state: array<u32>;
@group(0) @binding(1) var<storage, read_write> q: array<f32>;
@group(0) @binding(2) var<storage, read_write> k: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let hd = p.d / p.heads;
    let pair = gid.x;
    if pair < p.d / 2u {
        let i = 2u * pair;
        let j = f32(i % hd);
        let angle = f32(state[0]) * pow(p.theta, -(j / f32(hd)));
        let c = cos(angle);
        let s = sin(angle);
        let qa = q[i];
        let qb = q[i + 1u];
        q[i] = qa * c - qb * s;
        q[i + 1u] = qa * s + qb * c;
        let ka = k[i];
        let kb = k[i + 1u];
        k[i] = ka * c - kb * s;
        k[i + 1u] = ka * s + kb * c;
    }
}
";

const KV_STORE: &str = "
struct Params { d: u32, ctx: u32, br: u32 }
var<immediate> p: Params;
@group(0) @binding(0) var<storage, read> state: array<u32>;
@group(0) @binding(1) var<storage, read> table: array<u32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> k_cache: array<f32>;
@group(0) @binding(5) var<storage, read_write> v_cache: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let pos = state[0];
    let i = gid.x;
    if i < p.d && pos < p.ctx {
        let row = table[pos / p.br] * p.br + pos % p.br;
        k_cache[row * p.d + i] = k[i];
        v_cache[row * p.d + i] = v[i];
    }
}
";

const ATTN_SCORES: &str = "
struct Params { d: u32, heads: u32, ctx: u32, scale: f32, br: u32 }
var<immediate> p: Params;
@group(0) @binding(0) var<storage, read> state: array<u32>;
@group(0) @binding(1) var<storage, read> table: array<u32>;
@group(0) @binding(2) var<storage, read> q: array<f32>;
@group(0) @binding(3) var<storage, read> k_cache: array<f32>;
@group(0) @binding(4) var<storage, read_write> scores: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let hd = p.d / p.heads;
    let idx = gid.x;
    if idx < p.heads * p.ctx {
        // Rows outermost: the first heads * (position + 1) threads cover every row read.
        let t = idx / p.heads;
        let h = idx % p.heads;
        var s = 0.0;
        if t <= state[0] {
            let row = table[t / p.br] * p.br + t % p.br;
            var acc = 0.0;
            for (var j = 0u; j < hd; j++) {
                acc += q[h * hd + j] * k_cache[row * p.d + h * hd + j];
            }
            s = acc * p.scale;
        }
        scores[h * p.ctx + t] = s;
    }
}
";

const ATTN_SOFTMAX: &str = concat!(
    "
struct Params { heads: u32, ctx: u32 }
var<immediate> p: Params;
@group(0) @binding(0) var<storage, read> state: array<u32>;
@group(0) @binding(1) var<storage, read_write> scores: array<f32>;
var<workgroup> partial: array<f32, 64>;
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let t = lid.x;
    let base = min(wid.x, p.heads - 1u) * p.ctx;
    let rows = min(state[0] + 1u, p.ctx);
    var m = scores[base];
    for (var i = t; i < rows; i += 64u) {
        m = max(m, scores[base + i]);
    }
    partial[t] = m;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s / 2u) {
        if t < s {
            partial[t] = max(partial[t], partial[t + s]);
        }
        workgroupBarrier();
    }
    let top = partial[0];
    workgroupBarrier();
    var acc = 0.0;
    for (var i = t; i < rows; i += 64u) {
        let e = exp(scores[base + i] - top);
        scores[base + i] = e;
        acc += e;
    }",
    tree_sum!(),
    "    let sum = partial[0];
    for (var i = t; i < rows; i += 64u) {
        scores[base + i] = scores[base + i] / sum;
    }
}
"
);

const ATTN_MIX: &str = "
struct Params { d: u32, heads: u32, ctx: u32, br: u32 }
var<immediate> p: Params;
@group(0) @binding(0) var<storage, read> state: array<u32>;
@group(0) @binding(1) var<storage, read> table: array<u32>;
@group(0) @binding(2) var<storage, read> scores: array<f32>;
@group(0) @binding(3) var<storage, read> v_cache: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let hd = p.d / p.heads;
    let rows = min(state[0] + 1u, p.ctx);
    let i = gid.x;
    if i < p.d {
        let h = i / hd;
        var acc = 0.0;
        for (var t = 0u; t < rows; t++) {
            let row = table[t / p.br] * p.br + t % p.br;
            acc += scores[h * p.ctx + t] * v_cache[row * p.d + i];
        }
        out[i] = acc;
    }
}
";

const SWIGLU: &str = "
struct Params { n: u32 }
var<immediate> p: Params;
@group(0) @binding(0) var<storage, read> gate: array<f32>;
@group(0) @binding(1) var<storage, read> up: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if i < p.n {
        let g = gate[i];
        out[i] = g / (1.0 + exp(-g)) * up[i];
    }
}
";

const RECORD_LOGITS: &str = "
struct Params { vocab: u32, ctx: u32 }
var<immediate> p: Params;
@group(0) @binding(0) var<storage, read> state: array<u32>;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> history: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let pos = state[0];
    let i = gid.x;
    if i < p.vocab && pos < p.ctx {
        history[pos * p.vocab + i] = logits[i];
    }
}
";

const ARGMAX: &str = "
struct Params { vocab: u32, ctx: u32 }
var<immediate> p: Params;
@group(0) @binding(0) var<storage, read_write> state: array<u32>;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> ids: array<u32>;
var<workgroup> best_value: array<f32, 64>;
var<workgroup> best_index: array<u32, 64>;
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>) {
    let t = lid.x;
    // Index 0 is every thread's first candidate; later ones win only when larger, so
    // each thread holds the first largest of its elements.
    var bv = logits[0];
    var bi = 0u;
    for (var i = t; i < p.vocab; i += 64u) {
        if logits[i] > bv {
            bv = logits[i];
            bi = i;
        }
    }
    best_value[t] = bv;
    best_index[t] = bi;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s / 2u) {
        if t < s {
            let v = best_value[t + s];
            let j = best_index[t + s];
            if v > best_value[t] || (v == best_value[t] && j < best_index[t]) {
                best_value[t] = v;
                best_index[t] = j;
            }
        }
        workgroupBarrier();
    }
    if t == 0u {
        let pos = state[0];
        let best = best_index[0];
        if pos < p.ctx {
            ids[pos] = best;
        }
        state[1] = best;
        state[0] = pos + 1u;
    }
}
";

const STOP_AT: &str = "
struct Params { eos: u32, context: u32 }
var<immediate> p: Params;
@group(0) @binding(0) var<storage, read> state: array<u32>;
@group(0) @binding(1) var<storage, read_write> done: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if gid.x == 0u && (state[1] == p.eos || state[0] >= p.context) {
        done[0] = 1u;
    }
}
";

const SET_POSITION: &str = "
struct Params { pos: u32 }
var<immediate> p: Params;
@group(0) @binding(0) var<storage, read_write> state: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if gid.x == 0u {
        state[0] = p.pos;
    }
}
";
