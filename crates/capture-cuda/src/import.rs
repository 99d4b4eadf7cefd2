//! `CudaExternal`: device memory the caller owns, imported as a `Buffer`
//! (`Device::import`). Making one is `unsafe` (the driver cannot say whose memory an
//! address is, or for how long), so it lives in a file of its own beside the FFI.

/// Device memory the caller owns (its engine's weights, a KV cache cudarc allocated):
/// what `Device::import` takes on CUDA. Making one is `unsafe`: the driver cannot say
/// whose memory an address is, or for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaExternal {
    pub(crate) ptr: u64,
    pub(crate) bytes: u64,
}

impl CudaExternal {
    /// The `bytes` bytes of device memory at `ptr` (a `CUdeviceptr`).
    ///
    /// # Safety
    ///
    /// The caller guarantees that:
    /// - `[ptr, ptr + bytes)` is device memory of the context the importing device runs
    ///   in (or accessible from it), allocated by the caller, 16-byte aligned;
    /// - it stays allocated, and the caller writes it through no other path while the
    ///   library may use it: until every graph that recorded a launch over it is dropped
    ///   and the streams that used it have been synchronised (the library never frees it,
    ///   and keeps no use of it past those);
    /// - the caller's own writes to it are finished (synchronised) before the library
    ///   reads it, and declared with `Device::assume_written`.
    // SAFETY: the contract is the list above; the value only carries the address.
    pub unsafe fn new(ptr: u64, bytes: u64) -> Self {
        Self { ptr, bytes }
    }

    /// The memory of cudarc's `slice`, as [`new`](Self::new) takes it.
    ///
    /// # Safety
    ///
    /// As [`new`](Self::new): the slice outlives every use the library makes of it
    /// (keep it until the graphs over it are dropped and the streams synchronised), and
    /// the caller does not write it through cudarc while the library may use it.
    #[cfg(feature = "cudarc")]
    // SAFETY: the contract is the list above, handed on to `new`.
    pub unsafe fn from_cudarc<T>(
        slice: &cudarc::driver::CudaSlice<T>,
        stream: &cudarc::driver::CudaStream,
    ) -> Self {
        use cudarc::driver::DevicePtr;
        let (ptr, _guard) = slice.device_ptr(stream);
        let bytes = (slice.len() * std::mem::size_of::<T>()) as u64;
        // SAFETY: the caller's contract, as `new`'s.
        unsafe { Self::new(ptr, bytes) }
    }
}
