//! The only module that calls the CUDA driver (and NVRTC). Every `unsafe` block carries a
//! `// SAFETY:` line. Handles travel as integers outside this module.
//!
//! The driver is bound here, not through generated bindings: every entry point returns a
//! plain `c_int` and every out-value the driver writes as a C enum is read as an integer,
//! so a result code or node type newer than this crate (CUDA 13 added codes 12.9's
//! bindings lack) is a number to report, never an out-of-range Rust enum.
//!
//! Facts the rest of the crate guarantees (and these functions rely on):
//! - nothing here is called before [`present`] said the driver library loads;
//! - every call that needs a context runs inside [`Current::enter`] for the device's
//!   retained primary context, from whatever thread the core calls on (relaxed-mode
//!   capture: any thread may begin, record into and end a capture);
//! - objects are destroyed only once no pending work uses them (the core frees behind
//!   events through its drop queue).

use std::borrow::Cow;
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

use capture_core::PoolName;
use capture_core::ServerError;
use libloading::Library;

use crate::error::{CudaError, Unavailable, cu_error, out_of_memory, unavailable};

type Handle = *mut c_void;

/// Declares the driver entry points this crate calls, each returning the raw `CUresult`.
macro_rules! driver_api {
    ($($name:ident($($arg:ty),*);)*) => {
        #[allow(non_snake_case)]
        struct Api {
            // SAFETY: function-pointer types only; each call below says why it is sound.
            $($name: unsafe extern "C" fn($($arg),*) -> c_int,)*
            // SAFETY: as above.
            cuFuncGetParamInfo: Option<unsafe extern "C" fn(Handle, usize, *mut usize, *mut usize) -> c_int>,
            // SAFETY: as above.
            cuGetErrorName: Option<unsafe extern "C" fn(c_int, *mut *const c_char) -> c_int>,
            // SAFETY: as above.
            cuGraphGetEdges_v2: Option<
                unsafe extern "C" fn(Handle, *mut Handle, *mut Handle, *mut EdgeData, *mut usize) -> c_int,
            >,
            // SAFETY: as above.
            cuGraphAddNode: Option<
                unsafe extern "C" fn(*mut Handle, Handle, *const Handle, usize, *mut GraphNodeParams) -> c_int,
            >,
            // SAFETY: as above.
            cuGraphConditionalHandleCreate: Option<
                unsafe extern "C" fn(*mut u64, Handle, Handle, c_uint, c_uint) -> c_int,
            >,
        }

        impl Api {
            fn load(lib: &'static Library) -> Result<Self, String> {
                Ok(Self {
                    $($name: {
                        // SAFETY: the symbol is the driver's entry point of that name, whose C
                        // signature is the one declared above (from cuda.h); the library is
                        // never unloaded (it lives in a static).
                        let symbol = unsafe {
                            lib.get::<unsafe extern "C" fn($($arg),*) -> c_int>(
                                concat!(stringify!($name), "\0").as_bytes(),
                            )
                        };
                        *symbol.map_err(|e| format!("the driver lacks {}: {e}", stringify!($name)))?
                    },)*
                    // SAFETY: as above; these two are optional (older drivers lack them).
                    cuFuncGetParamInfo: unsafe { lib.get(b"cuFuncGetParamInfo\0") }.ok().map(|s| *s),
                    // SAFETY: as above.
                    cuGetErrorName: unsafe { lib.get(b"cuGetErrorName\0") }.ok().map(|s| *s),
                    // SAFETY: as above (CUDA 12.3 and newer).
                    cuGraphGetEdges_v2: unsafe { lib.get(b"cuGraphGetEdges_v2\0") }.ok().map(|s| *s),
                    // SAFETY: as above (CUDA 12.2 and newer).
                    cuGraphAddNode: unsafe { lib.get(b"cuGraphAddNode\0") }.ok().map(|s| *s),
                    // SAFETY: as above (CUDA 12.3 and newer).
                    cuGraphConditionalHandleCreate: unsafe {
                        lib.get(b"cuGraphConditionalHandleCreate\0")
                    }
                    .ok()
                    .map(|s| *s),
                })
            }
        }
    };
}

driver_api! {
    cuInit(c_uint);
    cuDriverGetVersion(*mut c_int);
    cuDeviceGetCount(*mut c_int);
    cuDeviceGet(*mut c_int, c_int);
    cuDeviceGetName(*mut c_char, c_int, c_int);
    cuDeviceGetAttribute(*mut c_int, c_int, c_int);
    cuDevicePrimaryCtxRetain(*mut Handle, c_int);
    cuDevicePrimaryCtxRelease_v2(c_int);
    cuCtxGetCurrent(*mut Handle);
    cuCtxSetCurrent(Handle);
    cuCtxGetDevice(*mut c_int);
    cuStreamCreate(*mut Handle, c_uint);
    cuStreamGetFlags(Handle, *mut c_uint);
    cuStreamGetCtx(Handle, *mut Handle);
    cuStreamDestroy_v2(Handle);
    cuStreamSynchronize(Handle);
    cuStreamWaitEvent(Handle, Handle, c_uint);
    cuStreamBeginCapture_v2(Handle, c_uint);
    cuStreamEndCapture(Handle, *mut Handle);
    cuStreamIsCapturing(Handle, *mut c_uint);
    cuStreamGetCaptureInfo_v2(Handle, *mut c_uint, *mut u64, *mut Handle, *mut *const Handle, *mut usize);
    cuMemAlloc_v2(*mut u64, usize);
    cuMemFree_v2(u64);
    cuMemHostAlloc(*mut Handle, usize, c_uint);
    cuMemFreeHost(Handle);
    cuMemcpyHtoDAsync_v2(u64, *const c_void, usize, Handle);
    cuMemcpyDtoHAsync_v2(*mut c_void, u64, usize, Handle);
    cuEventCreate(*mut Handle, c_uint);
    cuEventRecord(Handle, Handle);
    cuEventSynchronize(Handle);
    cuEventDestroy_v2(Handle);
    cuModuleLoadData(*mut Handle, *const c_void);
    cuModuleGetFunction(*mut Handle, Handle, *const c_char);
    cuModuleUnload(Handle);
    cuLaunchKernel(Handle, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Handle, *mut *mut c_void, *mut *mut c_void);
    cuLaunchKernelEx(*const LaunchConfig, Handle, *mut *mut c_void, *mut *mut c_void);
    cuFuncSetAttribute(Handle, c_int, c_int);
    cuGraphGetNodes(Handle, *mut Handle, *mut usize);
    cuGraphNodeGetType(Handle, *mut c_uint);
    cuGraphInstantiateWithFlags(*mut Handle, Handle, u64);
    cuGraphExecKernelNodeSetParams_v2(Handle, Handle, *const KernelNodeParams);
    cuGraphCreate(*mut Handle, c_uint);
    cuGraphKernelNodeSetParams_v2(Handle, *const KernelNodeParams);
    cuGraphExecChildGraphNodeSetParams(Handle, Handle, Handle);
    cuGraphExecMemsetNodeSetParams(Handle, Handle, *const MemsetParams, Handle);
    cuGraphUpload(Handle, Handle);
    cuGraphLaunch(Handle, Handle);
    cuGraphExecDestroy(Handle);
    cuGraphDestroy(Handle);
}

/// Driver constants (cuda.h), as the integers the driver takes and returns.
mod consts {
    pub(super) const SUCCESS: i32 = 0;
    pub(super) const INVALID_VALUE: i32 = 1;
    pub(super) const STUB_LIBRARY: i32 = 34;
    pub(super) const NO_DEVICE: i32 = 100;
    pub(super) const ATTRIBUTE_MAX_THREADS_PER_BLOCK: i32 = 1;
    pub(super) const ATTRIBUTE_MAX_BLOCK_DIM_X: i32 = 2;
    pub(super) const ATTRIBUTE_MAX_BLOCK_DIM_Y: i32 = 3;
    pub(super) const ATTRIBUTE_MAX_BLOCK_DIM_Z: i32 = 4;
    pub(super) const ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: i32 = 97;
    pub(super) const FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: i32 = 8;
    pub(super) const ATTRIBUTE_COMPUTE_MAJOR: i32 = 75;
    pub(super) const ATTRIBUTE_COMPUTE_MINOR: i32 = 76;
    /// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION` (`CUlaunchAttributeID`).
    pub(super) const LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: i32 = 6;
    pub(super) const STREAM_NON_BLOCKING: u32 = 1;
    pub(super) const EVENT_BLOCKING_SYNC: u32 = 1;
    pub(super) const EVENT_DISABLE_TIMING: u32 = 2;
    pub(super) const CAPTURE_MODE_RELAXED: u32 = 2;
    pub(super) const CAPTURE_STATUS_NONE: u32 = 0;
    pub(super) const CAPTURE_STATUS_ACTIVE: u32 = 1;
    pub(super) const NODE_MEM_ALLOC: u32 = 10;
    pub(super) const NODE_MEM_FREE: u32 = 11;
    /// `CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC` (`CUgraphDependencyType`).
    pub(super) const DEPENDENCY_PROGRAMMATIC: u8 = 1;
    pub(super) const HOST_ALLOC_PORTABLE: u32 = 1;
    /// `CUgraphNodeType`: a kernel, a memset, a child graph, a conditional node.
    pub(super) const NODE_KERNEL: u32 = 0;
    pub(super) const NODE_MEMSET: u32 = 2;
    pub(super) const NODE_GRAPH: u32 = 4;
    pub(super) const NODE_CONDITIONAL: u32 = 13;
    /// `CU_GRAPH_COND_TYPE_WHILE` (`CUgraphConditionalNodeType`).
    pub(super) const COND_WHILE: i32 = 1;
    /// `CU_GRAPH_COND_ASSIGN_DEFAULT`: the default value is applied at each launch.
    pub(super) const COND_ASSIGN_DEFAULT: u32 = 1;
    /// `CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE`.
    pub(super) const CHILD_CLONE: i32 = 0;
}

