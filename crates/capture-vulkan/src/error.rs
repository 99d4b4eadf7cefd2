//! Errors of the Vulkan backend: why Vulkan is unavailable, and native result codes
//! turned into the core's errors.

use ash::vk;
use capture_core::ServerError;

/// Vulkan cannot be used here: no loader, no driver, no device with what the backend
/// needs (Vulkan ≥ 1.2, a compute queue, timeline semaphores).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("Vulkan unavailable: {why}")]
pub struct Unavailable {
    why: String,
}

impl Unavailable {
    pub(crate) fn new(why: impl Into<String>) -> Self {
        Self { why: why.into() }
    }

    /// Why Vulkan cannot be used.
    pub fn why(&self) -> &str {
        &self.why
    }
}

impl From<Unavailable> for ServerError {
    fn from(u: Unavailable) -> Self {
        ServerError::driver("open Vulkan", u)
    }
}

/// A native Vulkan result code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct VkResult(pub vk::Result);

/// The core's error for a failed Vulkan call: out-of-memory codes become
/// [`ServerError::OutOfMemory`]-worthy driver errors naming the call; every other code
/// is a driver error carrying the code.
pub(crate) fn vk_error(op: &'static str, result: vk::Result) -> ServerError {
    ServerError::driver(op, VkResult(result))
}
