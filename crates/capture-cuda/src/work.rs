//! `CudaWork`: the user's own work inside the rules on CUDA, such as a cuBLAS, cuBLASLt,
//! NCCL or flash-attention call, or a launch of a kernel of the user's own: a closure
//! the backend calls on the caller's thread, with the context current, given the raw
//! stream (capturing, inside a window) and each declared range's device address. The
//! core treats it as a launch over those ranges (`Device::foreign_work`).
//!
//! What the closure touches cannot be checked, so making one is `unsafe`: its
//! `# Safety` list is the contract.

use std::any::Any;
use std::borrow::Cow;
use std::ffi::c_void;
use std::fmt;
use std::sync::Arc;

use capture_core::Access;

/// One declared range, as the user's work sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaRange {
    /// Its device address (a `CUdeviceptr`), the start of the range.
    pub ptr: u64,
    /// Its length in bytes.
    pub bytes: u64,
    /// What the work may do to it.
    pub access: Access,
}

/// What the user's work is called with: the stream to enqueue on and the declared
/// ranges, in argument order.
pub struct CudaWorkCall<'a> {
    pub(crate) stream: usize,
    pub(crate) ranges: &'a [CudaRange],
}

impl CudaWorkCall<'_> {
    /// The raw `CUstream` to enqueue on (a library's `*SetStream`). Inside a window it
    /// is capturing: what is enqueued on it is recorded into the graph.
    pub fn stream(&self) -> *mut c_void {
        self.stream as *mut c_void
    }

    /// The declared ranges, in argument order.
    pub fn ranges(&self) -> &[CudaRange] {
        self.ranges
    }
}

impl fmt::Debug for CudaWorkCall<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaWorkCall")
            .field("stream", &format_args!("{:#x}", self.stream))
            .field("ranges", &self.ranges)
            .finish()
    }
}

type Body = dyn Fn(&CudaWorkCall<'_>) -> Result<(), String> + Send + Sync;

/// The user's own work on CUDA (`Device::foreign_work`'s work): a named closure and the
/// objects it references, which the device (and each graph that records it) keeps until
/// its last run's fence.
#[derive(Clone)]
pub struct CudaWork {
    name: Cow<'static, str>,
    body: Arc<Body>,
    keep: Vec<Arc<dyn Any + Send + Sync>>,
}

impl CudaWork {
    /// Work named `name` (in traces and errors) running `body`, which enqueues on
    /// `call.stream()` over `call.ranges()`. An `Err` fails the work: outside a window
    /// its outputs are claimed with it, inside one it dooms the window.
    ///
    /// # Safety
    ///
    /// Each time `body` runs, the caller guarantees that what it enqueues:
    /// - touches only the declared ranges (`call.ranges()`), each only as its `access`
    ///   allows;
    /// - goes only to `call.stream()`, and synchronises nothing with the host (no
    ///   `cuStreamSynchronize`, `cuCtxSynchronize`, event query or synchronous copy):
    ///   inside a window that would break the capture;
    /// - allocates and frees no device or host memory while a window may be open: a
    ///   library's workspace is set to a declared buffer first (cuBLAS:
    ///   `cublasSetWorkspace` over a range declared read-write), so the graph owns it;
    /// - references only objects that live as long as the work: handles it uses (a
    ///   cuBLAS handle, a module) are either the caller's for the device's life or
    ///   handed to [`keep`](Self::keep).
    // SAFETY: the contract is the list above; building the value does nothing unsafe,
    // the backend calls `body` only as `Device::foreign_work` documents.
    pub unsafe fn new(
        name: impl Into<Cow<'static, str>>,
        body: impl Fn(&CudaWorkCall<'_>) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.into(),
            body: Arc::new(body),
            keep: Vec::new(),
        }
    }

    /// The same work, also keeping `object` (a library handle, a module) alive for as
    /// long as the device or a graph may still run the work.
    pub fn keep(mut self, object: Arc<dyn Any + Send + Sync>) -> Self {
        self.keep.push(object);
        self
    }

    /// Its name.
    pub fn name(&self) -> Cow<'static, str> {
        self.name.clone()
    }

    pub(crate) fn call(&self, stream: usize, ranges: &[CudaRange]) -> Result<(), String> {
        (self.body)(&CudaWorkCall { stream, ranges })
    }
}

impl fmt::Debug for CudaWork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CudaWork({}, keeps {})", self.name, self.keep.len())
    }
}