/// The names the dynamic loader is asked for, in order: the driver's soname first (a
/// CUDA toolkit's `stubs/libcuda.so` has no `.so.1`), then the development link.
const DRIVER_NAMES: [&str; 2] = ["libcuda.so.1", "libcuda.so"];

static DRIVER: OnceLock<Result<(&'static Library, Api), String>> = OnceLock::new();

fn load_driver() -> &'static Result<(&'static Library, Api), String> {
    DRIVER.get_or_init(|| {
        let mut tried = Vec::new();
        for name in DRIVER_NAMES {
            // SAFETY: loading the NVIDIA driver library runs its initialisers, which have
            // no preconditions; the handle is kept for the process's life.
            match unsafe { Library::new(name) } {
                Ok(lib) => {
                    let lib: &'static Library = Box::leak(Box::new(lib));
                    return Api::load(lib).map(|api| (lib, api));
                }
                Err(e) => tried.push(format!("{name}: {e}")),
            }
        }
        Err(tried.join("; "))
    })
}

fn api() -> &'static Api {
    match load_driver() {
        Ok((_, api)) => api,
        Err(_) => unreachable!("the driver is called only after `present` said it loads"),
    }
}

fn check(op: &'static str, code: c_int) -> Result<(), ServerError> {
    match code {
        consts::SUCCESS => Ok(()),
        other => Err(cu_error(op, CudaError::new(other, error_name(other)))),
    }
}

/// The driver's name for result `code` (`CUDA_ERROR_…`), when the driver knows it.
pub(crate) fn error_name(code: i32) -> Option<Cow<'static, str>> {
    let f = match load_driver() {
        Ok((_, api)) => api.cuGetErrorName?,
        Err(_) => return None,
    };
    let mut name: *const c_char = std::ptr::null();
    // SAFETY: `name` is a valid out-pointer; the driver answers any integer (an unknown
    // one with CUDA_ERROR_INVALID_VALUE) and writes a pointer to a static string.
    if unsafe { f(code, &mut name) } != consts::SUCCESS || name.is_null() {
        return None;
    }
    // SAFETY: a NUL-terminated static string the driver owns.
    Some(Cow::Owned(
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned(),
    ))
}

/// Whether the driver library loads and has every entry point this crate calls; why not
/// otherwise.
pub(crate) fn present() -> Result<(), String> {
    load_driver().as_ref().map(|_| ()).map_err(Clone::clone)
}

/// The context current on this thread, made current by [`Current::enter`]; a caller's
/// other context is put back when the value drops.
pub(crate) struct Current {
    previous: Option<Handle>,
}

impl Current {
    /// Makes `context` current on the calling thread, unless it already is (one cheap
    /// `cuCtxGetCurrent`, a thread-local read in the driver). A thread that had no
    /// context keeps this one current afterwards, so its next call switches nothing;
    /// a thread whose caller had another context current gets that one back when the
    /// value drops.
    pub(crate) fn enter(context: usize) -> Result<Self, ServerError> {
        let mut current: Handle = std::ptr::null_mut();
        // SAFETY: `current` is a valid out-pointer.
        check("cuCtxGetCurrent", unsafe {
            (api().cuCtxGetCurrent)(&mut current)
        })?;
        if current as usize == context {
            return Ok(Self { previous: None });
        }
        // SAFETY: the context lives as long as the backend: retained by it, or the
        // caller's, kept alive by the caller (`CudaBackend::from_raw_context`'s contract).
        check("cuCtxSetCurrent", unsafe {
            (api().cuCtxSetCurrent)(context as Handle)
        })?;
        Ok(Self {
            previous: (!current.is_null()).then_some(current),
        })
    }
}

impl Drop for Current {
    fn drop(&mut self) {
        if let Some(previous) = self.previous.take() {
            // SAFETY: `previous` was current on this thread a moment ago; the caller
            // owns its life.
            let code = unsafe { (api().cuCtxSetCurrent)(previous) };
            if code != consts::SUCCESS {
                tracing::warn!(target: "capture", code, "restoring the caller's CUDA context failed");
            }
        }
    }
}

/// What the driver says about the device it opened.
#[derive(Clone, Debug)]
pub(crate) struct Opened {
    pub(crate) context: usize,
    pub(crate) device: i32,
    pub(crate) ordinal: i32,
    pub(crate) name: String,
    pub(crate) compute: (i32, i32),
    pub(crate) driver: i32,
    pub(crate) launch: LaunchAttrs,
}

/// What the device runs a launch with, as the driver reports it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LaunchAttrs {
    /// The most threads per block dimension.
    pub(crate) max_block: [u32; 3],
    /// The most threads per block.
    pub(crate) max_threads: u32,
    /// The most dynamic shared memory a block may opt into.
    pub(crate) max_shared: u32,
}

/// `Unavailable` for driver call `op` failing with `code`.
fn fail(op: &str, code: c_int) -> Unavailable {
    unavailable(format!(
        "{op} failed: {}",
        CudaError::new(code, error_name(code))
    ))
}

/// Initialises the driver (again, harmlessly, where a caller already did).
fn init() -> Result<(), Unavailable> {
    // SAFETY: `present()` was checked by the caller; cuInit takes no pointers.
    let code = unsafe { (api().cuInit)(0) };
    match code {
        consts::SUCCESS => Ok(()),
        consts::STUB_LIBRARY => Err(unavailable(
            "the libcuda.so the loader found is the CUDA toolkit's stub library \
             (CUDA_ERROR_STUB_LIBRARY), not an NVIDIA driver: remove the toolkit's \
             stubs directory from LD_LIBRARY_PATH",
        )),
        consts::NO_DEVICE => Err(unavailable("the driver found no CUDA device")),
        code => Err(fail("cuInit", code)),
    }
}

/// How many devices the driver lists.
fn device_count() -> Result<i32, Unavailable> {
    let mut count = 0;
    // SAFETY: `count` is a valid out-pointer.
    let code = unsafe { (api().cuDeviceGetCount)(&mut count) };
    if code != consts::SUCCESS {
        return Err(fail("cuDeviceGetCount", code));
    }
    Ok(count)
}

/// The device of `ordinal`, which is below the count.
fn device_of(ordinal: i32) -> Result<i32, Unavailable> {
    let mut device = 0;
    // SAFETY: `device` is a valid out-pointer; the ordinal is below the count.
    let code = unsafe { (api().cuDeviceGet)(&mut device, ordinal) };
    if code != consts::SUCCESS {
        return Err(fail("cuDeviceGet", code));
    }
    Ok(device)
}

/// Initialises the driver and retains device `ordinal`'s primary context.
pub(crate) fn open(ordinal: i32) -> Result<Opened, Unavailable> {
    init()?;
    let count = device_count()?;
    if ordinal < 0 || count <= ordinal {
        return Err(unavailable(format!(
            "no CUDA device {ordinal} ({count} found)"
        )));
    }
    let device = device_of(ordinal)?;
    let (name, compute, driver, launch) = describe(device)?;
    let mut context = std::ptr::null_mut();
    // SAFETY: `context` is a valid out-pointer; the device is valid.
    let code = unsafe { (api().cuDevicePrimaryCtxRetain)(&mut context, device) };
    if code != consts::SUCCESS {
        return Err(fail("cuDevicePrimaryCtxRetain", code));
    }
    Ok(Opened {
        context: context as usize,
        device,
        ordinal,
        name,
        compute,
        driver,
        launch,
    })
}

