//! The only module that calls the CUDA driver (and NVRTC). Every `unsafe` block carries a
//! `// SAFETY:` line. Handles travel as integers outside this module.
//!
//! Facts the rest of the crate guarantees (and these functions rely on):
//! - nothing here is called before [`present`] said the driver library loads (cudarc
//!   panics on a missing library instead of returning an error);
//! - the backend is thread-affine: every call of a stream runs on that stream's worker
//!   thread, where [`make_current`] made the device's context current;
//! - objects are destroyed only once no pending work uses them (the core frees behind
//!   events through its drop queue).

use std::ffi::{CStr, c_void};

use capture_core::PoolName;
use capture_core::ServerError;
use cudarc::driver::sys::{self, CUresult};

use crate::error::{Unavailable, cu_error, out_of_memory, unavailable};

fn check(op: &'static str, code: CUresult) -> Result<(), ServerError> {
    match code {
        CUresult::CUDA_SUCCESS => Ok(()),
        other => Err(cu_error(op, other)),
    }
}

/// Whether the driver library (`libcuda.so`) can be loaded.
pub(crate) fn present() -> bool {
    // SAFETY: the check only tries to load the library; it calls no driver function.
    unsafe { sys::is_culib_present() }
}

/// Whether the NVRTC library can be loaded.
pub(crate) fn nvrtc_present() -> bool {
    // SAFETY: as above, for NVRTC.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// What the driver says about the device it opened.
#[derive(Clone, Debug)]
pub(crate) struct Opened {
    pub(crate) context: usize,
    pub(crate) device: i32,
    pub(crate) name: String,
    pub(crate) compute: (i32, i32),
    pub(crate) driver: i32,
}

/// Initialises the driver and retains device `ordinal`'s primary context.
pub(crate) fn open(ordinal: i32) -> Result<Opened, Unavailable> {
    let fail = |op: &str, code: CUresult| unavailable(format!("{op} failed: {code:?}"));
    // SAFETY: `present()` was checked by the caller; cuInit takes no pointers.
    let code = unsafe { sys::cuInit(0) };
    if code != CUresult::CUDA_SUCCESS {
        return Err(fail("cuInit", code));
    }
    let mut count = 0;
    // SAFETY: `count` is a valid out-pointer.
    let code = unsafe { sys::cuDeviceGetCount(&mut count) };
    if code != CUresult::CUDA_SUCCESS {
        return Err(fail("cuDeviceGetCount", code));
    }
    if count <= ordinal {
        return Err(unavailable(format!(
            "no CUDA device {ordinal} ({count} found)"
        )));
    }
    let mut device = 0;
    // SAFETY: `device` is a valid out-pointer; the ordinal is below the count.
    let code = unsafe { sys::cuDeviceGet(&mut device, ordinal) };
    if code != CUresult::CUDA_SUCCESS {
        return Err(fail("cuDeviceGet", code));
    }
    let mut name = [0 as std::ffi::c_char; 256];
    // SAFETY: the buffer is 256 bytes long, as passed.
    let code = unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), 256, device) };
    let name = if code == CUresult::CUDA_SUCCESS {
        // SAFETY: the driver wrote a NUL-terminated string into the buffer.
        unsafe { CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    } else {
        "unnamed device".into()
    };
    let attribute = |a: sys::CUdevice_attribute| {
        let mut v = 0;
        // SAFETY: `v` is a valid out-pointer; the device is valid.
        let code = unsafe { sys::cuDeviceGetAttribute(&mut v, a, device) };
        if code == CUresult::CUDA_SUCCESS { v } else { 0 }
    };
    let compute = (
        attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
        attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
    );
    let mut driver = 0;
    // SAFETY: `driver` is a valid out-pointer.
    let _ = unsafe { sys::cuDriverGetVersion(&mut driver) };
    let mut context = std::ptr::null_mut();
    // SAFETY: `context` is a valid out-pointer; the device is valid.
    let code = unsafe { sys::cuDevicePrimaryCtxRetain(&mut context, device) };
    if code != CUresult::CUDA_SUCCESS {
        return Err(fail("cuDevicePrimaryCtxRetain", code));
    }
    Ok(Opened {
        context: context as usize,
        device,
        name,
        compute,
        driver,
    })
}

