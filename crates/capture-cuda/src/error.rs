//! Errors of the CUDA backend: why CUDA is unavailable, and driver result codes turned
//! into the core's errors.

use std::borrow::Cow;
use std::fmt;

use capture_core::ServerError;
use capture_core::{OutOfMemory, PoolName};

pub use capture_core::Unavailable;

/// This backend's [`Unavailable`], saying `why`.
pub(crate) fn unavailable(why: impl Into<String>) -> Unavailable {
    Unavailable::new("CUDA", why)
}

/// `CUDA_ERROR_OUT_OF_MEMORY`.
const OUT_OF_MEMORY: i32 = 2;
/// `CUDA_ERROR_NO_BINARY_FOR_GPU`.
const NO_BINARY_FOR_GPU: i32 = 209;
/// `CUDA_ERROR_JIT_COMPILER_NOT_FOUND`.
const JIT_COMPILER_NOT_FOUND: i32 = 221;
/// `CUDA_ERROR_UNSUPPORTED_PTX_VERSION`.
const UNSUPPORTED_PTX_VERSION: i32 = 222;

/// A CUDA driver result code, kept as the integer the driver returned (a code newer than
/// this crate is reported, never misread), with the driver's name for it when it has one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaError {
    code: i32,
    name: Option<Cow<'static, str>>,
}

impl CudaError {
    /// Result `code`, named `name` (`CUDA_ERROR_…`) when known.
    pub fn new(code: i32, name: Option<Cow<'static, str>>) -> Self {
        Self { code, name }
    }

    /// The driver's result code.
    pub fn code(&self) -> i32 {
        self.code
    }

    /// The driver's name for the code, when it gave one.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "{name} (code {})", self.code),
            None => write!(f, "CUDA result code {} (unknown to this driver)", self.code),
        }
    }
}

impl std::error::Error for CudaError {}

/// The core's error for a failed driver call `op`. Codes handled: an unsupported PTX
/// version (a typed error naming the minimum driver), a missing PTX JIT compiler (naming
/// the library a stripped driver install lacks), no binary for the GPU; anything else
/// is a driver error carrying the code.
pub(crate) fn cu_error(op: &'static str, error: CudaError) -> ServerError {
    match error.code {
        UNSUPPORTED_PTX_VERSION => ServerError::invalid(
            "PTX",
            op,
            format!(
                "the driver is older than the PTX ({}): {}",
                crate::version::PTX_ISA,
                crate::version::MIN_DRIVER
            ),
        ),
        JIT_COMPILER_NOT_FOUND => ServerError::invalid(
            "PTX",
            op,
            "the driver's PTX JIT compiler (libnvidia-ptxjitcompiler.so.1) is not installed: \
             install the full NVIDIA driver, or load a cubin built for this GPU",
        ),
        NO_BINARY_FOR_GPU => ServerError::invalid(
            "kernel image",
            op,
            "it holds no code for this GPU's architecture",
        ),
        _ => ServerError::driver(op, error),
    }
}

/// An allocation the driver refused for lack of memory, for the memory manager to fill
/// in with every pool's figures.
pub(crate) fn out_of_memory(
    op: &'static str,
    size: u64,
    pool: PoolName,
    error: CudaError,
) -> ServerError {
    if error.code == OUT_OF_MEMORY {
        return ServerError::OutOfMemory(Box::new(OutOfMemory {
            requested: size,
            pool,
            reason: format!("{op}: {error}").into(),
            pools: Vec::new(),
            graphs: Vec::new(),
        }));
    }
    cu_error(op, error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_unknown_to_this_crate_is_reported_as_its_number() {
        let e = CudaError::new(12_345, None);
        assert_eq!(e.code(), 12_345);
        assert_eq!(
            e.to_string(),
            "CUDA result code 12345 (unknown to this driver)"
        );
        let e = cu_error("cuLaunchKernel", e);
        assert!(e.to_string().contains("cuLaunchKernel"), "{e}");
    }

    #[test]
    fn a_missing_jit_compiler_is_named() {
        let e = cu_error(
            "cuModuleLoadData",
            CudaError::new(221, Some("CUDA_ERROR_JIT_COMPILER_NOT_FOUND".into())),
        );
        assert!(matches!(e, ServerError::InvalidArgument { .. }), "{e:?}");
        assert!(
            capture_core::Chain(&e)
                .to_string()
                .contains("libnvidia-ptxjitcompiler.so.1"),
            "{e}"
        );
    }
}
