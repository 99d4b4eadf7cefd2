//! capture-cuda: CUDA graphs through the CUDA driver API, loaded at run time.
//!
//! Design choices:
//! - **Nothing calls into the driver before the library is known to load**:
//!   [`CudaBackend::new`] loads `libcuda.so.1` (where the dynamic loader looks) and
//!   returns a typed [`Unavailable`] when it is missing, lacks an entry point, or is the
//!   toolkit's stub library.
//! - **Bindings of its own** (`raw.rs`): every driver call returns a plain integer and
//!   every enum the driver writes is read as one, so a code newer than this crate is
//!   reported as its number ([`CudaError`]), never undefined behaviour.
//! - **Raw driver calls** (`cuMemAlloc` pages, `cuMemHostAlloc` pinned staging,
//!   blocking-sync events as fences, non-blocking streams), so no per-slice event
//!   tracking touches a captured stream.
//! - **Capture in relaxed mode** (`CU_STREAM_CAPTURE_MODE_RELAXED`): no thread is barred
//!   from any call while a capture is open, and a capture may end on any thread, so the
//!   core calls the driver directly from its callers' threads, each call making the
//!   device's primary context current (and putting the caller's back). The protections
//!   global mode would give are the core's: no page release or first module load while
//!   any stream of the context records (one capture domain per device ordinal, shared by
//!   every backend and device on it), no sync, read, event or wait on a recording stream.
//!   `cuStreamEndCapture` always runs, even for a doomed window; a graph holding memory
//!   allocation nodes is refused; `cuGraphInstantiateWithFlags`, `cuGraphUpload` (a
//!   failure only logged by the core), `cuGraphLaunch`.
//! - **Kernels**: the builtins are CUDA C compiled by NVRTC to cubins for sm_80 and
//!   sm_90 (no JIT needed on those GPUs) and PTX for compute_80 and compute_90 (JIT
//!   elsewhere), all shipped (a test recompiles them and compares); [`MIN_DRIVER`] names
//!   the oldest driver. User PTX is checked against its declared signature at load
//!   (`cuFuncGetParamInfo`). A missing JIT compiler or an unsupported PTX version is a
//!   typed error.
//! - **Programmatic dependent launch** on compute capability 9.0 and later: a launch
//!   with `Dims::programmatic` goes through `cuLaunchKernelEx` with
//!   `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION` (in a capture, a
//!   programmatic edge of the graph); the builtins wait for their grid dependency on
//!   sm_90 (`griddepcontrol.wait`), so their signature declares it, and a user PTX that
//!   declares it must hold the wait. Older devices declare none: the core refuses the
//!   launch there.
//! - **Loop replays** (rule 30) under CUDA 12.3 or newer (driver 545; older ones declare
//!   `DeviceLoops::Unsupported`): an executable's first loop replay builds a graph of its
//!   own, kept with it: memset nodes zeroing the stop flag and the counter and writing
//!   `max` to a device word, then a WHILE conditional node (handle default 1, set at
//!   every launch) whose body is the captured graph as a child graph node followed by
//!   the loop setter, which counts the iteration and keeps the loop going while the flag
//!   is zero and fewer than `max` ran. Built by node calls, never by capturing into the
//!   body. `max` is set per call in the executable (`cuGraphExecMemsetNodeSetParams`); a
//!   slot's update sets the captured graph's node and the loop executable's child node
//!   from it (`cuGraphExecChildGraphNodeSetParams`). The setter calls the device runtime
//!   (`cudaGraphSetConditional`), so it ships as cubins for sm_80 and sm_90 linked
//!   against libcudadevrt by nvJitLink ([`LOOP_SETTER_CU`], checked byte for byte in
//!   CI); other devices declare loops unsupported. The user's own work is refused in a
//!   loop window (it may record nodes a conditional body refuses); copies are allowed.
//! - **A context of the caller's**: [`CudaBackend::from_raw_context`] (an `unsafe fn`
//!   whose `# Safety` list says what the caller guarantees) runs the backend in a CUDA
//!   context a runtime already owns instead of retaining the primary context, and never
//!   retains, releases or destroys it; a non-blocking stream of the caller's may be lent
//!   to pooled stream 0 (checked: not a default stream, of that context, non-blocking,
//!   not capturing; refused as [`Unavailable`] otherwise). Every backend on one context
//!   shares its capture domain. With the `cudarc` feature, `CudaBackend::from_cudarc`
//!   takes cudarc's `Arc<CudaContext>` (and `from_cudarc_stream` its `Arc<CudaStream>`),
//!   kept alive until the backend's last handle is gone.
//! - Unsafe code lives in `raw.rs` (the driver and NVRTC) and `adopt.rs` (the `unsafe fn`s
//!   that take a caller's context), each block with a `// SAFETY:` line.
//!
//! Features:
//! - `cudarc` (off by default): `CudaBackend::from_cudarc` and
//!   `CudaBackend::from_cudarc_stream`, over cudarc 0.19 (runtime-loaded, no toolkit
//!   needed; it enables cudarc's `cuda-12090` declarations, and cudarc takes the newest
//!   version feature any crate enables, which this crate's handle-only use allows).

mod adopt;
mod driver;
mod error;
mod executable;
mod gpu;
mod import;
mod kernels;
mod loops;
mod raw;
mod read_staging;
mod shape;
mod storage;
mod stream;
mod version;
mod work;

pub use driver::CudaBackend;
pub use error::{CudaError, Unavailable};
pub use executable::CudaExecutable;
pub use import::CudaExternal;
pub use kernels::{
    BUILTINS_CU, BUILTINS_SM80, BUILTINS_SM80_CUBIN, BUILTINS_SM90, BUILTINS_SM90_CUBIN,
    CudaKernel, CudaKernelSource, SHIPPED, SHIPPED_CUBINS, compile_builtins,
    compile_builtins_cubin, compile_ptx, nvrtc_present, nvrtc_version,
};
pub use loops::{
    LOOP_SETTER_CU, LOOP_SETTER_SM80, LOOP_SETTER_SM80_CUBIN, LOOP_SETTER_SM90,
    LOOP_SETTER_SM90_CUBIN, compile_loop_setter,
};
pub use shape::{GraphEdge, GraphShape};
pub use storage::{CudaSlice, CudaStorage};
pub use stream::{CudaFence, CudaStream};
pub use version::{MIN_DRIVER, NVRTC_RELEASE, PTX_ISA};
pub use work::{CudaRange, CudaWork, CudaWorkCall};
