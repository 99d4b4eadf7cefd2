//! capture: graph capture of GPU compute streams. The facade over `capture-core` and the
//! backends.
//!
//! Features (pick-a-backend, additive):
//! - `mock` (default): the deterministic mock backend, CI's backend.
//! - `vulkan`: the Vulkan backend (ash, loaded at run time).
//! - `cuda`: the CUDA backend (cudarc, loaded at run time).
//!
//! Today the core, the mock and the Vulkan backend exist; the CUDA backend compiles empty
//! until its issue lands.

#![forbid(unsafe_code)]

pub use capture_core as core;
#[cfg(feature = "cuda")]
pub use capture_cuda as cuda;
#[cfg(feature = "mock")]
pub use capture_mock as mock;
#[cfg(feature = "vulkan")]
pub use capture_vulkan as vulkan;
