//! Errors of the CUDA backend: why CUDA is unavailable, and driver result codes turned
//! into the core's errors.

use capture_core::ServerError;
use capture_core::{OutOfMemory, PoolName};
use cudarc::driver::sys::CUresult;

pub use capture_core::Unavailable;

/// This backend's [`Unavailable`], saying `why`.
pub(crate) fn unavailable(why: impl Into<String>) -> Unavailable {
    Unavailable::new("CUDA", why)
}

/// A CUDA driver result code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?}")]
pub struct CudaError(pub CUresult);

/// The core's error for a failed driver call `op`. Codes handled:
/// `CUDA_ERROR_UNSUPPORTED_PTX_VERSION` (a typed error naming the minimum driver);
/// anything else is a driver error carrying the code.
pub(crate) fn cu_error(op: &'static str, code: CUresult) -> ServerError {
    match code {
        CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION => ServerError::invalid(
            "PTX",
            op,
            format!(
                "the driver is older than the PTX ({}): {}",
                crate::kernels::PTX_ISA,
                crate::kernels::MIN_DRIVER
            ),
        ),
        other => ServerError::driver(op, CudaError(other)),
    }
}

/// An allocation the driver refused for lack of memory, for the memory manager to fill
/// in with every pool's figures.
pub(crate) fn out_of_memory(
    op: &'static str,
    size: u64,
    pool: PoolName,
    code: CUresult,
) -> ServerError {
    match code {
        CUresult::CUDA_ERROR_OUT_OF_MEMORY => ServerError::OutOfMemory(Box::new(OutOfMemory {
            requested: size,
            pool,
            reason: format!("{op}: {code:?}").into(),
            pools: Vec::new(),
            graphs: Vec::new(),
        })),
        other => cu_error(op, other),
    }
}
