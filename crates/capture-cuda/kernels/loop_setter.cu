// The loop setter (rule 30): the last node of a loop replay's WHILE body, after the
// captured step. It counts the iteration and says whether the loop goes on: another
// iteration only while the step left the stop flag zero and fewer than `max` ran.
//
// It calls the device runtime (cudaGraphSetConditional, from libcudadevrt), so it is
// compiled by NVRTC with -rdc=true (PTX for compute_80 and compute_90, shipped for the
// record: the driver cannot load it alone) and linked by nvJitLink against the pinned
// nvidia-cuda-runtime-cu12 wheel's libcudadevrt.a into cubins for sm_80 and sm_90, the
// images the backend loads; CI rebuilds all four and compares them byte for byte. No
// header is included: the two declarations below are the device runtime's own
// (driver_types.h, cuda_device_runtime_api.h).

typedef unsigned long long cudaGraphConditionalHandle;

extern "C" __device__ void cudaGraphSetConditional(cudaGraphConditionalHandle handle,
                                                   unsigned int value);

// One thread: *counter += 1; the loop goes on while *flag == 0 and *counter < *max.
extern "C" __global__ void capture_loop_setter(cudaGraphConditionalHandle handle,
                                               const unsigned int* flag,
                                               unsigned int* counter,
                                               const unsigned int* max) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        unsigned int done = *counter + 1;
        *counter = done;
        cudaGraphSetConditional(handle, (*flag == 0u && done < *max) ? 1u : 0u);
    }
}