/// What the driver says of `device`: its name, its compute capability, and the CUDA
/// version the driver supports.
fn describe(device: i32) -> Result<(String, (i32, i32), i32, LaunchAttrs), Unavailable> {
    let api = api();
    let mut name = [0 as c_char; 256];
    // SAFETY: the buffer is 256 bytes long, as passed.
    let code = unsafe { (api.cuDeviceGetName)(name.as_mut_ptr(), 256, device) };
    let name = if code == consts::SUCCESS {
        // SAFETY: the driver wrote a NUL-terminated string into the buffer.
        unsafe { CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    } else {
        "unnamed device".into()
    };
    let attribute = |a: c_int| -> Result<i32, Unavailable> {
        let mut v = 0;
        // SAFETY: `v` is a valid out-pointer; the device is valid.
        let code = unsafe { (api.cuDeviceGetAttribute)(&mut v, a, device) };
        if code == consts::SUCCESS {
            Ok(v)
        } else {
            Err(fail("cuDeviceGetAttribute", code))
        }
    };
    let compute = (
        attribute(consts::ATTRIBUTE_COMPUTE_MAJOR)?,
        attribute(consts::ATTRIBUTE_COMPUTE_MINOR)?,
    );
    let positive = |a| attribute(a).map(|v| v.max(1) as u32);
    let launch = LaunchAttrs {
        max_block: [
            positive(consts::ATTRIBUTE_MAX_BLOCK_DIM_X)?,
            positive(consts::ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
            positive(consts::ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
        ],
        max_threads: positive(consts::ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        max_shared: attribute(consts::ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?.max(0) as u32,
    };
    let mut driver = 0;
    // SAFETY: `driver` is a valid out-pointer.
    let code = unsafe { (api.cuDriverGetVersion)(&mut driver) };
    if code != consts::SUCCESS {
        return Err(fail("cuDriverGetVersion", code));
    }
    Ok((name, compute, driver, launch))
}

/// `CU_STREAM_LEGACY` (also null) and `CU_STREAM_PER_THREAD`: the default streams'
/// handles.
const DEFAULT_STREAMS: [usize; 3] = [0, 1, 2];

/// What the driver says of a context the caller owns and of the device it runs on, after
/// checking that it can be made current; with `stream`, also that the stream is one the
/// backend can run a pooled stream on: not a default stream, of that context,
/// non-blocking (as the backend's own), not capturing. Retains and releases nothing.
///
/// # Safety
///
/// [`present`] said the driver loads; `context` is null or a live context of that
/// driver; `stream`, if any, a default stream's handle or a live stream.
// SAFETY: the contract is that list; the blocks below and `lendable` rest on it.
pub(crate) unsafe fn external(
    context: usize,
    stream: Option<usize>,
) -> Result<Opened, Unavailable> {
    init()?;
    if context == 0 {
        return Err(unavailable("the context handed over is null"));
    }
    let current = Current::enter(context).map_err(|e| {
        unavailable(format!(
            "the context handed over cannot be made current: {e}"
        ))
    })?;
    let mut device = 0;
    // SAFETY: `device` is a valid out-pointer; the caller's context is current.
    let code = unsafe { (api().cuCtxGetDevice)(&mut device) };
    if code != consts::SUCCESS {
        return Err(fail("cuCtxGetDevice", code));
    }
    let count = device_count()?;
    let mut ordinal = None;
    for o in 0..count {
        if device_of(o)? == device {
            ordinal = Some(o);
            break;
        }
    }
    let Some(ordinal) = ordinal else {
        return Err(unavailable(format!(
            "the context's device {device} is none of the {count} the driver lists"
        )));
    };
    if let Some(stream) = stream {
        lendable(context, stream)?;
    }
    drop(current);
    let (name, compute, driver, launch) = describe(device)?;
    Ok(Opened {
        context,
        device,
        ordinal,
        name,
        compute,
        driver,
        launch,
    })
}

/// Whether `stream` can be a pooled stream of the backend on `context` (current): see
/// [`external`], whose caller guarantees the stream is live.
fn lendable(context: usize, stream: usize) -> Result<(), Unavailable> {
    if DEFAULT_STREAMS.contains(&stream) {
        return Err(unavailable(
            "the stream handed over is a default stream (legacy or per-thread), which no \
             capture of the backend's may use: hand over a non-blocking stream",
        ));
    }
    let mut owner: Handle = std::ptr::null_mut();
    // SAFETY: the stream is live (the caller's guarantee, see `external`); `owner` is a
    // valid out-pointer.
    let code = unsafe { (api().cuStreamGetCtx)(stream as Handle, &mut owner) };
    if code != consts::SUCCESS {
        return Err(fail("cuStreamGetCtx", code));
    }
    if owner as usize != context {
        return Err(unavailable(
            "the stream handed over belongs to another context than the one handed over",
        ));
    }
    let mut flags: c_uint = 0;
    // SAFETY: as above; `flags` is a valid out-pointer.
    let code = unsafe { (api().cuStreamGetFlags)(stream as Handle, &mut flags) };
    if code != consts::SUCCESS {
        return Err(fail("cuStreamGetFlags", code));
    }
    if flags & consts::STREAM_NON_BLOCKING == 0 {
        return Err(unavailable(
            "the stream handed over is a blocking stream (it waits for the legacy default \
             stream, so the caller's work there could join a capture): hand over a \
             non-blocking one, as the backend's own streams are",
        ));
    }
    match is_capturing(stream) {
        Ok(false) => Ok(()),
        Ok(true) => Err(unavailable("the stream handed over is capturing")),
        Err(e) => Err(unavailable(format!(
            "the stream's capture state is unknown: {e}"
        ))),
    }
}

/// Releases the primary context retained by [`open`].
pub(crate) fn release(device: i32) {
    // SAFETY: the context was retained once by `open` and every object made in it is
    // gone (the backend's last handle is dropping).
    let code = unsafe { (api().cuDevicePrimaryCtxRelease_v2)(device) };
    warn_on("cuDevicePrimaryCtxRelease", code);
}

/// Logs a failed call of a teardown path, which has no caller to return it to.
fn warn_on(op: &'static str, code: c_int) {
    if code != consts::SUCCESS {
        let error = CudaError::new(code, error_name(code));
        tracing::warn!(target: "capture", op, %error, "a CUDA teardown call failed");
    }
}

/// A non-blocking stream.
pub(crate) fn stream_create() -> Result<usize, ServerError> {
    let mut stream = std::ptr::null_mut();
    // SAFETY: `stream` is a valid out-pointer; the context is current.
    check("cuStreamCreate", unsafe {
        (api().cuStreamCreate)(&mut stream, consts::STREAM_NON_BLOCKING)
    })?;
    Ok(stream as usize)
}

/// Destroys a stream whose work has completed.
pub(crate) fn stream_destroy(stream: usize) {
    // SAFETY: the caller synchronised the stream first; the context is current.
    warn_on("cuStreamDestroy", unsafe {
        (api().cuStreamDestroy_v2)(stream as Handle)
    });
}

/// Waits for everything enqueued on `stream`.
pub(crate) fn stream_sync(stream: usize) -> Result<(), ServerError> {
    // SAFETY: the stream is live and not capturing; the context is current.
    check("cuStreamSynchronize", unsafe {
        (api().cuStreamSynchronize)(stream as Handle)
    })
}

/// Whether `stream` is capturing (active or invalidated).
pub(crate) fn is_capturing(stream: usize) -> Result<bool, ServerError> {
    let mut status = consts::CAPTURE_STATUS_NONE;
    // SAFETY: the stream is live; `status` is a valid out-pointer (the driver writes
    // the `CUstreamCaptureStatus` enum, read here as its integer).
    check("cuStreamIsCapturing", unsafe {
        (api().cuStreamIsCapturing)(stream as Handle, &mut status)
    })?;
    Ok(status != consts::CAPTURE_STATUS_NONE)
}

/// `size` bytes of device memory.
pub(crate) fn mem_alloc(size: u64, pool: PoolName) -> Result<u64, ServerError> {
    let mut ptr = 0;
    // SAFETY: `ptr` is a valid out-pointer; the context is current.
    match unsafe { (api().cuMemAlloc_v2)(&mut ptr, size as usize) } {
        consts::SUCCESS => Ok(ptr),
        code => Err(out_of_memory(
            "cuMemAlloc",
            size,
            pool,
            CudaError::new(code, error_name(code)),
        )),
    }
}

/// Frees device memory no pending work uses.
pub(crate) fn mem_free(ptr: u64) {
    // SAFETY: the core frees a page only once nothing uses it; the context is current.
    warn_on("cuMemFree", unsafe { (api().cuMemFree_v2)(ptr) });
}

/// `size` bytes of pinned (page-locked) host memory.
pub(crate) fn host_alloc(size: u64, pool: PoolName) -> Result<usize, ServerError> {
    let mut ptr = std::ptr::null_mut();
    // SAFETY: `ptr` is a valid out-pointer; the context is current.
    match unsafe { (api().cuMemHostAlloc)(&mut ptr, size as usize, consts::HOST_ALLOC_PORTABLE) } {
        consts::SUCCESS => Ok(ptr as usize),
        code => Err(out_of_memory(
            "cuMemHostAlloc",
            size,
            pool,
            CudaError::new(code, error_name(code)),
        )),
    }
}

/// Frees pinned host memory no pending work uses.
pub(crate) fn host_free(ptr: usize) {
    // SAFETY: as for device memory.
    warn_on("cuMemFreeHost", unsafe {
        (api().cuMemFreeHost)(ptr as Handle)
    });
}

/// Copies `bytes` to pinned host memory at `at`.
pub(crate) fn write_host(at: usize, bytes: &[u8]) {
    // SAFETY: `at` is inside a live pinned page, at a slice of at least `bytes.len()`
    // bytes the caller resolved; no pending copy reads it (a staging slice is handed out
    // only when nothing uses it).
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), at as *mut u8, bytes.len()) };
}

/// Enqueues (or, while capturing, records) a copy from pinned host memory to the device.
pub(crate) fn copy_to_device(
    dst: u64,
    src: usize,
    len: usize,
    stream: usize,
) -> Result<(), ServerError> {
    // SAFETY: both ranges lie in live pages the core keeps until the copy ran (or, for a
    // recorded copy, for the graph's life).
    check("cuMemcpyHtoDAsync", unsafe {
        (api().cuMemcpyHtoDAsync_v2)(dst, src as *const c_void, len, stream as Handle)
    })
}

/// Copies device memory to `out` on `stream` and waits for it: an asynchronous copy on
/// the stream's own non-blocking stream, never the legacy default stream, which would
/// synchronise with every capturing stream of the context.
pub(crate) fn copy_to_host(out: &mut [u8], src: u64, stream: usize) -> Result<(), ServerError> {
    // SAFETY: the source range lies in a live page; `out` outlives the copy because the
    // stream is synchronised before returning.
    check("cuMemcpyDtoHAsync", unsafe {
        (api().cuMemcpyDtoHAsync_v2)(
            out.as_mut_ptr() as *mut c_void,
            src,
            out.len(),
            stream as Handle,
        )
    })?;
    stream_sync(stream)
}

/// Enqueues a copy of `len` bytes of device memory at `src` into pinned host memory at
/// `dst` on `stream`; the caller synchronises before reading `dst`.
pub(crate) fn copy_to_pinned(
    dst: usize,
    src: u64,
    len: usize,
    stream: usize,
) -> Result<(), ServerError> {
    // SAFETY: the source range lies in a live page; `dst` is inside a live pinned page of
    // at least `len` bytes that the caller keeps until it has synchronised the stream.
    check("cuMemcpyDtoHAsync", unsafe {
        (api().cuMemcpyDtoHAsync_v2)(dst as *mut c_void, src, len, stream as Handle)
    })
}

/// Copies `out.len()` bytes of pinned host memory at `at` into `out`.
pub(crate) fn read_host(at: usize, out: &mut [u8]) {
    // SAFETY: `at` is inside a live pinned page covering `out.len()` bytes, and the copy
    // that filled them finished (the caller synchronised the stream).
    unsafe { std::ptr::copy_nonoverlapping(at as *const u8, out.as_mut_ptr(), out.len()) };
}

/// Records an event on `stream` (creating it), signalled once everything enqueued so far
/// has run. A host wait on it blocks the thread rather than spinning.
pub(crate) fn event_record(stream: usize) -> Result<usize, ServerError> {
    let mut event = std::ptr::null_mut();
    // SAFETY: `event` is a valid out-pointer; the context is current.
    check("cuEventCreate", unsafe {
        (api().cuEventCreate)(
            &mut event,
            consts::EVENT_DISABLE_TIMING | consts::EVENT_BLOCKING_SYNC,
        )
    })?;
    // SAFETY: the event was just created and the stream is live and not capturing (the
    // core never fences a recording stream).
    let code = unsafe { (api().cuEventRecord)(event, stream as Handle) };
    if code != consts::SUCCESS {
        event_destroy(event as usize);
        return Err(cu_error(
            "cuEventRecord",
            CudaError::new(code, error_name(code)),
        ));
    }
    Ok(event as usize)
}

/// Waits on the host for `event`.
pub(crate) fn event_wait(event: usize) -> Result<(), ServerError> {
    // SAFETY: the event is live until the fence that owns it drops; the context is
    // current.
    check("cuEventSynchronize", unsafe {
        (api().cuEventSynchronize)(event as Handle)
    })
}

/// Makes everything enqueued on `stream` from now on wait, on the device, for `event`
/// (recorded on another stream of the same context).
pub(crate) fn stream_wait_event(stream: usize, event: usize) -> Result<(), ServerError> {
    // SAFETY: the stream is live and not capturing (the core never orders a recording
    // stream, so no capture waits on an event recorded outside it); the event is live
    // until the fence that owns it drops, and a wait already enqueued does not need it
    // to outlive the call.
    check("cuStreamWaitEvent", unsafe {
        (api().cuStreamWaitEvent)(stream as Handle, event as Handle, 0)
    })
}

/// Orders `to` after everything enqueued on `from` so far inside one stream capture:
/// a fresh event recorded on `from` (which captures) and waited on by `to`, which joins
/// the capture if it was not in it (a fork) or orders itself after `from` (a join). The
/// event is returned for its owner (the window, then the graph) to destroy.
pub(crate) fn capture_edge(from: usize, to: usize) -> Result<usize, ServerError> {
    let mut event = std::ptr::null_mut();
    // SAFETY: `event` is a valid out-pointer; the context is current.
    check("cuEventCreate", unsafe {
        (api().cuEventCreate)(&mut event, consts::EVENT_DISABLE_TIMING)
    })?;
    // SAFETY: the event was just created; `from` is a live stream of the current
    // context in the window's capture, where a record becomes an ordering, not work.
    let code = unsafe { (api().cuEventRecord)(event, from as Handle) };
    let (op, code) = if code == consts::SUCCESS {
        // SAFETY: `to` is a live stream of the same context, in the capture or not in
        // any; waiting on an event recorded in a capture joins it to that capture.
        let code = unsafe { (api().cuStreamWaitEvent)(to as Handle, event, 0) };
        ("cuStreamWaitEvent", code)
    } else {
        ("cuEventRecord", code)
    };
    if code != consts::SUCCESS {
        event_destroy(event as usize);
        return Err(cu_error(op, CudaError::new(code, error_name(code))));
    }
    Ok(event as usize)
}

/// Destroys an event.
pub(crate) fn event_destroy(event: usize) {
    // SAFETY: the event is owned by the caller and not waited on elsewhere.
    warn_on("cuEventDestroy", unsafe {
        (api().cuEventDestroy_v2)(event as Handle)
    });
}

/// Loads a module from a cubin or NUL-terminated PTX.
pub(crate) fn module_load(image: &[u8]) -> Result<usize, ServerError> {
    let mut module = std::ptr::null_mut();
    // SAFETY: `image` is a whole cubin (an ELF image the driver parses with its own
    // bounds) or NUL-terminated PTX text, as the caller built it; `module` is a valid
    // out-pointer; the context is current.
    check("cuModuleLoadData", unsafe {
        (api().cuModuleLoadData)(&mut module, image.as_ptr() as *const c_void)
    })?;
    Ok(module as usize)
}

/// The kernel `name` of a loaded module.
pub(crate) fn module_function(module: usize, name: &CStr) -> Result<usize, ServerError> {
    let mut function = std::ptr::null_mut();
    // SAFETY: the module is loaded; `name` is NUL-terminated.
    check("cuModuleGetFunction", unsafe {
        (api().cuModuleGetFunction)(&mut function, module as Handle, name.as_ptr())
    })?;
    Ok(function as usize)
}

/// Unloads a module no pending work uses.
pub(crate) fn module_unload(module: usize) {
    // SAFETY: the kernel registry drops modules with the device, after its streams.
    warn_on("cuModuleUnload", unsafe {
        (api().cuModuleUnload)(module as Handle)
    });
}

/// Each parameter of `function`, as `(offset, size)` in bytes, read from the kernel
/// image; `None` when the driver is too old to say (`cuFuncGetParamInfo` came with CUDA
/// 12.4).
pub(crate) fn params(function: usize) -> Result<Option<Vec<(usize, usize)>>, ServerError> {
    let Some(f) = api().cuFuncGetParamInfo else {
        return Ok(None);
    };
    let mut params = Vec::new();
    // A kernel's most parameters, two per buffer in the pairs form, the info pointer,
    // and one more to see past them.
    for index in 0..=MAX_ARGS {
        let (mut offset, mut size) = (0, 0);
        // SAFETY: the function is loaded; both out-pointers are valid; an index past
        // the last parameter is answered with CUDA_ERROR_INVALID_VALUE.
        match unsafe { f(function as Handle, index, &mut offset, &mut size) } {
            consts::SUCCESS => params.push((offset, size)),
            consts::INVALID_VALUE => break,
            code => {
                return Err(cu_error(
                    "cuFuncGetParamInfo",
                    CudaError::new(code, error_name(code)),
                ));
            }
        }
    }
    Ok(Some(params))
}

/// The most arguments a launch passes: a kernel's most parameters, two per buffer in
/// the pairs form, and the info words' pointer.
pub(crate) const MAX_ARGS: usize = 2 * capture_core::MAX_KERNEL_PARAMS + 1;

/// One argument of a launch, as the kernel's image takes it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Argument<'a> {
    /// A 64-bit value: a device pointer, a length.
    Word(u64),
    /// A scalar's bytes, passed by value.
    Bytes(&'a [u8]),
}

/// `CUlaunchAttributeValue` (cuda.h): a 64-byte union, 8-byte aligned (its
/// `accessPolicyWindow` holds a pointer); `programmaticStreamSerializationAllowed`, an
/// `int`, is its first four bytes.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub(crate) struct LaunchAttributeValue([c_int; 16]);

/// `CUlaunchAttribute` (cuda.h): the attribute's id, padding to 8 bytes, its value.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct LaunchAttribute {
    id: c_int,
    pad: [u8; 4],
    value: LaunchAttributeValue,
}

/// `CUlaunchConfig` (cuda.h), what `cuLaunchKernelEx` takes.
#[repr(C)]
pub(crate) struct LaunchConfig {
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared: c_uint,
    stream: Handle,
    attrs: *mut LaunchAttribute,
    attr_count: c_uint,
}

/// `CUDA_KERNEL_NODE_PARAMS` (cuda.h's `_v2`, laid out as `_v3`), what
/// `cuGraphExecKernelNodeSetParams` and `cuGraphAddNode` take.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct KernelNodeParams {
    func: Handle,
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared: c_uint,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    kern: Handle,
    ctx: Handle,
}

