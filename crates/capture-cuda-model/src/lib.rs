//! The CUDA driver model's kernel library: what runs when the model (`driver/model.c`,
//! a stand-in for `libcuda.so.1`) executes a kernel. Every kernel the library's tests
//! and examples launch on CUDA has a host implementation here, found by its entry
//! point's name, reusing the mock's where one exists; the decoder's kernels are the
//! decoder's own kernel library (capture-decode's `examples/cuda_model_kernels.rs`,
//! built on this crate's glue as a dev-dependency), which the model asks after this one
//! (`CAPTURE_CUDA_MODEL_KERNELS` is a colon-separated list):
//!
//! - the builtins (`fill`, `add_scalar`, …): the mock's implementations;
//! - the CUDA example's `square_plus`;
//! - in the parameter-list form (each buffer one pointer, scalars by value, a block and
//!   dynamic shared memory per launch, handed over as each parameter's bytes:
//!   `find_params`): capture-cuda's launch-model kernels (`block_sum`, `scale`) and the
//!   engine example's (`engine_affine`, `engine_gemv`, `engine_temperature`).
//!
//! The model hands a kernel its parameter buffer as the module image lays it out; the
//! pairs-form kernels take each buffer as a pointer and its length in bytes, then a
//! pointer to the info words; every kernel checks every range against the
//! model's live allocations, runs on copies of the buffers and writes back the ones it
//! changed. A kernel library is a cdylib exporting `capture_model_run`, which calls
//! [`serve`] with its [`Library`]: this crate's is `examples/kernels.rs` (over
//! [`KERNELS`]); the symbol is not in this crate's lib, so a second library links it.

mod kernels;
mod raw;

pub use kernels::{
    FlatMemory, HostKernel, Memory, ParamKernel, ParamLaunch, Range, extent, find, find_params,
    write_changes,
};
pub use raw::{KERNELS, Launch, Library, serve};
