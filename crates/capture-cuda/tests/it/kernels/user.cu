// Kernels as an engine writes them, for capture-cuda's launch-model tests: buffers as
// plain pointers, dimensions and factors as scalars by value, a block-wide reduction in
// dynamic shared memory. Compiled by NVRTC (--fmad=false) to user.compute_80.ptx, which
// a test recompiles and compares; the CUDA driver model runs host implementations of
// the same entry points (crates/capture-cuda-model/src/kernels.rs).

// sums[b] = sum over the block's elements of x[i] * scale, i < n; blockDim.x threads,
// blockDim.x floats of dynamic shared memory.
extern "C" __global__ void block_sum(const float* x, float* sums, unsigned n, float scale) {
    extern __shared__ float partial[];
    unsigned t = threadIdx.x;
    unsigned i = blockIdx.x * blockDim.x + t;
    partial[t] = i < n ? x[i] * scale : 0.0f;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) {
            partial[t] += partial[t + s];
        }
        __syncthreads();
    }
    if (t == 0) {
        sums[blockIdx.x] = partial[0];
    }
}

// y[i] = x[i] * a for i < n: what the user's own work launches on the raw stream.
extern "C" __global__ void scale(const float* x, float* y, unsigned n, float a) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = x[i] * a;
    }
}

// x[0] += k, then done[0] = 1 once x[0] >= limit (else 0): a loop replay's step that sets
// its stop flag (rule 30). One thread.
extern "C" __global__ void count_until(unsigned* x, unsigned* done, unsigned k, unsigned limit) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        unsigned v = x[0] + k;
        x[0] = v;
        done[0] = v >= limit ? 1u : 0u;
    }
}

// Traps when x[0] == at: a step that faults in one iteration of a loop replay.
extern "C" __global__ void trap_at(const unsigned* x, unsigned at) {
    if (x[0] == at) {
        __trap();
    }
}