/// Releases the primary context retained by [`open`].
pub(crate) fn release(device: i32) {
    // SAFETY: the context was retained once by `open` and every object made in it is
    // gone (the backend's last handle is dropping).
    let _ = unsafe { sys::cuDevicePrimaryCtxRelease_v2(device) };
}

/// Makes `context` current on the calling thread.
pub(crate) fn make_current(context: usize) -> Result<(), ServerError> {
    // SAFETY: the context is retained for the backend's life.
    check("cuCtxSetCurrent", unsafe {
        sys::cuCtxSetCurrent(context as sys::CUcontext)
    })
}

/// A non-blocking stream.
pub(crate) fn stream_create() -> Result<usize, ServerError> {
    let mut stream = std::ptr::null_mut();
    // SAFETY: `stream` is a valid out-pointer; the context is current.
    check("cuStreamCreate", unsafe {
        sys::cuStreamCreate(
            &mut stream,
            sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
        )
    })?;
    Ok(stream as usize)
}

/// Destroys a stream whose work has completed.
pub(crate) fn stream_destroy(stream: usize) {
    // SAFETY: the caller synchronised the stream first.
    let _ = unsafe { sys::cuStreamDestroy_v2(stream as sys::CUstream) };
}

/// Waits for everything enqueued on `stream`.
pub(crate) fn stream_sync(stream: usize) -> Result<(), ServerError> {
    // SAFETY: the stream is live; the context is current.
    check("cuStreamSynchronize", unsafe {
        sys::cuStreamSynchronize(stream as sys::CUstream)
    })
}

/// `size` bytes of device memory.
pub(crate) fn mem_alloc(size: u64, pool: PoolName) -> Result<u64, ServerError> {
    let mut ptr = 0;
    // SAFETY: `ptr` is a valid out-pointer; the context is current.
    match unsafe { sys::cuMemAlloc_v2(&mut ptr, size as usize) } {
        CUresult::CUDA_SUCCESS => Ok(ptr),
        code => Err(out_of_memory("cuMemAlloc", size, pool, code)),
    }
}

/// Frees device memory no pending work uses.
pub(crate) fn mem_free(ptr: u64) {
    // SAFETY: the core frees a page only once nothing uses it.
    let _ = unsafe { sys::cuMemFree_v2(ptr) };
}

/// `size` bytes of pinned (page-locked) host memory.
pub(crate) fn host_alloc(size: u64, pool: PoolName) -> Result<usize, ServerError> {
    let mut ptr = std::ptr::null_mut();
    // SAFETY: `ptr` is a valid out-pointer; the context is current.
    match unsafe { sys::cuMemHostAlloc(&mut ptr, size as usize, sys::CU_MEMHOSTALLOC_PORTABLE) } {
        CUresult::CUDA_SUCCESS => Ok(ptr as usize),
        code => Err(out_of_memory("cuMemHostAlloc", size, pool, code)),
    }
}

/// Frees pinned host memory no pending work uses.
pub(crate) fn host_free(ptr: usize) {
    // SAFETY: as for device memory.
    let _ = unsafe { sys::cuMemFreeHost(ptr as *mut c_void) };
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
        sys::cuMemcpyHtoDAsync_v2(dst, src as *const c_void, len, stream as sys::CUstream)
    })
}

/// Copies device memory to `out` on `stream` and waits for it. An asynchronous copy on
/// the stream's own non-blocking stream, never the legacy default stream: a synchronous
/// copy from another thread is an unsafe call while a global-mode capture is open.
pub(crate) fn copy_to_host(out: &mut [u8], src: u64, stream: usize) -> Result<(), ServerError> {
    // SAFETY: the source range lies in a live page; `out` outlives the copy because the
    // stream is synchronised before returning.
    check("cuMemcpyDtoHAsync", unsafe {
        sys::cuMemcpyDtoHAsync_v2(
            out.as_mut_ptr() as *mut c_void,
            src,
            out.len(),
            stream as sys::CUstream,
        )
    })?;
    stream_sync(stream)
}

