//! capture-cuda integration tests: the whole scenario suite on a GPU, the builtins
//! compiled by NVRTC (no GPU needed), the
//! missing-driver path, and (feature `cudarc`) a cudarc context handed over.
//!
//! Without a driver the suite prints `SKIP:` and why, unless `CAPTURE_REQUIRE_CUDA=1`
//! (the GPU bundle's `run.sh` sets it: `cargo xtask gpu-bundle`): then it fails. Without
//! NVRTC the compile test skips unless `CAPTURE_REQUIRE_NVRTC=1` (the README's test
//! command sets it after installing NVRTC from PyPI).

mod branches;
mod conditional_model;
mod driver_model;
mod support;

mod cuda {
    capture_suite::suite!(
        fallible: crate::support::backend(),
        after: |_: &capture_cuda::CudaBackend| {}
    );
}

mod gpu;
mod launch_model;
mod loop_setter;
mod loops;
mod model;
mod model_paths;
mod nvrtc;
#[cfg(feature = "cudarc")]
mod shared_context;
mod unavailable;
