//! The CUDA driver model's kernel library: what runs when the model (`driver/model.c`,
//! a stand-in for `libcuda.so.1`) executes a kernel. Every kernel capture's tests,
//! examples and program launch on CUDA has a host implementation here, found by its
//! entry point's name, reusing the mock's where one exists:
//!
//! - the builtins (`fill`, `add_scalar`, …): the mock's implementations;
//! - the CUDA example's `square_plus`;
//! - in the parameter-list form (each buffer one pointer, scalars by value, a block and
//!   dynamic shared memory per launch, handed over as each parameter's bytes:
//!   `find_params`): capture-cuda's launch-model kernels (`block_sum`, `scale`), the
//!   engine example's (`engine_affine`, `engine_gemv`, `engine_temperature`) and the
//!   decoder's (`decode_embed`, …), which run the mock decoder's functions from
//!   `capture_cli` over each buffer from its pointer to the end of its allocation,
//!   after checking the parameters and a reduction's block and shared memory.
//!
//! The model hands a kernel its parameter buffer as the module image lays it out; the
//! pairs-form kernels take each buffer as a pointer and its length in bytes, then a
//! pointer to the info words; every kernel checks every range against the
//! model's live allocations, runs on copies of the buffers and writes back the ones it
//! changed. The one exported symbol, `capture_model_run`, is in `raw.rs`.

mod kernels;
mod raw;

pub use kernels::{HostKernel, Memory, ParamKernel, ParamLaunch, Range, find, find_params};
pub use raw::{Launch, capture_model_run};
