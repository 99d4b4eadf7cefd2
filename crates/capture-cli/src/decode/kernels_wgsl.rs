//! The decode kernels for Vulkan: WGSL, compiled to SPIR-V by naga when the kernels
//! are registered, bound as the Vulkan backend lays out every kernel (storage buffers
//! at bindings `0..n` of set 0, then the info words as `array<u32>`, two words per info
//! word, floats as bits in the low word).

use capture_graphs::ServerError;
use capture_graphs::vulkan::{VulkanBackend, VulkanKernelSource};

use super::backend::DecodeBackend;
use super::model::Kernel;

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
    }
}

/// `kernel`'s WGSL compiled to SPIR-V words by naga.
///
/// # Errors
///
/// [`ServerError::InvalidArgument`] naming the kernel when naga refuses the WGSL.
pub fn spirv(kernel: Kernel) -> Result<Vec<u32>, ServerError> {
    let refused = |why: String| ServerError::invalid("WGSL", kernel.name(), why);
    let module =
        naga::front::wgsl::parse_str(wgsl(kernel)).map_err(|e| refused(e.emit_to_string("")))?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::empty(),
    )
    .validate(&module)
    .map_err(|e| refused(format!("{e:?}")))?;
    naga::back::spv::write_vec(&module, &info, &naga::back::spv::Options::default(), None)
        .map_err(|e| refused(e.to_string()))
}

impl DecodeBackend for VulkanBackend {
    const NAME: &'static str = "vulkan";
    const HOST_ONLY: bool = false;

    fn decode_kernel(kernel: Kernel) -> Result<VulkanKernelSource, ServerError> {
        VulkanKernelSource::spirv(kernel.name(), spirv(kernel)?, "main", kernel.signature())
    }
}

const EMBED: &str = "
@group(0) @binding(0) var<storage, read> state: array<u32>;
@group(0) @binding(1) var<storage, read> table: array<f32>;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;
@group(0) @binding(3) var<storage, read> info: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let d = info[0];
    let i = gid.x;
    if i < d {
        x[i] = table[state[1] * d + i];
    }
}
";

const RMSNORM: &str = "
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read> info: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n = info[0];
    let eps = bitcast<f32>(info[2]);
    let i = gid.x;
    if i < n {
        var ss = 0.0;
        for (var j = 0u; j < n; j++) {
            ss += x[j] * x[j];
        }
        let r = 1.0 / sqrt(ss / f32(n) + eps);
        out[i] = x[i] * r * w[i];
    }
}
";

const MATVEC: &str = "
@group(0) @binding(0) var<storage, read> w: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read> info: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let rows = info[0];
    let cols = info[2];
    let r = gid.x;
    if r < rows {
        var acc = 0.0;
        for (var c = 0u; c < cols; c++) {
            acc += w[r * cols + c] * x[c];
        }
        out[r] = acc;
    }
}
";

const MATVEC_RESIDUAL: &str = "
@group(0) @binding(0) var<storage, read> w: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read> info: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let rows = info[0];
    let cols = info[2];
    let r = gid.x;
    if r < rows {
        var acc = 0.0;
        for (var c = 0u; c < cols; c++) {
            acc += w[r * cols + c] * x[c];
        }
        out[r] = out[r] + acc;
    }
}
";

const ROPE: &str = "
@group(0) @binding(0) var<storage, read> state: array<u32>;
@group(0) @binding(1) var<storage, read_write> q: array<f32>;
@group(0) @binding(2) var<storage, read_write> k: array<f32>;
@group(0) @binding(3) var<storage, read> info: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let d = info[0];
    let hd = d / info[2];
    let theta = bitcast<f32>(info[4]);
    let p = gid.x;
    if p < d / 2u {
        let i = 2u * p;
        let j = f32(i % hd);
        let angle = f32(state[0]) * pow(theta, -(j / f32(hd)));
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
@group(0) @binding(0) var<storage, read> state: array<u32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read_write> k_cache: array<f32>;
@group(0) @binding(4) var<storage, read_write> v_cache: array<f32>;
@group(0) @binding(5) var<storage, read> info: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let d = info[0];
    let pos = state[0];
    let i = gid.x;
    if i < d && pos < info[2] {
        k_cache[pos * d + i] = k[i];
        v_cache[pos * d + i] = v[i];
    }
}
";

