//! [`DecodeBackend`]: what a backend supplies to run the decoder, its twelve kernels as
//! user kernel sources, registered through [`Device::kernel`](capture_graphs::Device::kernel)
//! like any user's.

use capture_graphs::backend::Backend;
use capture_graphs::{Device, ServerError};

use super::model::Kernel;

/// A backend the decoder runs on: it can build each [`Kernel`]'s source.
pub trait DecodeBackend: Backend {
    /// The backend's name as `--backend` takes it.
    const NAME: &'static str;

    /// Whether its figures measure host overhead only (the mock's).
    const HOST_ONLY: bool;

    /// Threads per block (workgroup) of every decode launch: a Vulkan shader's fixed
    /// workgroup size, a CUDA launch's block.
    const BLOCK: u32;

    /// Whether a reduction's shared memory is given per launch (CUDA's dynamic shared
    /// memory, the mock's model of it) rather than declared by the shader (Vulkan).
    const DYNAMIC_SHARED: bool;

    /// `kernel`'s source, ready for [`Device::kernel`](capture_graphs::Device::kernel).
    ///
    /// # Errors
    ///
    /// The source was refused (SPIR-V or PTX the backend's checks reject).
    fn decode_kernel(kernel: Kernel) -> Result<Self::KernelSource, ServerError>;

    /// The GEMM library the products run through on `dev`, where the backend has one;
    /// `None` runs the decoder's own matvec kernels.
    ///
    /// # Errors
    ///
    /// The library was found but could not be set up.
    fn gemm_library(dev: &Device<Self>) -> Result<Option<GemmLibrary<Self>>, ServerError> {
        let _ = dev;
        Ok(None)
    }
}

/// A GEMM library a backend runs the decoder's matrix-vector products through (cuBLAS
/// on CUDA), as foreign work over `(w, x, out, workspace)`: `w` row-major `[rows, cols]`
/// read, `x` read, `out` written (read-written when accumulating, `out += w · x`), and
/// the library's workspace, a buffer of the decoder's declared read-write so the graph
/// owns it.
pub struct GemmLibrary<B: Backend> {
    /// What the program prints as the GEMM path.
    pub name: String,
    /// Bytes of workspace the library is handed.
    pub workspace_bytes: u64,
    /// The work for one product: `(rows, cols, accumulate)`.
    #[allow(clippy::type_complexity)]
    pub work: Box<dyn Fn(u32, u32, bool) -> B::Work + Send + Sync>,
}