/// Records an event on `stream` (creating it), signalled once everything enqueued so far
/// has run.
pub(crate) fn event_record(stream: usize) -> Result<usize, ServerError> {
    let mut event = std::ptr::null_mut();
    // SAFETY: `event` is a valid out-pointer; the context is current.
    check("cuEventCreate", unsafe {
        sys::cuEventCreate(
            &mut event,
            sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32,
        )
    })?;
    // SAFETY: the event was just created and the stream is live and not capturing (the
    // core never fences a recording stream).
    let code = unsafe { sys::cuEventRecord(event, stream as sys::CUstream) };
    if code != CUresult::CUDA_SUCCESS {
        event_destroy(event as usize);
        return Err(cu_error("cuEventRecord", code));
    }
    Ok(event as usize)
}

/// Waits for `event`, from any thread: `context` is made current first.
pub(crate) fn event_wait(context: usize, event: usize) -> Result<(), ServerError> {
    make_current(context)?;
    // SAFETY: the event is live until the fence that owns it drops.
    check("cuEventSynchronize", unsafe {
        sys::cuEventSynchronize(event as sys::CUevent)
    })
}

/// Makes everything enqueued on `stream` from now on wait, on the device, for `event`
/// (recorded on another stream of the same context).
pub(crate) fn stream_wait_event(
    context: usize,
    stream: usize,
    event: usize,
) -> Result<(), ServerError> {
    make_current(context)?;
    // SAFETY: the stream is live and not capturing (the core never orders a recording
    // stream); the event is live until the fence that owns it drops, and a wait already
    // enqueued does not need it to outlive the call.
    check("cuStreamWaitEvent", unsafe {
        sys::cuStreamWaitEvent(stream as sys::CUstream, event as sys::CUevent, 0)
    })
}

/// Destroys an event.
pub(crate) fn event_destroy(event: usize) {
    // SAFETY: the event is owned by the caller and not waited on elsewhere.
    let _ = unsafe { sys::cuEventDestroy_v2(event as sys::CUevent) };
}

/// Loads a module from NUL-terminated PTX.
pub(crate) fn module_load(ptx: &CStr) -> Result<usize, ServerError> {
    let mut module = std::ptr::null_mut();
    // SAFETY: `ptx` is NUL-terminated text; `module` is a valid out-pointer.
    check("cuModuleLoadData", unsafe {
        sys::cuModuleLoadData(&mut module, ptx.as_ptr() as *const c_void)
    })?;
    Ok(module as usize)
}

/// The kernel `name` of a loaded module.
pub(crate) fn module_function(module: usize, name: &CStr) -> Result<usize, ServerError> {
    let mut function = std::ptr::null_mut();
    // SAFETY: the module is loaded; `name` is NUL-terminated.
    check("cuModuleGetFunction", unsafe {
        sys::cuModuleGetFunction(&mut function, module as sys::CUmodule, name.as_ptr())
    })?;
    Ok(function as usize)
}

/// Unloads a module no pending work uses.
pub(crate) fn module_unload(module: usize) {
    // SAFETY: the kernel registry drops modules with the device, after its streams.
    let _ = unsafe { sys::cuModuleUnload(module as sys::CUmodule) };
}

/// The most 64-bit arguments a launch passes: the core's most buffers (a pointer and a
/// length each) and the info words' pointer.
pub(crate) const MAX_ARGS: usize = 2 * capture_core::MAX_LAUNCH_BUFFERS + 1;

