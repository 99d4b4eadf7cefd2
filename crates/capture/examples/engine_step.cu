// The engine example's CUDA kernels (examples/engine_step.rs), as an engine writes them:
// plain pointers, dimensions and constants by value. `engine_affine` and
// `engine_temperature` are the engine's own kernels, launched through the library;
// `engine_gemv` is its "vendor library" GEMV, which the engine launches itself on the
// raw stream inside foreign work. Compiled to engine_step.compute_80.ptx by NVRTC
// (capture_cuda::compile_ptx, pinned release, --fmad=false); tests/cuda_example.rs
// checks the shipped PTX is that output.

// h[i] = a * x[i] + b for i < n.
extern "C" __global__ void engine_affine(const float* x, float* h, unsigned n, float a, float b) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) h[i] = a * x[i] + b;
}

// y[r] = sum over c of w[r * cols + c] * x[c], one thread per row, in column order.
extern "C" __global__ void engine_gemv(const float* w, const float* x, float* y, unsigned rows, unsigned cols) {
    unsigned r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        float acc = 0.0f;
        for (unsigned c = 0; c < cols; c++) acc += w[(size_t)r * cols + c] * x[c];
        y[r] = acc;
    }
}

// logits[i] *= inv_t for i < n, in place.
extern "C" __global__ void engine_temperature(float* logits, unsigned n, float inv_t) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) logits[i] = logits[i] * inv_t;
}
