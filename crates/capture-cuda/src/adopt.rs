//! A context (and stream) of the caller's handed over: [`CudaBackend::from_raw_context`]
//! and, with the `cudarc` feature, [`CudaBackend::from_cudarc`] and
//! [`CudaBackend::from_cudarc_stream`]. They are `unsafe fn`s (the caller vouches for
//! handles the driver cannot check), so they live beside `raw.rs` as the only other
//! place of the crate with unsafe code; what the driver can check, `raw::external`
//! checks.

use std::ffi::c_void;

use crate::driver::CudaBackend;
use crate::error::Unavailable;
use crate::gpu::{Gpu, Keep, driver_present};
use crate::raw;

impl CudaBackend {
    /// Runs the backend in a CUDA context the caller owns, instead of retaining the
    /// device's primary context as [`CudaBackend::new`] does; with `stream`, pooled
    /// stream 0 of a `Device` built over the backend runs on that stream of the
    /// caller's (while no other pooled stream holds it: the first `Device`'s, or a later
    /// one's once that one is gone), every other pooled stream on one of the backend's
    /// own.
    ///
    /// The backend never retains, releases, destroys, pushes or pops the context: each
    /// call makes it current on the calling thread and puts the caller's current context
    /// back, as with its own. It destroys only what it made in it (streams, events,
    /// memory, modules, graphs), and never the lent stream, which it finishes
    /// (`cuStreamSynchronize`) when the pooled stream on it is dropped. Every backend on
    /// one context (this one handed over twice, or a primary context also retained by
    /// [`CudaBackend::new`]) shares one capture domain, so the core's relaxed-mode guards
    /// see each other's windows.
    ///
    /// Nothing calls into the driver before the driver library is known to load.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] saying why: no driver library, the driver refused to start, a null
    /// context or one that cannot be made current, a device the driver does not list;
    /// for `stream`, a default stream (legacy or per-thread), a stream of another
    /// context, a blocking stream (one that waits for the legacy default stream), a
    /// stream that is capturing.
    ///
    /// # Safety
    ///
    /// From the call until the backend's last handle is gone (every clone, every
    /// `Device` over one, with its buffers, kernels and graphs), the caller guarantees:
    ///
    /// - `context` is a valid context of the NVIDIA driver this process has loaded (the
    ///   one `libcuda.so.1` names), and stays alive: the caller neither destroys it
    ///   (`cuCtxDestroy`, the last `cuDevicePrimaryCtxRelease` of a primary context) nor
    ///   resets it (`cuDevicePrimaryCtxReset`), which would free what the backend made;
    /// - `stream`, if given, is a valid stream (or a default stream's handle), and stays
    ///   alive; while a pooled stream runs on it, the caller enqueues nothing on it (no
    ///   launch, copy, memset, free, event record or event wait, of its own or of a
    ///   library's on its behalf), and neither synchronises it nor begins or ends a
    ///   capture on it: the core counts on the stream's queue holding its work alone,
    ///   and a capture would record the caller's work into the backend's graph.
    ///
    /// The caller's own work in the context, on its own streams, is not constrained;
    /// as CUDA's relaxed capture mode allows, it may run while a window records (a
    /// context-wide `cuCtxSynchronize` then fails the capture, which the core reports as
    /// the window's error).
    // SAFETY: the contract is the `# Safety` list above, which is `external`'s.
    pub unsafe fn from_raw_context(
        context: *mut c_void,
        stream: Option<*mut c_void>,
    ) -> Result<Self, Unavailable> {
        // SAFETY: the caller's guarantees are `adopt`'s; nothing is kept alive for it.
        unsafe { Self::adopt(context as usize, stream.map(|s| s as usize), None) }
    }

    /// [`CudaBackend::from_raw_context`] keeping `keep` (what keeps the context and the
    /// stream alive) until the backend's last handle is gone.
    ///
    /// # Safety
    ///
    /// [`CudaBackend::from_raw_context`]'s.
    // SAFETY: the contract is that list.
    unsafe fn adopt(
        context: usize,
        stream: Option<usize>,
        keep: Option<Keep>,
    ) -> Result<Self, Unavailable> {
        driver_present()?;
        // SAFETY: the driver loads (checked above), and the caller guarantees the context
        // and the stream are live objects of it.
        let opened = unsafe { raw::external(context, stream) }?;
        Ok(Self {
            gpu: Gpu::callers(opened, stream, keep),
            shape: std::sync::Arc::default(),
        })
    }

    /// Runs the backend in cudarc's context `context`, shared rather than retained again:
    /// [`CudaBackend::from_raw_context`] over `context.cu_ctx()`, lending no stream,
    /// keeping the `Arc` until the backend's last handle is gone (so cudarc releases the
    /// context only after everything the backend made in it). Safe, as cudarc keeps its
    /// context alive while an `Arc` of it lives, and destroys or resets it only then.
    ///
    /// # Errors
    ///
    /// As [`CudaBackend::from_raw_context`]: no driver library for this crate's loader
    /// (checked before any driver call), a context the driver refuses.
    #[cfg(feature = "cudarc")]
    pub fn from_cudarc(
        context: std::sync::Arc<cudarc::driver::CudaContext>,
    ) -> Result<Self, Unavailable> {
        let raw = context.cu_ctx() as usize;
        // SAFETY: a `CudaContext` is a live context of the process's NVIDIA driver (cudarc
        // and this crate load the same `libcuda`), alive while the `Arc` kept here lives;
        // no stream is lent.
        unsafe { Self::adopt(raw, None, Some(Box::new(context))) }
    }

    /// As [`CudaBackend::from_cudarc`] over `stream.context()`, also lending `stream`
    /// to pooled stream 0 (see [`CudaBackend::from_raw_context`]); both `Arc`s are kept
    /// until the backend's last handle is gone. Hand over a stream made for it
    /// (`CudaContext::new_stream`, which is non-blocking), not one the runtime's own
    /// slices live on: cudarc records events on a slice's stream when the slice is used
    /// and frees it there when it drops.
    ///
    /// # Errors
    ///
    /// As [`CudaBackend::from_raw_context`], the stream's refusals included.
    ///
    /// # Safety
    ///
    /// The stream item of [`CudaBackend::from_raw_context`]'s list: while a pooled
    /// stream runs on `stream`, the caller enqueues nothing on it, through cudarc or
    /// otherwise, and neither synchronises it nor captures on it.
    #[cfg(feature = "cudarc")]
    // SAFETY: the contract is the `# Safety` list above.
    pub unsafe fn from_cudarc_stream(
        stream: std::sync::Arc<cudarc::driver::CudaStream>,
    ) -> Result<Self, Unavailable> {
        let context = std::sync::Arc::clone(stream.context());
        let raw = (context.cu_ctx() as usize, stream.cu_stream() as usize);
        // SAFETY: as in `from_cudarc` for the context; the stream is a live stream (or
        // default stream handle) of it, alive while the `Arc` kept here lives, and the
        // caller guarantees the rest of the stream's item.
        unsafe { Self::adopt(raw.0, Some(raw.1), Some(Box::new((context, stream)))) }
    }
}
