//! Errors of the Vulkan backend: why Vulkan is unavailable, and native result codes
//! turned into the core's errors.

use ash::vk;
use capture_core::ServerError;

pub use capture_core::error::Unavailable;

/// This backend's [`Unavailable`], saying `why`.
pub(crate) fn unavailable(why: impl Into<String>) -> Unavailable {
    Unavailable::new("Vulkan", why)
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
