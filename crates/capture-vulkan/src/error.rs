//! Errors of the Vulkan backend: why Vulkan is unavailable, and native result codes
//! turned into the core's errors.

use ash::vk;
use capture_core::{MemoryKind, OutOfMemory, PoolKind, PoolName, ServerError};

pub use capture_core::Unavailable;

/// This backend's [`Unavailable`], saying `why`.
pub(crate) fn unavailable(why: impl Into<String>) -> Unavailable {
    Unavailable::new("Vulkan", why)
}

/// A native Vulkan result code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct VulkanError(pub vk::Result);

/// What the user's own work said when it failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct VulkanMessage(pub String);

/// The core's error for a failed Vulkan call: a driver error naming the call and
/// carrying the code.
pub(crate) fn vk_error(op: &'static str, result: vk::Result) -> ServerError {
    ServerError::driver(op, VulkanError(result))
}

/// A page allocation's failure: the out-of-memory codes
/// (`VK_ERROR_OUT_OF_DEVICE_MEMORY`, `VK_ERROR_OUT_OF_HOST_MEMORY`, and
/// `VK_ERROR_TOO_MANY_OBJECTS` for the device's allocation-count limit) become
/// [`ServerError::OutOfMemory`] for `size` bytes of `kind` memory (the memory manager
/// fills in the pool and every pool's figures); any other error stays as it was.
pub(crate) fn out_of_memory(error: ServerError, size: u64, kind: MemoryKind) -> ServerError {
    let code = match &error {
        ServerError::Driver { source, .. } => source
            .downcast_ref::<VulkanError>()
            .map(|VulkanError(code)| *code),
        _ => None,
    };
    match code {
        Some(
            code @ (vk::Result::ERROR_OUT_OF_DEVICE_MEMORY
            | vk::Result::ERROR_OUT_OF_HOST_MEMORY
            | vk::Result::ERROR_TOO_MANY_OBJECTS),
        ) => ServerError::OutOfMemory(Box::new(OutOfMemory {
            requested: size,
            pool: PoolName {
                memory: kind,
                pool: PoolKind::Dynamic,
            },
            reason: format!("{error}: {code}").into(),
            pools: Vec::new(),
            graphs: Vec::new(),
        })),
        _ => error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_memory_codes_become_out_of_memory() {
        for code in [
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
            vk::Result::ERROR_OUT_OF_HOST_MEMORY,
            vk::Result::ERROR_TOO_MANY_OBJECTS,
        ] {
            let e = out_of_memory(vk_error("vkAllocateMemory", code), 4096, MemoryKind::Device);
            match e {
                ServerError::OutOfMemory(oom) => {
                    assert_eq!(oom.requested, 4096);
                    assert!(oom.reason.contains("vkAllocateMemory"), "{}", oom.reason);
                }
                other => panic!("{code}: {other:?}"),
            }
        }
        let other = out_of_memory(
            vk_error("vkCreateBuffer", vk::Result::ERROR_INITIALIZATION_FAILED),
            1,
            MemoryKind::Host,
        );
        assert!(matches!(other, ServerError::Driver { .. }), "{other:?}");
    }
}