/// Enqueues (or records) a launch of `function` with `args` (each a 64-bit value, at
/// most [`MAX_ARGS`]).
pub(crate) fn launch(
    function: usize,
    grid: [u32; 3],
    block: u32,
    stream: usize,
    args: &mut [u64],
) -> Result<(), ServerError> {
    let mut params = [std::ptr::null_mut::<c_void>(); MAX_ARGS];
    for (slot, arg) in params.iter_mut().zip(args.iter_mut()) {
        *slot = arg as *mut u64 as *mut c_void;
    }
    // SAFETY: every parameter points at a 64-bit value that lives across the call (the
    // driver copies them at enqueue); the kernel's signature takes exactly these 64-bit
    // arguments (pointers and byte lengths).
    check("cuLaunchKernel", unsafe {
        sys::cuLaunchKernel(
            function as sys::CUfunction,
            grid[0],
            grid[1],
            grid[2],
            block,
            1,
            1,
            0,
            stream as sys::CUstream,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    })
}

/// Starts a global-mode capture on `stream`.
pub(crate) fn begin_capture(stream: usize) -> Result<(), ServerError> {
    // SAFETY: the stream is live and not capturing (the core moved it to Capture once).
    check("cuStreamBeginCapture", unsafe {
        sys::cuStreamBeginCapture_v2(
            stream as sys::CUstream,
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
        )
    })
}

/// Ends the capture on `stream`, returning the graph it recorded.
pub(crate) fn end_capture(stream: usize) -> Result<usize, ServerError> {
    let mut graph = std::ptr::null_mut();
    // SAFETY: the stream began a capture on this thread (thread-affine backend).
    check("cuStreamEndCapture", unsafe {
        sys::cuStreamEndCapture(stream as sys::CUstream, &mut graph)
    })?;
    Ok(graph as usize)
}

/// How many memory allocation or free nodes `graph` holds.
pub(crate) fn memory_nodes(graph: usize) -> Result<usize, ServerError> {
    let mut count = 0usize;
    // SAFETY: querying the count with a null node array is the documented first step.
    check("cuGraphGetNodes", unsafe {
        sys::cuGraphGetNodes(graph as sys::CUgraph, std::ptr::null_mut(), &mut count)
    })?;
    let mut nodes = vec![std::ptr::null_mut(); count];
    // SAFETY: `nodes` holds `count` slots.
    check("cuGraphGetNodes", unsafe {
        sys::cuGraphGetNodes(graph as sys::CUgraph, nodes.as_mut_ptr(), &mut count)
    })?;
    let mut memory = 0;
    for node in nodes.into_iter().take(count) {
        let mut kind = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
        // SAFETY: `node` belongs to the live graph; `kind` is a valid out-pointer.
        check("cuGraphNodeGetType", unsafe {
            sys::cuGraphNodeGetType(node, &mut kind)
        })?;
        if matches!(
            kind,
            sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_ALLOC
                | sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_FREE
        ) {
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
        sys::cuGraphInstantiateWithFlags(&mut exec, graph as sys::CUgraph, 0)
    })?;
    Ok(exec as usize)
}

/// Uploads an executable graph ahead of its first launch.
pub(crate) fn upload(exec: usize, stream: usize) -> Result<(), ServerError> {
    // SAFETY: both handles are live.
    check("cuGraphUpload", unsafe {
        sys::cuGraphUpload(exec as sys::CUgraphExec, stream as sys::CUstream)
    })
}

/// Enqueues a launch of an executable graph.
pub(crate) fn launch_graph(exec: usize, stream: usize) -> Result<(), ServerError> {
    // SAFETY: both handles are live; the stream is not capturing.
    check("cuGraphLaunch", unsafe {
        sys::cuGraphLaunch(exec as sys::CUgraphExec, stream as sys::CUstream)
    })
}

/// Destroys an executable graph no pending launch uses.
pub(crate) fn exec_destroy(exec: usize) {
    // SAFETY: the core drops executables behind the event after their last launch.
    let _ = unsafe { sys::cuGraphExecDestroy(exec as sys::CUgraphExec) };
}

/// Destroys a graph.
pub(crate) fn graph_destroy(graph: usize) {
    // SAFETY: the graph is owned by the caller; its executables are independent.
    let _ = unsafe { sys::cuGraphDestroy(graph as sys::CUgraph) };
}

/// Compiles CUDA C to PTX for `arch` with NVRTC, without FMA contraction.
pub(crate) fn compile_ptx(
    source: &str,
    arch: &'static str,
    name: &str,
) -> Result<String, ServerError> {
    let options = cudarc::nvrtc::CompileOptions {
        arch: Some(arch),
        fmad: Some(false),
        name: Some(name.to_string()),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(source, options)
        .map(|ptx| ptx.to_src())
        .map_err(|e| ServerError::invalid("CUDA C kernels", name, e.to_string()))
}
