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
