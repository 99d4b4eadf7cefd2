//! The CUDA driver model's kernel library: what runs when the model (`driver/model.c`,
//! a stand-in for `libcuda.so.1`) executes a kernel. Every kernel capture's tests,
//! examples and program launch on CUDA has a host implementation here, found by its
//! entry point's name, reusing the mock's where one exists:
//!
//! - the builtins (`fill`, `add_scalar`, …): the mock's implementations;
//! - the decoder's (`decode_embed`, …): the mock decoder's kernels from `capture_cli`;
//! - the CUDA example's `square_plus`.
//!
//! The model hands a kernel its parameter buffer as the module image lays it out; every
//! kernel here takes CUDA's form of capture's launches (each buffer a pointer and its
//! length in bytes, then a pointer to the info words), checks every range against the
//! model's live allocations, runs on copies of the buffers and writes back the ones it
//! changed. The one exported symbol, `capture_model_run`, is in `raw.rs`.

mod kernels;
mod raw;

pub use kernels::{HostKernel, find};
pub use raw::{Launch, capture_model_run};
