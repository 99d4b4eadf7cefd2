// The decode-until-stop example's CUDA kernels (examples/decode_until.rs), as an engine
// writes them: plain pointers, scalars by value. Compiled to decode_until.compute_80.ptx
// by NVRTC (capture_cuda::compile_ptx, pinned release, --fmad=false);
// tests/cuda_example.rs checks the shipped PTX is that output.

// logits[v] = ((tok * 131 + pos * 17 + v * 29) % 97) for v < vocab, state = [pos, tok]:
// a stand-in for the model, in small integers every backend computes exactly.
extern "C" __global__ void toy_logits(const unsigned* state, float* logits, unsigned vocab) {
    unsigned v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v < vocab) {
        unsigned pos = state[0], tok = state[1];
        logits[v] = (float)((tok * 131u + pos * 17u + v * 29u) % 97u);
    }
}

// One thread: best = the first index of the largest logit; ids[pos] = best;
// state = [pos + 1, best]; done = 1 once best is the end token or the context is full
// (left as it was otherwise, as a sampler sets its end flag).
extern "C" __global__ void toy_sample(unsigned* state, const float* logits, unsigned* ids,
                                      unsigned* done, unsigned vocab, unsigned eos,
                                      unsigned context) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    unsigned best = 0;
    for (unsigned v = 1; v < vocab; v++) {
        if (logits[v] > logits[best]) best = v;
    }
    unsigned pos = state[0];
    if (pos < context) ids[pos] = best;
    state[0] = pos + 1;
    state[1] = best;
    if (best == eos || pos + 1 >= context) *done = 1u;
}
