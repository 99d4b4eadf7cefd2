// The paged decode step's CUDA kernels (examples/paged_step.rs), as an engine writes
// them: plain pointers, the row and the width by value. Compiled to
// paged_step.compute_80.ptx by NVRTC (capture_cuda::compile_ptx, pinned release,
// --fmad=false); tests/cuda_example.rs checks the shipped PTX is that output.

// page[row * dim + i] = h[i] for i < dim: the token's row of its KV page.
extern "C" __global__ void paged_append(const float* h, float* page, unsigned row, unsigned dim) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < dim) page[(size_t)row * dim + i] = h[i];
}

// out[i] = (sum over r <= pos of page[r * dim + i]) / (pos + 1), rows in order: the
// mean of the page's rows so far.
extern "C" __global__ void paged_attend(const float* page, float* out, unsigned pos, unsigned dim) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < dim) {
        float acc = 0.0f;
        for (unsigned r = 0; r <= pos; r++) acc += page[(size_t)r * dim + i];
        out[i] = acc / (float)(pos + 1);
    }
}
