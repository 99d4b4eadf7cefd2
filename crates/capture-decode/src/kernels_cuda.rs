//! The decode kernels for CUDA: CUDA C (`decode.cu`) compiled by NVRTC to PTX ahead of
//! time and shipped beside it (`tests/decode_ptx.rs` checks the PTX is what the pinned
//! NVRTC makes of the source), registered as [`CudaKernelSource::ptx`] with their
//! parameter lists (one pointer per buffer, scalars by value), which the backend checks
//! against the module's parameters (`cuFuncGetParamInfo`) when it loads; launched in
//! blocks of 256 threads, a reduction with `256 × 4` (the argmax `256 × 8`) bytes of
//! dynamic shared memory.

use capture_graphs::cuda::{CudaBackend, CudaKernelSource};
use capture_graphs::{Device, ServerError};

use super::backend::{DecodeBackend, GemmLibrary};
use super::model::Kernel;

/// The CUDA C source of every decode kernel.
pub const SOURCE: &str = include_str!("decode.cu");

/// The PTX NVRTC made of [`SOURCE`] for virtual architecture compute_80 (the driver
/// compiles it for the GPU at hand).
pub const PTX: &str = include_str!("decode.compute_80.ptx");

/// `kernel`'s entry point in the PTX.
pub fn entry(kernel: Kernel) -> String {
    format!("decode_{}", kernel.name())
}

impl DecodeBackend for CudaBackend {
    const NAME: &'static str = "cuda";
    const HOST_ONLY: bool = false;
    const BLOCK: u32 = 256;
    const DYNAMIC_SHARED: bool = true;

    fn decode_kernel(kernel: Kernel) -> Result<CudaKernelSource, ServerError> {
        CudaKernelSource::ptx(
            kernel.name(),
            PTX.to_owned(),
            &entry(kernel),
            kernel.signature(),
        )
    }

    fn gemm_library(_: &Device<Self>) -> Result<Option<GemmLibrary<Self>>, ServerError> {
        super::cublas::gemm_library()
    }
}
