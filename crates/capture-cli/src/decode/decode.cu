// The decode kernels for CUDA (capture decode). As every kernel capture launches, each
// buffer comes as a pointer and its length in bytes, then a pointer to the launch's
// 64-bit info words (floats as bits in the low half). One thread per output element,
// blocks of 64; the summation orders are the host reference's (host.rs).
// Compiled to decode.compute_80.ptx by NVRTC (capture_cuda::compile_ptx, pinned
// release, --fmad=false); crates/capture/tests/decode_ptx.rs checks the shipped PTX is
// that output.

typedef unsigned long long u64;
typedef unsigned int u32;

#define TID ((u64)blockIdx.x * blockDim.x + threadIdx.x)
#define F(w) __uint_as_float((u32)(w))

extern "C" __global__ void decode_embed(const u32* state, u64 state_bytes, const float* table, u64 table_bytes, float* x, u64 x_bytes, const u64* info) {
    u64 d = info[0], i = TID;
    if (i < d) x[i] = table[(u64)state[1] * d + i];
}

extern "C" __global__ void decode_rmsnorm(const float* x, u64 x_bytes, const float* w, u64 w_bytes, float* out, u64 out_bytes, const u64* info) {
    u64 n = info[0], i = TID;
    float eps = F(info[1]);
    if (i < n) {
        float ss = 0.0f;
        for (u64 j = 0; j < n; j++) ss += x[j] * x[j];
        float r = 1.0f / sqrtf(ss / (float)n + eps);
        out[i] = x[i] * r * w[i];
    }
}

extern "C" __global__ void decode_matvec(const float* w, u64 w_bytes, const float* x, u64 x_bytes, float* out, u64 out_bytes, const u64* info) {
    u64 rows = info[0], cols = info[1], r = TID;
    if (r < rows) {
        float acc = 0.0f;
        for (u64 c = 0; c < cols; c++) acc += w[r * cols + c] * x[c];
        out[r] = acc;
    }
}

extern "C" __global__ void decode_matvec_residual(const float* w, u64 w_bytes, const float* x, u64 x_bytes, float* out, u64 out_bytes, const u64* info) {
    u64 rows = info[0], cols = info[1], r = TID;
    if (r < rows) {
        float acc = 0.0f;
        for (u64 c = 0; c < cols; c++) acc += w[r * cols + c] * x[c];
        out[r] = out[r] + acc;
    }
}

extern "C" __global__ void decode_rope(const u32* state, u64 state_bytes, float* q, u64 q_bytes, float* k, u64 k_bytes, const u64* info) {
    u64 d = info[0], hd = d / info[1], p = TID;
    float theta = F(info[2]);
    if (p < d / 2) {
        u64 i = 2 * p;
        float j = (float)(i % hd);
        float angle = (float)state[0] * powf(theta, -(j / (float)hd));
        float c = cosf(angle), s = sinf(angle);
        float qa = q[i], qb = q[i + 1];
        q[i] = qa * c - qb * s;
        q[i + 1] = qa * s + qb * c;
        float ka = k[i], kb = k[i + 1];
        k[i] = ka * c - kb * s;
        k[i + 1] = ka * s + kb * c;
    }
}

extern "C" __global__ void decode_kv_store(const u32* state, u64 state_bytes, const float* k, u64 k_bytes, const float* v, u64 v_bytes, float* k_cache, u64 k_cache_bytes, float* v_cache, u64 v_cache_bytes, const u64* info) {
    u64 d = info[0], pos = state[0], i = TID;
    if (i < d && pos < info[1]) {
        k_cache[pos * d + i] = k[i];
        v_cache[pos * d + i] = v[i];
    }
}

extern "C" __global__ void decode_attn_scores(const u32* state, u64 state_bytes, const float* q, u64 q_bytes, const float* k_cache, u64 k_cache_bytes, float* scores, u64 scores_bytes, const u64* info) {
    u64 d = info[0], heads = info[1], ctx = info[2], hd = d / heads, idx = TID;
    float scale = F(info[3]);
    if (idx < heads * ctx) {
        u64 h = idx / ctx, t = idx % ctx;
        float s = 0.0f;
        if (t <= state[0]) {
            float acc = 0.0f;
            for (u64 j = 0; j < hd; j++) acc += q[h * hd + j] * k_cache[t * d + h * hd + j];
            s = acc * scale;
        }
        scores[idx] = s;
    }
}

extern "C" __global__ void decode_attn_softmax(const u32* state, u64 state_bytes, float* scores, u64 scores_bytes, const u64* info) {
    u64 heads = info[0], ctx = info[1], h = TID;
    u64 rows = (u64)state[0] + 1;
    if (rows > ctx) rows = ctx;
    if (h < heads) {
        float* s = scores + h * ctx;
        float m = s[0];
        for (u64 t = 0; t < rows; t++) m = fmaxf(m, s[t]);
        float sum = 0.0f;
        for (u64 t = 0; t < rows; t++) {
            float e = expf(s[t] - m);
            s[t] = e;
            sum += e;
        }
        for (u64 t = 0; t < rows; t++) s[t] = s[t] / sum;
    }
}

extern "C" __global__ void decode_attn_mix(const u32* state, u64 state_bytes, const float* scores, u64 scores_bytes, const float* v_cache, u64 v_cache_bytes, float* out, u64 out_bytes, const u64* info) {
    u64 d = info[0], hd = d / info[1], ctx = info[2], i = TID;
    u64 rows = (u64)state[0] + 1;
    if (rows > ctx) rows = ctx;
    if (i < d) {
        u64 h = i / hd;
        float acc = 0.0f;
        for (u64 t = 0; t < rows; t++) acc += scores[h * ctx + t] * v_cache[t * d + i];
        out[i] = acc;
    }
}

extern "C" __global__ void decode_swiglu(const float* gate, u64 gate_bytes, const float* up, u64 up_bytes, float* out, u64 out_bytes, const u64* info) {
    u64 i = TID;
    if (i < info[0]) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

extern "C" __global__ void decode_record_logits(const u32* state, u64 state_bytes, const float* logits, u64 logits_bytes, float* history, u64 history_bytes, const u64* info) {
    u64 v = info[0], pos = state[0], i = TID;
    if (i < v && pos < info[1]) history[pos * v + i] = logits[i];
}

extern "C" __global__ void decode_argmax(u32* state, u64 state_bytes, const float* logits, u64 logits_bytes, u32* ids, u64 ids_bytes, const u64* info) {
    if (TID == 0) {
        u64 v = info[0];
        u32 pos = state[0];
        u32 best = 0;
        for (u32 i = 1; i < v; i++) {
            if (logits[i] > logits[best]) best = i;
        }
        if (pos < info[1]) ids[pos] = best;
        state[1] = best;
        state[0] = pos + 1;
    }
}
