//! capture-decode: a llama-shaped decoder with seeded random weights, its decode step
//! captured once and replayed per token with the loop on the device: the workload of
//! the `capture decode` command, `capture bench`'s decoder rows and the decoder tests,
//! written as an engine author writes one, through `capture-graphs`' public API alone.
//!
//! - The model ([`model`], [`weights`]): embedding gather; per layer RMSNorm, Q/K/V
//!   projections, rotary embedding at the current position, K and V into a KV-cache
//!   row, attention over rows `0..=position`, output projection and residual, RMSNorm,
//!   a SwiGLU feed-forward and residual; final norm, logits, argmax.
//! - The position and the token live in a 16-byte state buffer: the argmax kernel
//!   writes the next token and advances the position, so T tokens are T replays with
//!   no host read until the end; every step's logits and id go into history buffers
//!   at the step's row, read once.
//! - Twelve kernels per backend, registered through the public user-kernel API
//!   ([`DecodeBackend`]): Rust functions for the mock, WGSL compiled by naga for
//!   Vulkan, CUDA C shipped as NVRTC-built PTX for CUDA.
//! - A plain-Rust reference ([`host`]) judges every backend within [`TOLERANCE`].
//!
//! ```
//! # #[cfg(feature = "mock")]
//! # fn main() -> capture_graphs::Result<()> {
//! use capture_decode::{Config, DecodeOptions, run};
//! let options = DecodeOptions {
//!     config: Config { dim: 32, layers: 1, heads: 2, vocab: 64, context: 16 },
//!     tokens: 4,
//!     ..DecodeOptions::default()
//! };
//! let report = run(capture_graphs::mock::MockBackend::new(), options)?;
//! assert!(report.passed(), "{}", capture_decode::render(&report));
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "mock"))]
//! # fn main() {}
//! ```

// Unsafe code only in `cublas` (the cuBLAS FFI and its foreign work) and `cpu_time`
// (the thread's CPU clock), which allow it; each block there has a `// SAFETY:` line.
#![deny(unsafe_code)]

pub mod backend;
pub mod cpu_time;
#[cfg(feature = "cuda")]
#[allow(unsafe_code)]
pub mod cublas;
pub mod host;
#[cfg(feature = "cuda")]
pub mod kernels_cuda;
#[cfg(feature = "mock")]
mod kernels_mock;
#[cfg(feature = "vulkan")]
pub mod kernels_wgsl;
pub mod ladder;
mod mode;
pub mod model;
mod report;
mod run;
mod step;
mod until;
pub mod weights;

pub use backend::{DecodeBackend, GemmLibrary};
pub use ladder::{LadderOptions, LadderReport, render_ladder, run_ladder};
pub use mode::Mode;
pub use model::{Config, Kernel};
pub use report::render;
pub use run::{
    Check, DecodeOptions, DecodeReport, Generation, HostCheck, TOLERANCE, host_check, run,
};
pub use run::{collect, prefill, record};
pub use step::{ATTENTION_SLOT, DeviceModel, Footprint, POSITION_SLOT};
pub use until::{UNTIL_MODES, UntilMode, UntilOptions, UntilReport, render_until, run_until};
pub use weights::Weights;
