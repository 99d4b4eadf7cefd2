// The decode kernels for CUDA (capture decode), written as an engine writes them: each
// buffer a plain pointer to its first element, dimensions and constants by value. The
// reductions (rmsnorm, matvec, softmax, argmax) run one block per output, the block's
// threads striding over the input and meeting in a tree in dynamic shared memory
// (blockDim.x floats, a power of two; the argmax also blockDim.x indices); the rest run
// one thread per element. Compiled to decode.compute_80.ptx by NVRTC
// (capture_cuda::compile_ptx, pinned release, --fmad=false); tests/decode_ptx.rs checks
// the shipped PTX is that output and that each entry point's parameters are its
// signature's.

typedef unsigned int u32;

#define TID (blockIdx.x * blockDim.x + threadIdx.x)

extern __shared__ float shared[];

// The block's partial values in shared[0..blockDim.x), summed into shared[0].
__device__ void block_sum(float v) {
    u32 t = threadIdx.x;
    shared[t] = v;
    __syncthreads();
    for (u32 s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) shared[t] += shared[t + s];
        __syncthreads();
    }
}

extern "C" __global__ void decode_embed(const u32* state, const float* table, float* x, u32 d) {
    u32 i = TID;
    if (i < d) x[i] = table[state[1] * d + i];
}

extern "C" __global__ void decode_rmsnorm(const float* x, const float* w, float* out, u32 n, float eps) {
    float acc = 0.0f;
    for (u32 j = threadIdx.x; j < n; j += blockDim.x) acc += x[j] * x[j];
    block_sum(acc);
    float r = 1.0f / sqrtf(shared[0] / (float)n + eps);
    for (u32 i = threadIdx.x; i < n; i += blockDim.x) out[i] = x[i] * r * w[i];
}

__device__ float row_dot(const float* w, const float* x, u32 row, u32 cols) {
    float acc = 0.0f;
    for (u32 c = threadIdx.x; c < cols; c += blockDim.x) acc += w[(size_t)row * cols + c] * x[c];
    block_sum(acc);
    return shared[0];
}

extern "C" __global__ void decode_matvec(const float* w, const float* x, float* out, u32 rows, u32 cols) {
    u32 row = blockIdx.x;
    float v = row_dot(w, x, row, cols);
    if (threadIdx.x == 0 && row < rows) out[row] = v;
}

extern "C" __global__ void decode_matvec_residual(const float* w, const float* x, float* out, u32 rows, u32 cols) {
    u32 row = blockIdx.x;
    float v = row_dot(w, x, row, cols);
    if (threadIdx.x == 0 && row < rows) out[row] = out[row] + v;
}

