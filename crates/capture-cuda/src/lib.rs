//! capture-cuda: CUDA graphs through cudarc's driver bindings, loaded at run time.
//!
//! Design choices:
//! - **Nothing calls into the driver before the library is known to load**: cudarc
//!   panics on a missing `libcuda.so`, so [`CudaBackend::new`] checks first and returns a
//!   typed [`Unavailable`] instead.
//! - **Raw driver calls** (`cuMemAlloc` pages, `cuMemHostAlloc` pinned staging, events as
//!   fences, non-blocking streams), so no per-slice event tracking touches a captured
//!   stream.
//! - **Capture in global mode**: the backend declares its streams thread-affine, so the
//!   core makes every driver call of a stream on its worker thread (begin and end from
//!   any user thread). `cuStreamEndCapture` always runs, even for a doomed window; a graph
//!   holding memory allocation nodes is refused; `cuGraphInstantiateWithFlags`,
//!   `cuGraphUpload` (a failure only logged by the core), `cuGraphLaunch`.
//! - **Kernels** are PTX: the builtins are CUDA C compiled by NVRTC for sm_80 and sm_90
//!   and shipped (a test recompiles them and compares); [`MIN_DRIVER`] names the
//!   oldest driver; an unsupported PTX version is a typed error.
//! - Unsafe code lives in `raw.rs` only, each block with a `// SAFETY:` line.
//!
//! Features forward cudarc's CUDA version bindings: `cuda-12090` (default), `cuda-12040`
//! and `cuda-13000` (use `--no-default-features` to pick another).

mod driver;
mod error;
mod executable;
mod kernels;
mod raw;
mod storage;
mod stream;

pub use driver::CudaBackend;
pub use error::{CudaError, Unavailable};
pub use executable::CudaExecutable;
pub use kernels::{
    BUILTINS_CU, BUILTINS_SM80, BUILTINS_SM90, CudaKernel, CudaKernelSource, MIN_DRIVER, PTX_ISA,
    SHIPPED, compile_builtins, nvrtc_present,
};
pub use storage::{CudaSlice, CudaStorage};
pub use stream::{CudaFence, CudaStream};
