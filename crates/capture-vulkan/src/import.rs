//! `VulkanExternal`: a range of a `VkBuffer` the caller owns, imported as a `Buffer`
//! (`Device::import`). Making one is `unsafe` (the driver cannot say whose buffer it is,
//! or for how long), so it lives in a file of its own beside the FFI.

use ash::vk;

/// A range of a `VkBuffer` the caller owns (its weights, a KV cache): what
/// `Device::import` takes on Vulkan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VulkanExternal {
    pub(crate) buffer: vk::Buffer,
    pub(crate) offset: u64,
    pub(crate) size: u64,
}

impl VulkanExternal {
    /// `size` bytes of `buffer` at `offset`.
    ///
    /// # Safety
    ///
    /// The caller guarantees that:
    /// - `buffer` is a buffer of the logical device the importing device runs on, bound
    ///   to memory, created with `STORAGE_BUFFER`, `TRANSFER_SRC` and `TRANSFER_DST`
    ///   usage, and `[offset, offset + size)` lies inside it with `offset` a multiple of
    ///   the device's `minStorageBufferOffsetAlignment`;
    /// - it stays alive and bound, and the caller writes it through no other path while
    ///   the library may use it: until every graph that recorded a launch over it is
    ///   dropped and the streams that used it have been synchronised (the library never
    ///   destroys it);
    /// - the caller's own writes to it are finished (waited for) before the library reads
    ///   it, and declared with `Device::assume_written`.
    // SAFETY: the contract is the list above; the value only carries the handle.
    pub unsafe fn new(buffer: vk::Buffer, offset: u64, size: u64) -> Self {
        Self {
            buffer,
            offset,
            size,
        }
    }
}