extern "C" __global__ void decode_rope(const u32* state, float* q, float* k, u32 d, u32 heads, float theta) {
    u32 hd = d / heads, p = TID;
    if (p < d / 2) {
        u32 i = 2 * p;
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

// The cache row of position t: block table[t / br], row t % br of it (a paged cache).
__device__ size_t paged_row(const u32* table, u32 t, u32 br) {
    return (size_t)table[t / br] * br + t % br;
}

extern "C" __global__ void decode_kv_store(const u32* state, const u32* table, const float* k, const float* v, float* k_cache, float* v_cache, u32 d, u32 ctx, u32 br) {
    u32 pos = state[0], i = TID;
    if (i < d && pos < ctx) {
        size_t row = paged_row(table, pos, br);
        k_cache[row * d + i] = k[i];
        v_cache[row * d + i] = v[i];
    }
}

extern "C" __global__ void decode_attn_scores(const u32* state, const u32* table, const float* q, const float* k_cache, float* scores, u32 d, u32 heads, u32 ctx, float scale, u32 br) {
    u32 hd = d / heads, idx = TID;
    if (idx < heads * ctx) {
        // Rows outermost: the first heads * (position + 1) threads cover every row read.
        u32 t = idx / heads, h = idx % heads;
        float s = 0.0f;
        if (t <= state[0]) {
            size_t row = paged_row(table, t, br);
            float acc = 0.0f;
            for (u32 j = 0; j < hd; j++) acc += q[h * hd + j] * k_cache[row * d + h * hd + j];
            s = acc * scale;
        }
        scores[h * ctx + t] = s;
    }
}

extern "C" __global__ void decode_attn_softmax(const u32* state, float* scores, u32 heads, u32 ctx) {
    u32 t = threadIdx.x;
    u32 h = blockIdx.x < heads ? blockIdx.x : heads - 1;
    float* s = scores + (size_t)h * ctx;
    u32 rows = state[0] + 1;
    if (rows > ctx) rows = ctx;
    float m = s[0];
    for (u32 i = t; i < rows; i += blockDim.x) m = fmaxf(m, s[i]);
    shared[t] = m;
    __syncthreads();
    for (u32 k = blockDim.x / 2; k > 0; k >>= 1) {
        if (t < k) shared[t] = fmaxf(shared[t], shared[t + k]);
        __syncthreads();
    }
    float top = shared[0];
    __syncthreads();
    float acc = 0.0f;
    for (u32 i = t; i < rows; i += blockDim.x) {
        float e = expf(s[i] - top);
        s[i] = e;
        acc += e;
    }
    block_sum(acc);
    float sum = shared[0];
    for (u32 i = t; i < rows; i += blockDim.x) s[i] = s[i] / sum;
}

extern "C" __global__ void decode_attn_mix(const u32* state, const u32* table, const float* scores, const float* v_cache, float* out, u32 d, u32 heads, u32 ctx, u32 br) {
    u32 hd = d / heads, i = TID;
    u32 rows = state[0] + 1;
    if (rows > ctx) rows = ctx;
    if (i < d) {
        u32 h = i / hd;
        float acc = 0.0f;
        for (u32 t = 0; t < rows; t++) acc += scores[h * ctx + t] * v_cache[paged_row(table, t, br) * d + i];
        out[i] = acc;
    }
}

extern "C" __global__ void decode_swiglu(const float* gate, const float* up, float* out, u32 n) {
    u32 i = TID;
    if (i < n) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

extern "C" __global__ void decode_record_logits(const u32* state, const float* logits, float* history, u32 vocab, u32 ctx) {
    u32 pos = state[0], i = TID;
    if (i < vocab && pos < ctx) history[(size_t)pos * vocab + i] = logits[i];
}

extern "C" __global__ void decode_argmax(u32* state, const float* logits, u32* ids, u32 vocab, u32 ctx) {
    u32 t = threadIdx.x;
    float* value = shared;
    u32* index = (u32*)(shared + blockDim.x);
    // Index 0 is every thread's first candidate; later ones win only when larger, so
    // each thread holds the first largest of its elements.
    float bv = logits[0];
    u32 bi = 0;
    for (u32 i = t; i < vocab; i += blockDim.x) {
        if (logits[i] > bv) {
            bv = logits[i];
            bi = i;
        }
    }
    value[t] = bv;
    index[t] = bi;
    __syncthreads();
    for (u32 s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) {
            float v = value[t + s];
            u32 j = index[t + s];
            if (v > value[t] || (v == value[t] && j < index[t])) {
                value[t] = v;
                index[t] = j;
            }
        }
        __syncthreads();
    }
    if (t == 0) {
        u32 pos = state[0], best = index[0];
        if (pos < ctx) ids[pos] = best;
        state[1] = best;
        state[0] = pos + 1;
    }
}

extern "C" __global__ void decode_set_position(u32* state, u32 pos) {
    if (TID == 0) state[0] = pos;
}

// done = 1 once the state's token is the end token or its position reached the
// context's end (the graph's stop flag, rule 30); left as it was otherwise.
extern "C" __global__ void decode_stop_at(const u32* state, u32* done, u32 eos, u32 context) {
    if (TID == 0 && (state[1] == eos || state[0] >= context)) *done = 1u;
}