impl KernelNodeParams {
    /// `function` in `grid` blocks of `block` threads with `shared` bytes each, over the
    /// argument pointers `params` (a [`Packed`]'s, which must outlive the driver call).
    fn new(
        function: usize,
        grid: [u32; 3],
        block: [u32; 3],
        shared: u32,
        params: *mut *mut c_void,
    ) -> Self {
        Self {
            func: function as Handle,
            grid,
            block,
            shared,
            params,
            extra: std::ptr::null_mut(),
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        }
    }
}

/// `CUDA_MEMSET_NODE_PARAMS` (cuda.h's `_v1`), what `cuGraphExecMemsetNodeSetParams`
/// takes.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct MemsetParams {
    dst: u64,
    pitch: usize,
    value: c_uint,
    element_size: c_uint,
    width: usize,
    height: usize,
}

/// `CUDA_MEMSET_NODE_PARAMS_v2` (cuda.h): the `_v1` fields and the context.
#[repr(C)]
#[derive(Clone, Copy)]
struct MemsetNodeParams {
    params: MemsetParams,
    ctx: Handle,
}

/// `CUDA_CHILD_GRAPH_NODE_PARAMS` (cuda.h): the graph cloned into the node, and the
/// ownership (clone).
#[repr(C)]
#[derive(Clone, Copy)]
struct ChildGraphParams {
    graph: Handle,
    ownership: c_int,
}

