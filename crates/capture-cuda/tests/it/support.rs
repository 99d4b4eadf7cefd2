//! Opening CUDA for tests. Every test opens its device through here, holding the suite
//! lock while it uses it: every `CudaBackend` in the process shares one primary context
//! and one capture domain, so one test's open window would make another's kernel load or
//! page release refuse (or, on a GPU, break its capture). tidy refuses
//! `CudaBackend::new` in capture-cuda's tests outside this file.
//!
//! Without a driver a test says `SKIP:` and why, unless `CAPTURE_REQUIRE_CUDA=1`. The CUDA
//! driver model (`crates/capture-cuda-model`) is accepted only where it is expected
//! (`CAPTURE_CUDA_MODEL=1`, set by the test command's `cuda-model` row); found anywhere
//! else it fails the test, so nothing run on it passes for a GPU.

#![allow(dead_code)]

use std::sync::MutexGuard;

use capture_cuda::{CudaBackend, Unavailable};
use capture_suite::scenarios::suite_lock;

/// The device name the driver model gives itself.
pub(crate) const MODEL_NAME: &str = "capture CUDA driver model (not a GPU)";

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

/// Whether the driver model is the driver expected here.
pub(crate) fn model_expected() -> bool {
    required("CAPTURE_CUDA_MODEL")
}

/// Whether `backend` runs on the driver model.
pub(crate) fn on_model(backend: &CudaBackend) -> bool {
    backend.device_name() == MODEL_NAME
}

/// Fails when the driver found is not the one expected: the model where a GPU is meant,
/// or a GPU where the model is.
fn check_driver(backend: &CudaBackend) {
    match (on_model(backend), model_expected()) {
        (true, false) => panic!(
            "the CUDA driver found is the driver model ({MODEL_NAME}), not a GPU's: \
             take target/cuda-model off LD_LIBRARY_PATH, or set CAPTURE_CUDA_MODEL=1 if \
             the model is meant"
        ),
        (false, true) => panic!(
            "CAPTURE_CUDA_MODEL=1 but the CUDA driver found is {}'s, not the model's",
            backend.device_name()
        ),
        _ => {}
    }
}

/// Device 0 for a caller that holds the suite lock already (the scenario suite, whose
/// `check_fallible` takes it), or why it cannot be had.
pub(crate) fn backend() -> Result<CudaBackend, String> {
    match CudaBackend::new(0) {
        Ok(b) => {
            check_driver(&b);
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

/// Device 0 with the suite lock held for as long as the value lives.
pub(crate) struct Cuda {
    pub(crate) backend: CudaBackend,
    _suite: MutexGuard<'static, ()>,
}

impl std::ops::Deref for Cuda {
    type Target = CudaBackend;

    fn deref(&self) -> &CudaBackend {
        &self.backend
    }
}

/// Device 0 under the suite lock, or `None` after a `SKIP:` line naming `test`.
pub(crate) fn open(test: &str) -> Option<Cuda> {
    let suite = suite_lock();
    match backend() {
        Ok(backend) => Some(Cuda {
            backend,
            _suite: suite,
        }),
        Err(why) => {
            println!("SKIP: {test}: {why}");
            None
        }
    }
}

/// Another backend value on `cuda`'s device (a second `CudaBackend::new`), while `cuda`
/// holds the suite lock.
pub(crate) fn another(cuda: &Cuda) -> CudaBackend {
    CudaBackend::new(cuda.ordinal()).expect("the device opened once opens again")
}

/// `CudaBackend::new(ordinal)` as it comes, under the suite lock (for the typed errors
/// of a missing driver or device).
pub(crate) fn try_new(ordinal: i32) -> (MutexGuard<'static, ()>, Result<CudaBackend, Unavailable>) {
    let suite = suite_lock();
    let opened = CudaBackend::new(ordinal);
    if let Ok(b) = &opened {
        check_driver(b);
    }
    (suite, opened)
}
