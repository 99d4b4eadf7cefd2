//! Opening the backend for tests: `SKIP:` without a driver unless required.

use capture_cuda::CudaBackend;

fn required(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| v == "1")
}

/// Whether the environment requires CUDA (a missing driver then fails the tests).
pub(crate) fn cuda_required() -> bool {
    required("CAPTURE_REQUIRE_CUDA")
}

/// Whether the environment requires NVRTC.
pub(crate) fn nvrtc_required() -> bool {
    required("CAPTURE_REQUIRE_NVRTC")
}

/// Device 0, or why it cannot be had.
pub(crate) fn backend() -> Result<CudaBackend, String> {
    match CudaBackend::new(0) {
        Ok(b) => {
            let (major, minor) = b.compute_capability();
            println!(
                "cuda device: {} (compute {major}.{minor}), driver CUDA {}",
                b.device_name(),
                b.driver_version()
            );
            Ok(b)
        }
        Err(e) if cuda_required() => panic!("CAPTURE_REQUIRE_CUDA=1 and {e}"),
        Err(e) => Err(e.to_string()),
    }
}