/// `CUDA_CONDITIONAL_NODE_PARAMS` (cuda.h): the handle, the type, how many bodies, where
/// the driver writes them, and the context.
#[repr(C)]
#[derive(Clone, Copy)]
struct ConditionalParams {
    handle: u64,
    kind: c_int,
    size: c_uint,
    bodies: *mut Handle,
    ctx: Handle,
}

/// The union of `CUgraphNodeParams` (cuda.h): 29 eight-byte words, of which a node's
/// type uses its member's; the rest must be zero.
#[repr(C)]
#[derive(Clone, Copy)]
union NodeUnion {
    reserved: [i64; 29],
    kernel: KernelNodeParams,
    memset: MemsetNodeParams,
    graph: ChildGraphParams,
    conditional: ConditionalParams,
}

/// `CUgraphNodeParams` (cuda.h), what `cuGraphAddNode` takes: the node's type, three
/// reserved ints, the type's parameters, a reserved word; every unused byte zero.
#[repr(C)]
pub(crate) struct GraphNodeParams {
    kind: c_uint,
    reserved0: [c_int; 3],
    params: NodeUnion,
    reserved2: i64,
}

impl GraphNodeParams {
    /// A node of type `kind`, every byte zero: the caller writes its member (a write of a
    /// whole member leaves the bytes past it zero).
    fn zeroed(kind: u32) -> Self {
        Self {
            kind,
            reserved0: [0; 3],
            params: NodeUnion { reserved: [0; 29] },
            reserved2: 0,
        }
    }
}

/// A launch's argument values and the pointers to them the driver reads, laid out for
/// `cuLaunchKernel` and `cuLaunchKernelEx` alike.
struct Packed<'a> {
    words: [u64; MAX_ARGS],
    pointers: [*mut c_void; MAX_ARGS],
    args: &'a [Argument<'a>],
}

impl<'a> Packed<'a> {
    fn new(args: &'a [Argument<'a>]) -> Self {
        Self {
            words: [0; MAX_ARGS],
            pointers: [std::ptr::null_mut(); MAX_ARGS],
            args: &args[..args.len().min(MAX_ARGS)],
        }
    }

    /// The pointers, each at its value: a word in `self.words`, or a scalar's bytes
    /// borrowed from the caller. Valid while `self` is neither moved nor dropped.
    fn pointers(&mut self) -> *mut *mut c_void {
        for (i, arg) in self.args.iter().enumerate() {
            self.pointers[i] = match *arg {
                Argument::Word(w) => {
                    self.words[i] = w;
                    &mut self.words[i] as *mut u64 as *mut c_void
                }
                Argument::Bytes(bytes) => bytes.as_ptr() as *mut c_void,
            };
        }
        self.pointers.as_mut_ptr()
    }
}