const ATTN_SCORES: &str = "
@group(0) @binding(0) var<storage, read> state: array<u32>;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k_cache: array<f32>;
@group(0) @binding(3) var<storage, read_write> scores: array<f32>;
@group(0) @binding(4) var<storage, read> info: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let d = info[0];
    let heads = info[2];
    let ctx = info[4];
    let scale = bitcast<f32>(info[6]);
    let hd = d / heads;
    let idx = gid.x;
    if idx < heads * ctx {
        let h = idx / ctx;
        let t = idx % ctx;
        var s = 0.0;
        if t <= state[0] {
            var acc = 0.0;
            for (var j = 0u; j < hd; j++) {
                acc += q[h * hd + j] * k_cache[t * d + h * hd + j];
            }
            s = acc * scale;
        }
        scores[idx] = s;
    }
}
";

const ATTN_SOFTMAX: &str = "
@group(0) @binding(0) var<storage, read> state: array<u32>;
@group(0) @binding(1) var<storage, read_write> scores: array<f32>;
@group(0) @binding(2) var<storage, read> info: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let heads = info[0];
    let ctx = info[2];
    let rows = min(state[0] + 1u, ctx);
    let h = gid.x;
    if h < heads {
        let base = h * ctx;
        var m = scores[base];
        for (var t = 0u; t < rows; t++) {
            m = max(m, scores[base + t]);
        }
        var sum = 0.0;
        for (var t = 0u; t < rows; t++) {
            let e = exp(scores[base + t] - m);
            scores[base + t] = e;
            sum += e;
        }
        for (var t = 0u; t < rows; t++) {
            scores[base + t] = scores[base + t] / sum;
        }
    }
}
";

const ATTN_MIX: &str = "
@group(0) @binding(0) var<storage, read> state: array<u32>;
@group(0) @binding(1) var<storage, read> scores: array<f32>;
@group(0) @binding(2) var<storage, read> v_cache: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<storage, read> info: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let d = info[0];
    let hd = d / info[2];
    let ctx = info[4];
    let rows = min(state[0] + 1u, ctx);
    let i = gid.x;
    if i < d {
        let h = i / hd;
        var acc = 0.0;
        for (var t = 0u; t < rows; t++) {
            acc += scores[h * ctx + t] * v_cache[t * d + i];
        }
        out[i] = acc;
    }
}
";

const SWIGLU: &str = "
@group(0) @binding(0) var<storage, read> gate: array<f32>;
@group(0) @binding(1) var<storage, read> up: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read> info: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if i < info[0] {
        let g = gate[i];
        out[i] = g / (1.0 + exp(-g)) * up[i];
    }
}
";

const RECORD_LOGITS: &str = "
@group(0) @binding(0) var<storage, read> state: array<u32>;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> history: array<f32>;
@group(0) @binding(3) var<storage, read> info: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let v = info[0];
    let pos = state[0];
    let i = gid.x;
    if i < v && pos < info[2] {
        history[pos * v + i] = logits[i];
    }
}
";

const ARGMAX: &str = "
@group(0) @binding(0) var<storage, read_write> state: array<u32>;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> ids: array<u32>;
@group(0) @binding(3) var<storage, read> info: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if gid.x == 0u {
        let v = info[0];
        let pos = state[0];
        var best = 0u;
        for (var i = 1u; i < v; i++) {
            if logits[i] > logits[best] {
                best = i;
            }
        }
        if pos < info[2] {
            ids[pos] = best;
        }
        state[1] = best;
        state[0] = pos + 1u;
    }
}
";
