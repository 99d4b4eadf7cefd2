// The builtin kernels of capture in CUDA C: the same set, the same info words and the
// same results as every other backend's (see capture_mock::Builtin).
//
// Each buffer argument is a pointer and its length in bytes; `info` points at the
// launch's 64-bit info words: [n, bits of the scalar a] (row_bias: [rows, cols]). Loops
// are grid-stride, so any grid covers any length. Compiled by NVRTC with --fmad=false,
// so axpy rounds exactly as the host model does.
//
// On sm_90 and later every builtin first waits for its grid dependency (what
// cudaGridDependencySynchronize() compiles to) and then lets its own dependents start
// (cudaTriggerProgrammaticLaunchCompletion()), so any builtin launch may be a
// programmatic dependent launch (Dims::programmatic): it starts while the kernel before
// it finishes and reads nothing before that kernel's writes are visible. A launch
// without a programmatic dependency returns from the wait at once.

typedef unsigned long long u64;

__device__ u64 count(u64 want, u64 bytes) { return want < bytes / 4 ? want : bytes / 4; }
__device__ u64 start() { return (u64)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ u64 stride() { return (u64)gridDim.x * blockDim.x; }
__device__ float scalar(const u64* info) { return __uint_as_float((unsigned int)info[1]); }
__device__ void after_grid() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

extern "C" __global__ void fill(float* out, u64 out_bytes, const u64* info) {
    after_grid();
    u64 n = count(info[0], out_bytes);
    float a = scalar(info);
    for (u64 i = start(); i < n; i += stride()) out[i] = a;
}

extern "C" __global__ void add_scalar(const float* x, u64 x_bytes, float* y, u64 y_bytes, const u64* info) {
    after_grid();
    u64 n = count(count(info[0], x_bytes), y_bytes);
    float a = scalar(info);
    for (u64 i = start(); i < n; i += stride()) y[i] = x[i] + a;
}

extern "C" __global__ void mul_scalar(const float* x, u64 x_bytes, float* y, u64 y_bytes, const u64* info) {
    after_grid();
    u64 n = count(count(info[0], x_bytes), y_bytes);
    float a = scalar(info);
    for (u64 i = start(); i < n; i += stride()) y[i] = x[i] * a;
}

extern "C" __global__ void axpy(const float* x, u64 x_bytes, float* y, u64 y_bytes, const u64* info) {
    after_grid();
    u64 n = count(count(info[0], x_bytes), y_bytes);
    float a = scalar(info);
    for (u64 i = start(); i < n; i += stride()) y[i] = y[i] + a * x[i];
}

extern "C" __global__ void copy(const float* x, u64 x_bytes, float* y, u64 y_bytes, const u64* info) {
    after_grid();
    u64 n = count(count(info[0], x_bytes), y_bytes);
    for (u64 i = start(); i < n; i += stride()) y[i] = x[i];
}

extern "C" __global__ void row_bias(const float* x, u64 x_bytes, float* y, u64 y_bytes, const u64* info) {
    after_grid();
    u64 cols = info[1] > 0 ? info[1] : 1;
    u64 n = count(count(info[0] * info[1], x_bytes), y_bytes);
    for (u64 k = start(); k < n; k += stride()) y[k] = x[k] + (float)(k / cols);
}
