//! The CUDA driver model's kernel library for the library's own runs (capture-cuda's
//! tests, the facade's examples): a cdylib exporting `capture_model_run` over this
//! crate's kernels (`KERNELS`). The symbol lives here, not in the crate's lib, so that
//! another kernel library (the decoder's, capture-decode's `cuda_model_kernels`) can link the crate's glue without defining it
//! twice.

use std::ffi::{c_char, c_int};

use capture_cuda_model::{KERNELS, Launch, serve};

/// `driver/model.h`'s `capture_model_run` over this crate's kernels.
///
/// # Safety
///
/// The driver model's contract (`serve`'s): `launch` valid for the call, `error` at
/// `error_len` writable bytes.
// SAFETY: the contract is `serve`'s, which the driver model keeps.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn capture_model_run(
    launch: *const Launch,
    error: *mut c_char,
    error_len: usize,
) -> c_int {
    // SAFETY: the caller's contract, passed on unchanged.
    unsafe { serve(launch, error, error_len, &KERNELS) }
}
