//! The decode kernels for CUDA: CUDA C (`decode.cu`) compiled by NVRTC to PTX ahead of
//! time and shipped beside it (`tests/decode_ptx.rs` checks the PTX is what the pinned
//! NVRTC makes of the source), registered as [`CudaKernelSource::ptx`] with their
//! signatures, which the backend checks against the PTX's parameters when it loads.

use capture_graphs::ServerError;
use capture_graphs::cuda::{CudaBackend, CudaKernelSource};

use super::backend::DecodeBackend;
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

    fn decode_kernel(kernel: Kernel) -> Result<CudaKernelSource, ServerError> {
        CudaKernelSource::ptx(
            kernel.name(),
            PTX.to_owned(),
            &entry(kernel),
            kernel.signature(),
        )
    }
}
