// The CUDA example's kernel: y[i] = x[i] * x[i] + b. As every kernel capture launches,
// each buffer comes as a pointer and its length in bytes, then a pointer to the launch's
// 64-bit info words: [n, bits of b]. The loop is grid-stride, so any grid covers any n.
// Compiled to square_plus.compute_80.ptx by NVRTC (capture_cuda::compile_ptx, pinned
// release); crates/capture/tests/cuda_example.rs checks the shipped PTX is that output.

typedef unsigned long long u64;

extern "C" __global__ void square_plus(const float* x, u64 x_bytes, float* y, u64 y_bytes, const u64* info) {
    u64 n = info[0];
    if (n > x_bytes / 4) n = x_bytes / 4;
    if (n > y_bytes / 4) n = y_bytes / 4;
    float b = __uint_as_float((unsigned int)info[1]);
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        y[i] = x[i] * x[i] + b;
    }
}
