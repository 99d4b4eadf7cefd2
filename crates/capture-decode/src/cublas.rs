//! cuBLAS for the decoder's matrix-vector products on CUDA, loaded at run time and
//! called through foreign work ([`Device::foreign_work`](capture_graphs::Device::foreign_work)):
//! each product is one `cublasSgemm_v2` on the stream the work is given, with the
//! library's workspace set to a buffer the decoder declares read-write, so a graph that
//! records the call owns the workspace (the bug every peer shipped: a workspace freed
//! under a live graph cannot happen). The handle is made on the first call, which is
//! warmup's eager run, never inside a window.
//!
//! Where cuBLAS is looked for: `CAPTURE_CUBLAS` (a path to `libcublas.so.*`), else the
//! loader's path (`libcublas.so.13`, `.12`, `libcublas.so`); the GPU bundle's `run.sh`
//! points `CAPTURE_CUBLAS` at the copy PyTorch installs. `CAPTURE_REQUIRE_CUBLAS=1`
//! makes a missing cuBLAS an error instead of the decoder's own kernel.
//!
//! The only unsafe code of the program: the FFI, each block with a `// SAFETY:` line.

use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex};

use capture_graphs::ServerError;
use capture_graphs::cuda::{CudaBackend, CudaWork, CudaWorkCall};

use super::backend::GemmLibrary;

/// `cublasOperation_t`: `CUBLAS_OP_N`, `CUBLAS_OP_T`.
const OP_N: c_int = 0;
const OP_T: c_int = 1;

/// The workspace handed to cuBLAS: 32 MiB, what NVIDIA recommends on Hopper, plus room
/// to align its start to 256 bytes.
pub const WORKSPACE_BYTES: u64 = (32 << 20) + 256;

type Handle = *mut c_void;

// SAFETY: function-pointer types only; each call site says why a call is sound.
type Create = unsafe extern "C" fn(*mut Handle) -> c_int;
// SAFETY: as above, a type.
type Destroy = unsafe extern "C" fn(Handle) -> c_int;
// SAFETY: as above, a type.
type SetStream = unsafe extern "C" fn(Handle, *mut c_void) -> c_int;
// SAFETY: as above, a type.
type SetWorkspace = unsafe extern "C" fn(Handle, *mut c_void, usize) -> c_int;
// SAFETY: as above, a type.
type Sgemm = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    *const f32,
    *const f32,
    c_int,
    *const f32,
    c_int,
    *const f32,
    *mut f32,
    c_int,
) -> c_int;

/// The entry points used, as `cublas_api.h` declares them.
struct Api {
    create: Create,
    destroy: Destroy,
    set_stream: SetStream,
    set_workspace: SetWorkspace,
    sgemm: Sgemm,
}

/// cuBLAS, loaded, and its handle once the first call has made it.
pub struct Cublas {
    api: Api,
    /// The handle, made by the first call (with the backend's context current), as an
    /// address; calls are serialised on it.
    handle: Mutex<usize>,
    /// Where it was loaded from.
    pub path: String,
    _lib: libloading::Library,
}

impl std::fmt::Debug for Cublas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cublas").field("path", &self.path).finish()
    }
}

/// Whether `CAPTURE_REQUIRE_CUBLAS=1`.
pub fn required() -> bool {
    std::env::var("CAPTURE_REQUIRE_CUBLAS").is_ok_and(|v| v == "1")
}

impl Cublas {
    /// Loads cuBLAS from `CAPTURE_CUBLAS` or the loader's path.
    ///
    /// # Errors
    ///
    /// Why no cuBLAS could be loaded: every place tried, with the loader's message.
    pub fn load() -> Result<Self, String> {
        let candidates: Vec<String> = match std::env::var("CAPTURE_CUBLAS") {
            Ok(path) if !path.is_empty() => vec![path],
            _ => ["libcublas.so.13", "libcublas.so.12", "libcublas.so"]
                .map(String::from)
                .to_vec(),
        };
        let mut tried = Vec::new();
        for name in candidates {
            // SAFETY: loading cuBLAS runs its initialisers, which only register the
            // library with the CUDA runtime.
            match unsafe { libloading::Library::new(&name) } {
                Ok(lib) => return Self::from_library(lib, name),
                Err(e) => tried.push(format!("{name}: {e}")),
            }
        }
        Err(tried.join("; "))
    }

    fn from_library(lib: libloading::Library, path: String) -> Result<Self, String> {
        let missing = |e: libloading::Error| format!("{path}: {e}");
        // SAFETY: each symbol is cublas_api.h's entry point of that name, with the
        // signature its type gives it; the library stays loaded as long as `self`.
        let api = unsafe {
            Api {
                create: *lib.get::<Create>(b"cublasCreate_v2\0").map_err(missing)?,
                destroy: *lib.get::<Destroy>(b"cublasDestroy_v2\0").map_err(missing)?,
                set_stream: *lib
                    .get::<SetStream>(b"cublasSetStream_v2\0")
                    .map_err(missing)?,
                set_workspace: *lib
                    .get::<SetWorkspace>(b"cublasSetWorkspace_v2\0")
                    .map_err(missing)?,
                sgemm: *lib.get::<Sgemm>(b"cublasSgemm_v2\0").map_err(missing)?,
            }
        };
        Ok(Self {
            api,
            handle: Mutex::new(0),
            path,
            _lib: lib,
        })
    }

