//! [`DecodeBackend`]: what a backend supplies to run the decoder, its twelve kernels as
//! user kernel sources, registered through [`Device::kernel`](capture_graphs::Device::kernel)
//! like any user's.

use capture_graphs::ServerError;
use capture_graphs::backend::Backend;

use super::model::Kernel;

/// A backend the decoder runs on: it can build each [`Kernel`]'s source.
pub trait DecodeBackend: Backend {
    /// The backend's name as `--backend` takes it.
    const NAME: &'static str;

    /// Whether its figures measure host overhead only (the mock's).
    const HOST_ONLY: bool;

    /// `kernel`'s source, ready for [`Device::kernel`](capture_graphs::Device::kernel).
    ///
    /// # Errors
    ///
    /// The source was refused (SPIR-V or PTX the backend's checks reject).
    fn decode_kernel(kernel: Kernel) -> Result<Self::KernelSource, ServerError>;
}
