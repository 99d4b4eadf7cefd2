//! The CUDA floor's FFI: the driver API's entry points as cudarc declares them
//! (`cudarc::driver::sys`, loaded at run time from `libcuda.so.1` or its other names;
//! the same declarations capture-cuda's `cudarc` feature uses, not written again here),
//! each call wrapped in a method that takes handles and plain values and returns the raw
//! `CUresult` as an error. Every `unsafe` block has a `// SAFETY:` line.

#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};

use cudarc::driver::sys::{self, CUdevice_attribute, CUresult};

/// A driver call that did not return `CUDA_SUCCESS`: its name and its code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Call {
    /// The entry point.
    pub(super) call: &'static str,
    /// The `CUresult`.
    pub(super) code: c_int,
    /// The code's name, where the driver knows it.
    pub(super) name: Option<String>,
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.name {
            Some(name) => write!(f, "{} returned {name} ({})", self.call, self.code),
            None => write!(f, "{} returned {}", self.call, self.code),
        }
    }
}

/// `CUDA_ERROR_NO_DEVICE`.
pub(super) const NO_DEVICE: c_int = 100;
/// `CUDA_ERROR_STUB_LIBRARY`: the toolkit's stub `libcuda.so`, not a driver.
pub(super) const STUB_LIBRARY: c_int = 34;
/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR` and `_MINOR`.
pub(super) const CAPABILITY: (CUdevice_attribute, CUdevice_attribute) = (
    CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
    CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
);
/// `CU_STREAM_NON_BLOCKING`.
const NON_BLOCKING: c_uint = 1;

/// The driver library, found: each entry point is loaded at its first call.
#[derive(Debug)]
pub(super) struct Driver(());

/// A driver object: its handle as a plain value.
pub(super) type Object = usize;

impl Driver {
    /// Finds the driver library (where the dynamic loader looks), or says why not.
    pub(super) fn load() -> Result<Self, String> {
        // SAFETY: loading the driver runs its initialisers, which is what loading it is
        // for; nothing in the process depends on it being absent.
        if unsafe { sys::is_culib_present() } {
            Ok(Self(()))
        } else {
            Err("cannot load libcuda.so.1 (nor another name of the CUDA driver library)".into())
        }
    }

    fn check(&self, call: &'static str, result: CUresult) -> Result<(), Call> {
        if result == CUresult::CUDA_SUCCESS {
            return Ok(());
        }
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: `cuGetErrorName` writes a pointer to a static NUL-terminated string,
        // or fails.
        let named = unsafe { sys::cuGetErrorName(result, &mut text) } == CUresult::CUDA_SUCCESS;
        let name = (named && !text.is_null()).then(|| {
            // SAFETY: the driver's static string, NUL-terminated (checked non-null).
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned()
        });
        Err(Call {
            call,
            code: result as c_int,
            name,
        })
    }

    /// `cuInit(0)`.
    pub(super) fn init(&self) -> Result<(), Call> {
        // SAFETY: takes no pointers; any thread may call it any number of times.
        self.check("cuInit", unsafe { sys::cuInit(0) })
    }

    /// Device `ordinal`.
    pub(super) fn device(&self, ordinal: i32) -> Result<c_int, Call> {
        let mut device = 0;
        // SAFETY: `device` is a valid out-pointer for the call.
        self.check("cuDeviceGet", unsafe {
            sys::cuDeviceGet(&mut device, ordinal)
        })?;
        Ok(device)
    }

    /// Attribute `attribute` of `device`.
    pub(super) fn attribute(
        &self,
        device: c_int,
        attribute: CUdevice_attribute,
    ) -> Result<c_int, Call> {
        let mut value = 0;
        // SAFETY: `value` is a valid out-pointer for the call.
        self.check("cuDeviceGetAttribute", unsafe {
            sys::cuDeviceGetAttribute(&mut value, attribute, device)
        })?;
        Ok(value)
    }

    /// Retains `device`'s primary context.
    pub(super) fn retain_primary(&self, device: c_int) -> Result<Object, Call> {
        let mut context: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: `context` is a valid out-pointer for the call.
        self.check("cuDevicePrimaryCtxRetain", unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut context, device)
        })?;
        Ok(context as Object)
    }

    /// Releases `device`'s primary context, once per retain.
    pub(super) fn release_primary(&self, device: c_int) {
        // SAFETY: the caller retained it and releases it once, after freeing what it made.
        let _ = unsafe { sys::cuDevicePrimaryCtxRelease_v2(device) };
    }

    /// Makes `context` current on this thread; returns the context it replaced.
    pub(super) fn enter(&self, context: Object) -> Result<Object, Call> {
        let mut previous: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: `previous` is a valid out-pointer for the call.
        self.check("cuCtxGetCurrent", unsafe {
            sys::cuCtxGetCurrent(&mut previous)
        })?;
        // SAFETY: `context` is a live context the caller retained.
        self.check("cuCtxSetCurrent", unsafe {
            sys::cuCtxSetCurrent(context as sys::CUcontext)
        })?;
        Ok(previous as Object)
    }

    /// Puts back the context [`Driver::enter`] replaced.
    pub(super) fn leave(&self, previous: Object) {
        // SAFETY: `previous` was current on this thread (or null: none) before `enter`.
        let _ = unsafe { sys::cuCtxSetCurrent(previous as sys::CUcontext) };
    }

    /// Loads module `image` (PTX, NUL-terminated, or a cubin) in the current context.
    pub(super) fn load_module(&self, image: &[u8]) -> Result<Object, Call> {
        let mut module: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: `image` is a whole PTX text with its NUL or a whole ELF image, alive
        // across the call; `module` is a valid out-pointer.
        self.check("cuModuleLoadData", unsafe {
            sys::cuModuleLoadData(&mut module, image.as_ptr().cast())
        })?;
        Ok(module as Object)
    }

    /// Entry point `name` of `module`.
    pub(super) fn function(&self, module: Object, name: &CStr) -> Result<Object, Call> {
        let mut function: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: `module` is live; `name` is NUL-terminated; `function` is a valid
        // out-pointer.
        self.check("cuModuleGetFunction", unsafe {
            sys::cuModuleGetFunction(&mut function, module as sys::CUmodule, name.as_ptr())
        })?;
        Ok(function as Object)
    }

    /// Unloads `module` (its context current).
    pub(super) fn unload_module(&self, module: Object) {
        // SAFETY: `module` is live and no launch of it is pending (the stream synced).
        let _ = unsafe { sys::cuModuleUnload(module as sys::CUmodule) };
    }

    /// A non-blocking stream in the current context.
    pub(super) fn stream(&self) -> Result<Object, Call> {
        let mut stream: sys::CUstream = std::ptr::null_mut();
        // SAFETY: `stream` is a valid out-pointer for the call.
        self.check("cuStreamCreate", unsafe {
            sys::cuStreamCreate(&mut stream, NON_BLOCKING)
        })?;
        Ok(stream as Object)
    }

    /// Destroys `stream`.
    pub(super) fn destroy_stream(&self, stream: Object) {
        // SAFETY: `stream` is live and synced.
        let _ = unsafe { sys::cuStreamDestroy_v2(stream as sys::CUstream) };
    }

    /// Waits for everything enqueued on `stream`.
    pub(super) fn sync(&self, stream: Object) -> Result<(), Call> {
        // SAFETY: `stream` is live.
        self.check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(stream as sys::CUstream)
        })
    }

    /// `bytes` of device memory in the current context.
    pub(super) fn alloc(&self, bytes: u64) -> Result<u64, Call> {
        let mut ptr = 0u64;
        // SAFETY: `ptr` is a valid out-pointer for the call.
        self.check("cuMemAlloc", unsafe {
            sys::cuMemAlloc_v2(&mut ptr, bytes as usize)
        })?;
        Ok(ptr)
    }

    /// Frees device memory `ptr`.
    pub(super) fn free(&self, ptr: u64) {
        // SAFETY: `ptr` came from `alloc` and no pending work uses it (the stream synced).
        let _ = unsafe { sys::cuMemFree_v2(ptr) };
    }

    /// `bytes` of pinned host memory.
    pub(super) fn host_alloc(&self, bytes: u64) -> Result<Object, Call> {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer for the call.
        self.check("cuMemHostAlloc", unsafe {
            sys::cuMemHostAlloc(&mut ptr, bytes as usize, 0)
        })?;
        Ok(ptr as Object)
    }

    /// Frees pinned host memory `ptr`.
    pub(super) fn host_free(&self, ptr: Object) {
        // SAFETY: `ptr` came from `host_alloc` and no pending copy uses it.
        let _ = unsafe { sys::cuMemFreeHost(ptr as *mut c_void) };
    }

    /// Copies `bytes` to device memory `dst` on `stream` and waits for the copy.
    pub(super) fn upload(&self, dst: u64, bytes: &[u8], stream: Object) -> Result<(), Call> {
        // SAFETY: `dst` holds `bytes.len()` bytes; `bytes` stays alive until the
        // synchronisation below, which this call makes before returning.
        self.check("cuMemcpyHtoDAsync", unsafe {
            sys::cuMemcpyHtoDAsync_v2(
                dst,
                bytes.as_ptr().cast(),
                bytes.len(),
                stream as sys::CUstream,
            )
        })?;
        self.sync(stream)
    }

    /// Enqueues a copy of `bytes` from device memory `src` to pinned memory `dst`.
    pub(super) fn download(
        &self,
        dst: Object,
        src: u64,
        bytes: usize,
        stream: Object,
    ) -> Result<(), Call> {
        // SAFETY: pinned `dst` and device `src` hold `bytes` and stay alive until the
        // stream is synced.
        self.check("cuMemcpyDtoHAsync", unsafe {
            sys::cuMemcpyDtoHAsync_v2(dst as *mut c_void, src, bytes, stream as sys::CUstream)
        })
    }

    /// Copies `out.len()` bytes out of pinned memory `src`, once the copies into it
    /// were waited for.
    pub(super) fn read_pinned(&self, src: Object, out: &mut [u8]) {
        // SAFETY: `src` is a live pinned allocation of at least `out.len()` bytes whose
        // pending copies the caller synced.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, out.as_mut_ptr(), out.len()) }
    }

    /// Enqueues `function` on `stream` over `grid` blocks of `block` threads, its
    /// parameters 8-byte words.
    pub(super) fn launch(
        &self,
        function: Object,
        grid: [u32; 3],
        block: [u32; 3],
        stream: Object,
        words: &[u64],
    ) -> Result<(), Call> {
        let mut values = words.to_vec();
        let mut params: Vec<*mut c_void> =
            values.iter_mut().map(|w| (w as *mut u64).cast()).collect();
        // SAFETY: `function`'s parameters are 8-byte words, one per entry of `params`,
        // each pointing at a live value for the call (the driver copies them); `stream`
        // is live.
        self.check("cuLaunchKernel", unsafe {
            sys::cuLaunchKernel(
                function as sys::CUfunction,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                0,
                stream as sys::CUstream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })
    }
}