    /// `out = w · x` (`out += w · x` when `accumulate`) with `w` row-major `[rows, cols]`,
    /// as one SGEMM on `call`'s stream over its four declared ranges `(w, x, out,
    /// workspace)`.
    fn gemv(
        &self,
        call: &CudaWorkCall<'_>,
        rows: u32,
        cols: u32,
        accumulate: bool,
    ) -> Result<(), String> {
        let [w, x, out, workspace] = call.ranges() else {
            return Err(format!(
                "cuBLAS SGEMM takes 4 ranges, got {}",
                call.ranges().len()
            ));
        };
        let need = |r: &capture_graphs::cuda::CudaRange, bytes: u64, what: &str| {
            if r.bytes < bytes {
                Err(format!(
                    "{what}: {} bytes declared, {bytes} needed",
                    r.bytes
                ))
            } else {
                Ok(())
            }
        };
        let (rows64, cols64) = (u64::from(rows), u64::from(cols));
        need(w, rows64 * cols64 * 4, "w")?;
        need(x, cols64 * 4, "x")?;
        need(out, rows64 * 4, "out")?;
        let aligned = workspace.ptr.next_multiple_of(256);
        let pad = aligned - workspace.ptr;
        need(workspace, pad + 256, "workspace")?;
        let mut handle = self
            .handle
            .lock()
            .map_err(|_| "cuBLAS handle lock poisoned")?;
        let check = |what: &str, status: c_int| {
            if status == 0 {
                Ok(())
            } else {
                Err(format!("{what} returned cuBLAS status {status}"))
            }
        };
        if *handle == 0 {
            let mut made: Handle = std::ptr::null_mut();
            // SAFETY: the backend made its context current for this call; the
            // out-pointer is valid. The first call is warmup's, outside any window.
            check("cublasCreate_v2", unsafe { (self.api.create)(&mut made) })?;
            *handle = made as usize;
        }
        let h = *handle as Handle;
        let (alpha, beta) = (1.0f32, if accumulate { 1.0f32 } else { 0.0 });
        let (m, k) = (rows as c_int, cols as c_int);
        // SAFETY: the handle is live; the stream is the one this call is given; the
        // workspace is the declared read-write range, aligned to 256 bytes and within
        // it; `w` (column-major `[cols, rows]`, read transposed), `x` and `out` are the
        // declared ranges, each checked above to hold what the SGEMM touches; alpha and
        // beta live across the call (host pointer mode: their values are read at the
        // call, and recorded into the graph inside a window).
        unsafe {
            check(
                "cublasSetStream_v2",
                (self.api.set_stream)(h, call.stream()),
            )?;
            check(
                "cublasSetWorkspace_v2",
                (self.api.set_workspace)(
                    h,
                    aligned as *mut c_void,
                    (workspace.bytes - pad) as usize,
                ),
            )?;
            check(
                "cublasSgemm_v2",
                (self.api.sgemm)(
                    h,
                    OP_T,
                    OP_N,
                    m,
                    1,
                    k,
                    &alpha,
                    w.ptr as *const f32,
                    k,
                    x.ptr as *const f32,
                    k,
                    &beta,
                    out.ptr as *mut f32,
                    m,
                ),
            )
        }
    }

    /// The decoder's products through this cuBLAS: one [`CudaWork`] per call, keeping
    /// the library and its handle alive as long as a graph may replay the call.
    pub fn library(self) -> GemmLibrary<CudaBackend> {
        let name = format!("cuBLAS SGEMM ({})", self.path);
        let cublas = Arc::new(self);
        GemmLibrary {
            name,
            workspace_bytes: WORKSPACE_BYTES,
            work: Box::new(move |rows, cols, accumulate| {
                let c = Arc::clone(&cublas);
                // SAFETY: the work makes one cublasSgemm_v2 on the stream it is given,
                // over the four declared ranges only (w and x read, out written or
                // read-written when accumulating, the workspace read-written), with
                // the library's workspace set to the declared one so cuBLAS allocates
                // nothing; it synchronises nothing; its handle is made on the first
                // run, which is warmup's eager run; the library is kept by the work.
                unsafe {
                    CudaWork::new("cublas_sgemm", move |call: &CudaWorkCall<'_>| {
                        c.gemv(call, rows, cols, accumulate)
                    })
                }
                .keep(Arc::clone(&cublas) as Arc<dyn std::any::Any + Send + Sync>)
            }),
        }
    }
}

impl Drop for Cublas {
    fn drop(&mut self) {
        let handle = self.handle.get_mut().map(|h| *h).unwrap_or(0);
        if handle != 0 {
            // SAFETY: the last work holding the library is gone, so no graph can replay
            // a call on the handle any more; destroying it frees cuBLAS's own state.
            unsafe { (self.api.destroy)(handle as Handle) };
        }
    }
}

/// The decoder's GEMM library on CUDA: cuBLAS where it loads, unless the process runs
/// on the CUDA driver model (`CAPTURE_CUDA_MODEL=1`, where no real library can run);
/// `None` runs the decoder's own kernel.
///
/// # Errors
///
/// `CAPTURE_REQUIRE_CUBLAS=1` and no cuBLAS could be loaded.
pub fn gemm_library() -> Result<Option<GemmLibrary<CudaBackend>>, ServerError> {
    if std::env::var("CAPTURE_CUDA_MODEL").is_ok_and(|v| v == "1") && !required() {
        return Ok(None);
    }
    match Cublas::load() {
        Ok(cublas) => Ok(Some(cublas.library())),
        Err(why) if required() => Err(ServerError::invalid(
            "cuBLAS",
            "CAPTURE_REQUIRE_CUBLAS=1",
            format!("cuBLAS could not be loaded: {why}"),
        )),
        Err(why) => {
            tracing::info!("decode: no cuBLAS ({why}); the products run the decoder's own kernel");
            Ok(None)
        }
    }
}
