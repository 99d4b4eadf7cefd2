/*
 * The CUDA driver model's two interfaces beside cuda.h:
 *
 * - what it hands a host kernel (`struct capture_model_launch`) and the one function a
 *   kernel library exports (`capture_model_run`), loaded from each path of the
 *   colon-separated list in CAPTURE_CUDA_MODEL_KERNELS and asked in that order;
 * - what it tells tests about itself: `capture_model_counts` (the live objects, to
 *   check after devices are dropped: the backend never unloads the driver, so a count
 *   at unload would never run) and `capture_model_name`.
 */
#ifndef CAPTURE_CUDA_MODEL_H
#define CAPTURE_CUDA_MODEL_H

#include <stddef.h>

/* One kernel run, as the model executes it: the whole grid at once. */
struct capture_model_launch {
    /* The kernel's entry point, as the module image names it. */
    const char *entry;
    unsigned int grid[3];
    unsigned int block[3];
    /* Dynamic shared memory bytes the launch asked for. */
    unsigned int shared_bytes;
    /* The parameter buffer, laid out as the image declares (offsets and sizes). */
    unsigned int param_count;
    const unsigned char *params;
    const size_t *param_offsets;
    const size_t *param_sizes;
    /* 1 when [address, address + bytes) lies inside one live allocation (device memory
       or pinned host memory), 0 otherwise: a kernel checks every range it touches. */
    int (*inside)(unsigned long long address, size_t bytes);
};

/* capture_model_run's answers. */
#define CAPTURE_MODEL_RAN 0
#define CAPTURE_MODEL_UNKNOWN 1
#define CAPTURE_MODEL_FAULT 2

/* Runs `launch->entry`: CAPTURE_MODEL_RAN, CAPTURE_MODEL_UNKNOWN (no host
   implementation of that entry point in this library: the model asks the next) or CAPTURE_MODEL_FAULT (it touched memory it may
   not, say), with a line in `error`. */
typedef int (*capture_model_run_fn)(const struct capture_model_launch *launch, char *error,
                                    size_t error_len);

/* What lives in the model now, for leak checks. */
struct capture_model_counts {
    size_t contexts;            /* contexts created or primary contexts retained */
    size_t streams;             /* streams not destroyed (default streams not counted) */
    size_t events;
    size_t modules;
    size_t graphs;
    size_t graph_execs;         /* executables not destroyed, or destroyed with launches queued */
    size_t device_allocations;
    size_t host_allocations;    /* pinned */
    size_t device_bytes;
    size_t host_bytes;
    size_t kernels_run;         /* kernels executed since the process started */
    size_t graphs_launched;     /* graph launches executed since the process started */
    size_t context_switches;    /* cuCtxSetCurrent or cuCtxCreate changing a thread's context */
    size_t programmatic_kernels_run; /* of kernels_run, those launched (eagerly, or as the
                                        graph node a captured launch made) with
                                        CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION */
    size_t kernel_node_updates; /* cuGraphExecKernelNodeSetParams calls that changed a node */
    size_t capture_info_calls;  /* cuStreamGetCaptureInfo calls on a capturing stream */
};

#endif