/// Enqueues (or records) a launch of `function`: `grid` blocks of `block` threads with
/// `shared` bytes of dynamic shared memory each, over `args` in order (at most
/// [`MAX_ARGS`]). The kernel's image declares exactly these arguments, of these sizes:
/// checked when it loaded (`kernels::check_params`), so the driver reads each value
/// within its bounds.
pub(crate) fn launch(
    function: usize,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    stream: usize,
    args: &[Argument<'_>],
) -> Result<(), ServerError> {
    let mut packed = Packed::new(args);
    let pointers = packed.pointers();
    // SAFETY: each pointer points at a value that lives across the call (the driver
    // copies them at enqueue): a word in `packed`, or a scalar's bytes borrowed from the
    // caller; the kernel takes exactly these arguments, of these sizes (checked against
    // its image at load); the grid, block and shared bytes were checked against the
    // device's limits by the core, and the driver refuses anything else with an error.
    check("cuLaunchKernel", unsafe {
        (api().cuLaunchKernel)(
            function as Handle,
            grid[0],
            grid[1],
            grid[2],
            block[0],
            block[1],
            block[2],
            shared,
            stream as Handle,
            pointers,
            std::ptr::null_mut(),
        )
    })
}

/// As [`launch`], through `cuLaunchKernelEx` with
/// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION` set: the kernel may start
/// while the kernel before it on `stream` finishes, and waits for it itself
/// (`griddepcontrol.wait`). Inside a capture the driver records a programmatic edge.
pub(crate) fn launch_programmatic(
    function: usize,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    stream: usize,
    args: &[Argument<'_>],
) -> Result<(), ServerError> {
    let mut value = LaunchAttributeValue([0; 16]);
    value.0[0] = 1;
    let mut attribute = LaunchAttribute {
        id: consts::LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        pad: [0; 4],
        value,
    };
    let config = LaunchConfig {
        grid,
        block,
        shared,
        stream: stream as Handle,
        attrs: &mut attribute,
        attr_count: 1,
    };
    let mut packed = Packed::new(args);
    let pointers = packed.pointers();
    // SAFETY: as in `launch` for the arguments; `config` and the one attribute it points
    // at live across the call, laid out as cuda.h's CUlaunchConfig and CUlaunchAttribute
    // (checked by `launch_config_matches_cuda_h`); the driver reads them at the call.
    check("cuLaunchKernelEx", unsafe {
        (api().cuLaunchKernelEx)(&config, function as Handle, pointers, std::ptr::null_mut())
    })
}

/// The graph node the last work captured on `stream` made: the capture's one
/// dependency after a kernel launch. `None` when the stream is not capturing, or its
/// capture's frontier is not one node.
pub(crate) fn last_captured_node(stream: usize) -> Result<Option<usize>, ServerError> {
    let mut status: c_uint = 0;
    let mut id = 0u64;
    let mut graph: Handle = std::ptr::null_mut();
    let mut deps: *const Handle = std::ptr::null();
    let mut count = 0usize;
    // SAFETY: every out-pointer is valid for a write of its type; the driver points
    // `deps` at its own array of `count` node handles, valid until the next call on the
    // stream, and it is read once, below, before any.
    check("cuStreamGetCaptureInfo", unsafe {
        (api().cuStreamGetCaptureInfo_v2)(
            stream as Handle,
            &mut status,
            &mut id,
            &mut graph,
            &mut deps,
            &mut count,
        )
    })?;
    if status != consts::CAPTURE_STATUS_ACTIVE || count != 1 || deps.is_null() {
        return Ok(None);
    }
    // SAFETY: the driver says `deps` holds `count` (one) node handles.
    Ok(Some(unsafe { *deps } as usize))
}

/// Sets the parameters of kernel node `node` (of the graph `exec` was instantiated
/// from) in `exec`: `function` (the node's own), `grid` blocks of `block` threads with
/// `shared` bytes each, over `args`. Launches of `exec` enqueued before the call keep
/// the parameters they had; later ones run with these.
pub(crate) fn set_kernel_node(
    exec: usize,
    node: usize,
    function: usize,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    args: &[Argument<'_>],
) -> Result<(), ServerError> {
    let mut packed = Packed::new(args);
    let pointers = packed.pointers();
    let params = KernelNodeParams::new(function, grid, block, shared, pointers);
    // SAFETY: `exec` and `node` are live (the executable and the graph it came from are
    // destroyed together, after this); `params` is laid out as cuda.h's
    // CUDA_KERNEL_NODE_PARAMS (checked by `kernel_node_params_match_cuda_h`) and, with
    // the argument values it points at, lives across the call (the driver copies them);
    // the function is the node's own, taking exactly these arguments (checked at load).
    check("cuGraphExecKernelNodeSetParams", unsafe {
        (api().cuGraphExecKernelNodeSetParams_v2)(exec as Handle, node as Handle, &params)
    })
}

/// Whether the driver builds conditional nodes (`cuGraphAddNode` and
/// `cuGraphConditionalHandleCreate`, CUDA 12.3).
pub(crate) fn conditional_nodes() -> bool {
    api().cuGraphAddNode.is_some() && api().cuGraphConditionalHandleCreate.is_some()
}

/// Refuses where the driver lacks conditional nodes.
fn refused_before_12_3(op: &'static str) -> ServerError {
    ServerError::driver(
        op,
        std::io::Error::other("this CUDA driver has no conditional nodes (CUDA 12.3 does)"),
    )
}

/// A new, empty graph in the current context.
pub(crate) fn graph_create() -> Result<usize, ServerError> {
    let mut graph = std::ptr::null_mut();
    // SAFETY: `graph` is a valid out-pointer; flags must be 0.
    check("cuGraphCreate", unsafe {
        (api().cuGraphCreate)(&mut graph, 0)
    })?;
    Ok(graph as usize)
}

/// A conditional handle on `graph` in `context`, set to `default` at the start of every
/// launch (`CU_GRAPH_COND_ASSIGN_DEFAULT`).
pub(crate) fn conditional_handle(
    graph: usize,
    context: usize,
    default: u32,
) -> Result<u64, ServerError> {
    let Some(create) = api().cuGraphConditionalHandleCreate else {
        return Err(refused_before_12_3("cuGraphConditionalHandleCreate"));
    };
    let mut handle = 0u64;
    // SAFETY: `handle` is a valid out-pointer; the graph is live and of the current
    // context, which is `context`; the flags are cuda.h's.
    check("cuGraphConditionalHandleCreate", unsafe {
        create(
            &mut handle,
            graph as Handle,
            context as Handle,
            default,
            consts::COND_ASSIGN_DEFAULT,
        )
    })?;
    Ok(handle)
}

/// Adds a node described by `params` to `graph` after the nodes `deps`.
fn add_node(
    op: &'static str,
    graph: usize,
    deps: &[usize],
    params: &mut GraphNodeParams,
) -> Result<usize, ServerError> {
    let Some(add) = api().cuGraphAddNode else {
        return Err(refused_before_12_3(op));
    };
    let deps: Vec<Handle> = deps.iter().map(|&d| d as Handle).collect();
    let mut node = std::ptr::null_mut();
    // SAFETY: `node` is a valid out-pointer; the graph and every dependency (a node of
    // it) are live; `deps` holds as many handles as passed; `params` is laid out as
    // cuda.h's CUgraphNodeParams (checked by `graph_node_params_match_cuda_h`), every
    // unused byte zero, and any pointer in it valid for the call.
    check(op, unsafe {
        add(
            &mut node,
            graph as Handle,
            deps.as_ptr(),
            deps.len(),
            params,
        )
    })?;
    Ok(node as usize)
}

/// Adds to `graph`, after `deps`, a memset node writing `value` to the `words` 4-byte
/// words at `dst` (device memory of `context`).
pub(crate) fn add_memset_node(
    graph: usize,
    deps: &[usize],
    context: usize,
    dst: u64,
    value: u32,
    words: usize,
) -> Result<usize, ServerError> {
    let mut params = GraphNodeParams::zeroed(consts::NODE_MEMSET);
    params.params.memset = MemsetNodeParams {
        params: memset_params(dst, value, words),
        ctx: context as Handle,
    };
    add_node("cuGraphAddNode (memset)", graph, deps, &mut params)
}

/// A 1-dimensional memset of `words` 4-byte words of `value` at `dst`.
fn memset_params(dst: u64, value: u32, words: usize) -> MemsetParams {
    MemsetParams {
        dst,
        pitch: 0,
        value,
        element_size: 4,
        width: words,
        height: 1,
    }
}

/// Adds to `graph`, after `deps`, a child graph node running a clone of `child`.
pub(crate) fn add_child_node(
    graph: usize,
    deps: &[usize],
    child: usize,
) -> Result<usize, ServerError> {
    let mut params = GraphNodeParams::zeroed(consts::NODE_GRAPH);
    params.params.graph = ChildGraphParams {
        graph: child as Handle,
        ownership: consts::CHILD_CLONE,
    };
    add_node("cuGraphAddNode (child graph)", graph, deps, &mut params)
}

/// Adds to `graph`, after `deps`, a WHILE conditional node on `handle` (made on this
/// graph, in `context`): the node and its body graph, which the node owns.
pub(crate) fn add_while_node(
    graph: usize,
    deps: &[usize],
    context: usize,
    handle: u64,
) -> Result<(usize, usize), ServerError> {
    let mut body: Handle = std::ptr::null_mut();
    let mut params = GraphNodeParams::zeroed(consts::NODE_CONDITIONAL);
    params.params.conditional = ConditionalParams {
        handle,
        kind: consts::COND_WHILE,
        size: 1,
        bodies: &mut body,
        ctx: context as Handle,
    };
    let node = add_node("cuGraphAddNode (conditional)", graph, deps, &mut params)?;
    Ok((node, body as usize))
}

/// Adds to `graph`, after `deps`, a kernel node of `function` (of the current context):
/// `grid` blocks of `block` threads, no dynamic shared memory, over `args`, which the
/// function takes exactly.
pub(crate) fn add_kernel_node(
    graph: usize,
    deps: &[usize],
    function: usize,
    grid: [u32; 3],
    block: [u32; 3],
    args: &[Argument<'_>],
) -> Result<usize, ServerError> {
    let mut packed = Packed::new(args);
    let pointers = packed.pointers();
    let mut params = GraphNodeParams::zeroed(consts::NODE_KERNEL);
    params.params.kernel = KernelNodeParams::new(function, grid, block, 0, pointers);
    // The argument values live in `packed` across the call; the driver copies them.
    add_node("cuGraphAddNode (kernel)", graph, deps, &mut params)
}

/// Sets the parameters of kernel node `node` in its graph (executables already made
/// from it keep theirs): `function` (the node's own), `grid` blocks of `block` threads
/// with `shared` bytes each, over `args`.
pub(crate) fn set_graph_kernel_node(
    node: usize,
    function: usize,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    args: &[Argument<'_>],
) -> Result<(), ServerError> {
    let mut packed = Packed::new(args);
    let pointers = packed.pointers();
    let params = KernelNodeParams::new(function, grid, block, shared, pointers);
    // SAFETY: `node` is a live kernel node; `params` as in `set_kernel_node`.
    check("cuGraphKernelNodeSetParams", unsafe {
        (api().cuGraphKernelNodeSetParams_v2)(node as Handle, &params)
    })
}

/// Sets, in `exec`, what child graph node `node` (of the graph `exec` came from, or of a
/// body nested in it) runs from `graph`'s nodes (the graph it was cloned from, its
/// topology unchanged): launches of `exec` enqueued before the call keep theirs.
pub(crate) fn set_child_node(exec: usize, node: usize, graph: usize) -> Result<(), ServerError> {
    // SAFETY: all three handles are live; the graph's topology is the node's.
    check("cuGraphExecChildGraphNodeSetParams", unsafe {
        (api().cuGraphExecChildGraphNodeSetParams)(exec as Handle, node as Handle, graph as Handle)
    })
}

/// Sets, in `exec`, the value memset node `node` writes (to the `words` words at `dst`,
/// as when it was added): launches of `exec` enqueued before the call keep theirs.
pub(crate) fn set_memset_node(
    exec: usize,
    node: usize,
    context: usize,
    dst: u64,
    value: u32,
    words: usize,
) -> Result<(), ServerError> {
    let params = memset_params(dst, value, words);
    // SAFETY: the handles are live; `params` is laid out as cuda.h's
    // CUDA_MEMSET_NODE_PARAMS (checked by `graph_node_params_match_cuda_h`) and lives
    // across the call.
    check("cuGraphExecMemsetNodeSetParams", unsafe {
        (api().cuGraphExecMemsetNodeSetParams)(
            exec as Handle,
            node as Handle,
            &params,
            context as Handle,
        )
    })
}

/// Lets `function` take up to `bytes` of dynamic shared memory per block (past the
/// default 48 KiB a function must opt in).
pub(crate) fn allow_shared(function: usize, bytes: u32) -> Result<(), ServerError> {
    // SAFETY: the function is loaded; the attribute takes an int.
    check("cuFuncSetAttribute", unsafe {
        (api().cuFuncSetAttribute)(
            function as Handle,
            consts::FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes as c_int,
        )
    })
}

/// Starts a relaxed-mode capture on `stream`: no thread is barred from any call by it,
/// and it may end on any thread.
pub(crate) fn begin_capture(stream: usize) -> Result<(), ServerError> {
    // SAFETY: the stream is live and not capturing (the core moved it to Capture once).
    check("cuStreamBeginCapture", unsafe {
        (api().cuStreamBeginCapture_v2)(stream as Handle, consts::CAPTURE_MODE_RELAXED)
    })
}

/// Ends the capture on `stream`, returning the graph it recorded.
pub(crate) fn end_capture(stream: usize) -> Result<usize, ServerError> {
    let mut graph = std::ptr::null_mut();
    // SAFETY: the stream began a relaxed-mode capture, which any thread may end.
    check("cuStreamEndCapture", unsafe {
        (api().cuStreamEndCapture)(stream as Handle, &mut graph)
    })?;
    Ok(graph as usize)
}

/// `CUgraphEdgeData` (cuda.h): an edge's ports and type.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct EdgeData {
    from_port: u8,
    to_port: u8,
    kind: u8,
    reserved: [u8; 5],
}

/// A graph's node count, and its edges: (from, to, programmatic), nodes by place.
pub(crate) type GraphEdges = (usize, Vec<(usize, usize, bool)>);

/// `graph`'s nodes (how many) and edges, each as the two nodes' places in
/// `cuGraphGetNodes`' order and whether it is programmatic
/// (`CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC`); `None` on a driver without
/// `cuGraphGetEdges_v2` (before CUDA 12.3).
pub(crate) fn graph_edges(graph: usize) -> Result<Option<GraphEdges>, ServerError> {
    let Some(get_edges) = api().cuGraphGetEdges_v2 else {
        return Ok(None);
    };
    let mut count = 0usize;
    // SAFETY: querying the count with a null node array is the documented first step.
    check("cuGraphGetNodes", unsafe {
        (api().cuGraphGetNodes)(graph as Handle, std::ptr::null_mut(), &mut count)
    })?;
    let mut nodes = vec![std::ptr::null_mut(); count];
    // SAFETY: `nodes` holds `count` slots.
    check("cuGraphGetNodes", unsafe {
        (api().cuGraphGetNodes)(graph as Handle, nodes.as_mut_ptr(), &mut count)
    })?;
    nodes.truncate(count);
    let mut edges = 0usize;
    // SAFETY: with null arrays the driver writes only the edge count.
    check("cuGraphGetEdges", unsafe {
        get_edges(
            graph as Handle,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut edges,
        )
    })?;
    let mut from = vec![std::ptr::null_mut(); edges];
    let mut to = vec![std::ptr::null_mut(); edges];
    let mut data = vec![EdgeData::default(); edges];
    // SAFETY: each array holds `edges` entries, the count the driver gave for this graph,
    // which nothing changes in between (the caller holds the only handle).
    check("cuGraphGetEdges", unsafe {
        get_edges(
            graph as Handle,
            from.as_mut_ptr(),
            to.as_mut_ptr(),
            data.as_mut_ptr(),
            &mut edges,
        )
    })?;
    let place = |n: Handle| nodes.iter().position(|&m| m == n);
    let mut out = Vec::with_capacity(edges);
    for i in 0..edges.min(from.len()) {
        if let (Some(a), Some(b)) = (place(from[i]), place(to[i])) {
            out.push((a, b, data[i].kind == consts::DEPENDENCY_PROGRAMMATIC));
        }
    }
    Ok(Some((nodes.len(), out)))
}

/// How many memory allocation or free nodes `graph` holds.
pub(crate) fn memory_nodes(graph: usize) -> Result<usize, ServerError> {
    let mut count = 0usize;
    // SAFETY: querying the count with a null node array is the documented first step.
    check("cuGraphGetNodes", unsafe {
        (api().cuGraphGetNodes)(graph as Handle, std::ptr::null_mut(), &mut count)
    })?;
    let mut nodes = vec![std::ptr::null_mut(); count];
    // SAFETY: `nodes` holds `count` slots.
    check("cuGraphGetNodes", unsafe {
        (api().cuGraphGetNodes)(graph as Handle, nodes.as_mut_ptr(), &mut count)
    })?;
    let mut memory = 0;
    for node in nodes.into_iter().take(count) {
        let mut kind: c_uint = 0;
        // SAFETY: `node` belongs to the live graph; the driver writes the node type (a C
        // enum) into `kind`, read as its integer: a type newer than this crate is a
        // number, not undefined behaviour.
        check("cuGraphNodeGetType", unsafe {
            (api().cuGraphNodeGetType)(node, &mut kind)
        })?;
        if matches!(kind, consts::NODE_MEM_ALLOC | consts::NODE_MEM_FREE) {
            memory += 1;
        }
    }
    Ok(memory)
}

/// Instantiates `graph`.
pub(crate) fn instantiate(graph: usize) -> Result<usize, ServerError> {
    let mut exec = std::ptr::null_mut();
    // SAFETY: the graph is live; `exec` is a valid out-pointer.
    check("cuGraphInstantiateWithFlags", unsafe {
        (api().cuGraphInstantiateWithFlags)(&mut exec, graph as Handle, 0)
    })?;
    Ok(exec as usize)
}

/// Uploads an executable graph ahead of its first launch.
pub(crate) fn upload(exec: usize, stream: usize) -> Result<(), ServerError> {
    // SAFETY: both handles are live.
    check("cuGraphUpload", unsafe {
        (api().cuGraphUpload)(exec as Handle, stream as Handle)
    })
}

/// Enqueues a launch of an executable graph.
pub(crate) fn launch_graph(exec: usize, stream: usize) -> Result<(), ServerError> {
    // SAFETY: both handles are live; the stream is not capturing.
    check("cuGraphLaunch", unsafe {
        (api().cuGraphLaunch)(exec as Handle, stream as Handle)
    })
}

/// Destroys an executable graph no pending launch uses.
pub(crate) fn exec_destroy(exec: usize) {
    // SAFETY: the core drops executables behind the event after their last launch.
    warn_on("cuGraphExecDestroy", unsafe {
        (api().cuGraphExecDestroy)(exec as Handle)
    });
}

/// Destroys a graph.
pub(crate) fn graph_destroy(graph: usize) {
    // SAFETY: the graph is owned by the caller; its executables are independent.
    warn_on("cuGraphDestroy", unsafe {
        (api().cuGraphDestroy)(graph as Handle)
    });
}

// ---------------------------------------------------------------------------------------
// NVRTC

/// Declares the NVRTC entry points the compile path calls.
macro_rules! nvrtc_api {
    ($($name:ident($($arg:ty),*);)*) => {
        #[allow(non_snake_case)]
        struct Nvrtc {
            // SAFETY: function-pointer types only; each call below says why it is sound.
            $($name: unsafe extern "C" fn($($arg),*) -> c_int,)*
        }

        impl Nvrtc {
            fn load(lib: &'static Library) -> Result<Self, String> {
                Ok(Self {
                    $($name: {
                        // SAFETY: the symbol is NVRTC's entry point of that name, whose C
                        // signature is the one declared above (from nvrtc.h); the library
                        // is never unloaded.
                        let symbol = unsafe {
                            lib.get::<unsafe extern "C" fn($($arg),*) -> c_int>(
                                concat!(stringify!($name), "\0").as_bytes(),
                            )
                        };
                        *symbol.map_err(|e| format!("NVRTC lacks {}: {e}", stringify!($name)))?
                    },)*
                })
            }
        }
    };
}

nvrtc_api! {
    nvrtcVersion(*mut c_int, *mut c_int);
    nvrtcCreateProgram(*mut Handle, *const c_char, *const c_char, c_int, *const *const c_char, *const *const c_char);
    nvrtcCompileProgram(Handle, c_int, *const *const c_char);
    nvrtcGetProgramLogSize(Handle, *mut usize);
    nvrtcGetProgramLog(Handle, *mut c_char);
    nvrtcGetPTXSize(Handle, *mut usize);
    nvrtcGetPTX(Handle, *mut c_char);
    nvrtcGetCUBINSize(Handle, *mut usize);
    nvrtcGetCUBIN(Handle, *mut c_char);
    nvrtcDestroyProgram(*mut Handle);
}

/// Where NVRTC is looked for, in order: `CAPTURE_NVRTC` (a path, which xtask sets to the
/// pinned wheel's library so a system `libnvrtc.so` cannot stand in for it), then the
/// CUDA 12 soname, then the development link.
fn nvrtc_candidates() -> Vec<String> {
    let mut names = Vec::new();
    if let Some(path) = std::env::var_os("CAPTURE_NVRTC") {
        names.push(path.to_string_lossy().into_owned());
    }
    names.extend(NVRTC_NAMES.iter().map(|n| (*n).to_owned()));
    names
}

/// The NVRTC sonames the dynamic loader is asked for after `CAPTURE_NVRTC`: CUDA 13's
/// first (a CUDA-13-only machine has no other), then 12's, then the development link.
pub(crate) const NVRTC_NAMES: [&str; 3] = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"];

static NVRTC: OnceLock<Result<(String, Nvrtc), String>> = OnceLock::new();

fn nvrtc() -> &'static Result<(String, Nvrtc), String> {
    NVRTC.get_or_init(|| {
        let mut tried = Vec::new();
        for name in nvrtc_candidates() {
            // SAFETY: loading NVRTC runs its initialisers, which have no preconditions;
            // the handle is kept for the process's life.
            match unsafe { Library::new(&name) } {
                Ok(lib) => {
                    let lib: &'static Library = Box::leak(Box::new(lib));
                    return Nvrtc::load(lib).map(|api| (name, api));
                }
                Err(e) => tried.push(format!("{name}: {e}")),
            }
        }
        Err(tried.join("; "))
    })
}

/// Which NVRTC loaded (the name or path it was found by) and its version; why none did
/// otherwise.
pub(crate) fn nvrtc_version() -> Result<(String, (i32, i32)), String> {
    let (name, api) = nvrtc().as_ref().map_err(Clone::clone)?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: both out-pointers are valid.
    let code = unsafe { (api.nvrtcVersion)(&mut major, &mut minor) };
    if code != 0 {
        return Err(format!("nvrtcVersion failed with code {code}"));
    }
    Ok((name.clone(), (major, minor)))
}

/// What NVRTC is asked for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Output {
    /// PTX for a virtual architecture (`compute_80`).
    Ptx,
    /// A cubin for a real one (`sm_80`).
    Cubin,
}

/// Compiles CUDA C for `arch` with NVRTC, without FMA contraction.
pub(crate) fn compile(
    source: &str,
    arch: &str,
    name: &str,
    output: Output,
) -> Result<Vec<u8>, ServerError> {
    compile_with(source, arch, name, output, false)
}

/// As [`compile`]; with `relocatable`, as relocatable device code (`-rdc=true`: PTX or a
/// cubin that calls functions of another image, linked later).
pub(crate) fn compile_with(
    source: &str,
    arch: &str,
    name: &str,
    output: Output,
    relocatable: bool,
) -> Result<Vec<u8>, ServerError> {
    let refused = |what: String| ServerError::invalid("CUDA C kernels", name, what);
    let (_, api) = nvrtc().as_ref().map_err(|e| refused(e.clone()))?;
    let source_c = CString::new(source).map_err(|_| refused("the source holds a NUL".into()))?;
    let name_c = CString::new(name).map_err(|_| refused("the name holds a NUL".into()))?;
    let mut options = vec![format!("--gpu-architecture={arch}"), "--fmad=false".into()];
    if relocatable {
        options.push("-rdc=true".into());
    }
    let options: Vec<CString> = options
        .into_iter()
        .map(|o| CString::new(o).expect("no NUL"))
        .collect();
    let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
    let mut program: Handle = std::ptr::null_mut();
    // SAFETY: every string is NUL-terminated and outlives the call; no headers.
    let code = unsafe {
        (api.nvrtcCreateProgram)(
            &mut program,
            source_c.as_ptr(),
            name_c.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if code != 0 {
        return Err(refused(format!(
            "nvrtcCreateProgram failed with code {code}"
        )));
    }
    let result = (|| {
        // SAFETY: the program is live; the options array holds as many valid strings.
        let code = unsafe {
            (api.nvrtcCompileProgram)(program, option_ptrs.len() as c_int, option_ptrs.as_ptr())
        };
        if code != 0 {
            let mut size = 0;
            // SAFETY: the program is live; `size` is a valid out-pointer.
            unsafe { (api.nvrtcGetProgramLogSize)(program, &mut size) };
            let mut log = vec![0u8; size.max(1)];
            // SAFETY: `log` holds the size NVRTC asked for.
            unsafe { (api.nvrtcGetProgramLog)(program, log.as_mut_ptr() as *mut c_char) };
            let log = String::from_utf8_lossy(&log);
            return Err(refused(format!(
                "NVRTC refused it (code {code}): {}",
                log.trim_end_matches('\0')
            )));
        }
        let (size_of, get) = match output {
            Output::Ptx => (api.nvrtcGetPTXSize, api.nvrtcGetPTX),
            Output::Cubin => (api.nvrtcGetCUBINSize, api.nvrtcGetCUBIN),
        };
        let mut size = 0;
        // SAFETY: the program compiled; `size` is a valid out-pointer.
        let code = unsafe { size_of(program, &mut size) };
        if code != 0 {
            return Err(refused(format!("NVRTC gave no {output:?} (code {code})")));
        }
        let mut bytes = vec![0u8; size];
        // SAFETY: `bytes` holds the size NVRTC reported.
        let code = unsafe { get(program, bytes.as_mut_ptr() as *mut c_char) };
        if code != 0 {
            return Err(refused(format!("NVRTC gave no {output:?} (code {code})")));
        }
        if matches!(output, Output::Ptx) {
            // PTX comes NUL-terminated; the text is what is shipped.
            while bytes.last() == Some(&0) {
                bytes.pop();
            }
        }
        Ok(bytes)
    })();
    // SAFETY: the program was created above and is destroyed once.
    unsafe { (api.nvrtcDestroyProgram)(&mut program) };
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_config_matches_cuda_h() {
        // cuda.h (12.9) on a 64-bit host: CUlaunchAttribute is the id, 4 bytes of pad
        // and a 64-byte union aligned to 8; CUlaunchConfig seven unsigned ints, then the
        // stream at 32, the attributes at 40 and their count at 48.
        assert_eq!(std::mem::size_of::<LaunchAttributeValue>(), 64);
        assert_eq!(std::mem::align_of::<LaunchAttributeValue>(), 8);
        assert_eq!(std::mem::size_of::<LaunchAttribute>(), 72);
        assert_eq!(std::mem::offset_of!(LaunchAttribute, value), 8);
        assert_eq!(std::mem::size_of::<LaunchConfig>(), 56);
        assert_eq!(std::mem::offset_of!(LaunchConfig, shared), 24);
        assert_eq!(std::mem::offset_of!(LaunchConfig, stream), 32);
        assert_eq!(std::mem::offset_of!(LaunchConfig, attrs), 40);
        assert_eq!(std::mem::offset_of!(LaunchConfig, attr_count), 48);
    }

    #[test]
    fn kernel_node_params_match_cuda_h() {
        // cuda.h (12.9), CUDA_KERNEL_NODE_PARAMS_v2 on a 64-bit host: the function, seven
        // unsigned ints, then (aligned to 8) the parameter and extra arrays, the kernel
        // and the context.
        assert_eq!(std::mem::size_of::<KernelNodeParams>(), 72);
        assert_eq!(std::mem::offset_of!(KernelNodeParams, shared), 32);
        assert_eq!(std::mem::offset_of!(KernelNodeParams, params), 40);
        assert_eq!(std::mem::offset_of!(KernelNodeParams, extra), 48);
        assert_eq!(std::mem::offset_of!(KernelNodeParams, kern), 56);
        assert_eq!(std::mem::offset_of!(KernelNodeParams, ctx), 64);
    }

    #[test]
    fn graph_node_params_match_cuda_h() {
        // cuda.h (12.9) on a 64-bit host: CUgraphNodeParams is the type and three ints,
        // a union of 29 long longs at 16 and a long long at 248; CUDA_MEMSET_NODE_PARAMS
        // the pointer, the pitch, two unsigned ints, the width and the height (the _v2
        // adds the context at 40); CUDA_CHILD_GRAPH_NODE_PARAMS the graph and the
        // ownership; CUDA_CONDITIONAL_NODE_PARAMS the handle, the type, the size, the
        // bodies' array at 16 and the context at 24.
        assert_eq!(std::mem::size_of::<GraphNodeParams>(), 256);
        assert_eq!(std::mem::offset_of!(GraphNodeParams, params), 16);
        assert_eq!(std::mem::offset_of!(GraphNodeParams, reserved2), 248);
        assert_eq!(std::mem::size_of::<MemsetParams>(), 40);
        assert_eq!(std::mem::offset_of!(MemsetParams, value), 16);
        assert_eq!(std::mem::offset_of!(MemsetParams, element_size), 20);
        assert_eq!(std::mem::offset_of!(MemsetParams, width), 24);
        assert_eq!(std::mem::size_of::<MemsetNodeParams>(), 48);
        assert_eq!(std::mem::offset_of!(MemsetNodeParams, ctx), 40);
        assert_eq!(std::mem::size_of::<ChildGraphParams>(), 16);
        assert_eq!(std::mem::size_of::<ConditionalParams>(), 32);
        assert_eq!(std::mem::offset_of!(ConditionalParams, size), 12);
        assert_eq!(std::mem::offset_of!(ConditionalParams, bodies), 16);
        assert_eq!(std::mem::offset_of!(ConditionalParams, ctx), 24);
    }
}
