//! The loop setter (rule 30, `kernels/loop_setter.cu`) builds to exactly the images the
//! crate ships: NVRTC (`-rdc=true`) to the PTX for compute_80 and compute_90 and to
//! relocatable cubins for sm_80 and sm_90, which nvJitLink links against the pinned
//! nvidia-cuda-runtime-cu12 wheel's libcudadevrt.a (the device runtime that
//! `cudaGraphSetConditional` lives in) into the shipped cubins. No GPU needed.
//! `CAPTURE_UPDATE_PTX=1` rewrites the shipped images from the build instead.
//!
//! It needs the pinned NVRTC (as the builtins' test), nvJitLink (`libnvJitLink.so.12`,
//! from `CAPTURE_NVJITLINK` or the loader's path) and libcudadevrt.a
//! (`CAPTURE_CUDADEVRT`); `cargo xtask test` fetches both wheels and sets
//! `CAPTURE_REQUIRE_NVJITLINK=1`, without which a missing piece says `SKIP:`.

use std::ffi::{CString, c_char, c_int, c_void};

use capture_cuda::{
    LOOP_SETTER_SM80, LOOP_SETTER_SM80_CUBIN, LOOP_SETTER_SM90, LOOP_SETTER_SM90_CUBIN,
    NVRTC_RELEASE, compile_loop_setter, nvrtc_version,
};

type Handle = *mut c_void;

/// `NVJITLINK_INPUT_CUBIN`, `NVJITLINK_INPUT_LIBRARY` (nvJitLink.h).
const INPUT_CUBIN: c_int = 1;
const INPUT_LIBRARY: c_int = 6;

/// nvJitLink.h's entry points the link calls.
struct NvJitLink {
    _lib: libloading::Library,
    // SAFETY: function-pointer types only; each call below says why it is sound.
    version: unsafe extern "C" fn(*mut u32, *mut u32) -> c_int,
    // SAFETY: as above, a type.
    create: unsafe extern "C" fn(*mut Handle, u32, *const *const c_char) -> c_int,
    // SAFETY: as above, a type.
    add_data: unsafe extern "C" fn(Handle, c_int, *const c_void, usize, *const c_char) -> c_int,
    // SAFETY: as above, a type.
    add_file: unsafe extern "C" fn(Handle, c_int, *const c_char) -> c_int,
    // SAFETY: as above, a type.
    complete: unsafe extern "C" fn(Handle) -> c_int,
    // SAFETY: as above, a type.
    cubin_size: unsafe extern "C" fn(Handle, *mut usize) -> c_int,
    // SAFETY: as above, a type.
    cubin: unsafe extern "C" fn(Handle, *mut c_void) -> c_int,
    // SAFETY: as above, a type.
    log_size: unsafe extern "C" fn(Handle, *mut usize) -> c_int,
    // SAFETY: as above, a type.
    log: unsafe extern "C" fn(Handle, *mut c_char) -> c_int,
    // SAFETY: as above, a type.
    destroy: unsafe extern "C" fn(*mut Handle) -> c_int,
}

impl NvJitLink {
    fn load() -> Result<Self, String> {
        let name = std::env::var("CAPTURE_NVJITLINK").unwrap_or("libnvJitLink.so.12".into());
        // SAFETY: loading nvJitLink runs its initialisers, which have no preconditions;
        // each symbol is nvJitLink.h's entry point of that name and signature (the
        // release's own names, which nvJitLink.h maps the generic ones to).
        unsafe {
            let lib = libloading::Library::new(&name).map_err(|e| format!("{name}: {e}"))?;
            let get = |symbol: &str| format!("{name} lacks {symbol}");
            Ok(Self {
                version: *lib
                    .get(b"nvJitLinkVersion\0")
                    .map_err(|_| get("nvJitLinkVersion"))?,
                create: *lib
                    .get(b"__nvJitLinkCreate_12_9\0")
                    .map_err(|_| get("nvJitLinkCreate 12.9"))?,
                add_data: *lib
                    .get(b"__nvJitLinkAddData_12_9\0")
                    .map_err(|_| get("nvJitLinkAddData"))?,
                add_file: *lib
                    .get(b"__nvJitLinkAddFile_12_9\0")
                    .map_err(|_| get("nvJitLinkAddFile"))?,
                complete: *lib
                    .get(b"__nvJitLinkComplete_12_9\0")
                    .map_err(|_| get("nvJitLinkComplete"))?,
                cubin_size: *lib
                    .get(b"__nvJitLinkGetLinkedCubinSize_12_9\0")
                    .map_err(|_| get("nvJitLinkGetLinkedCubinSize"))?,
                cubin: *lib
                    .get(b"__nvJitLinkGetLinkedCubin_12_9\0")
                    .map_err(|_| get("nvJitLinkGetLinkedCubin"))?,
                log_size: *lib
                    .get(b"__nvJitLinkGetErrorLogSize_12_9\0")
                    .map_err(|_| get("nvJitLinkGetErrorLogSize"))?,
                log: *lib
                    .get(b"__nvJitLinkGetErrorLog_12_9\0")
                    .map_err(|_| get("nvJitLinkGetErrorLog"))?,
                destroy: *lib
                    .get(b"__nvJitLinkDestroy_12_9\0")
                    .map_err(|_| get("nvJitLinkDestroy"))?,
                _lib: lib,
            })
        }
    }

    fn version(&self) -> (u32, u32) {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: both out-pointers are valid.
        unsafe { (self.version)(&mut major, &mut minor) };
        (major, minor)
    }

    /// `relocatable` (NVRTC's `-rdc=true` cubin for `arch`) linked with `devrt`.
    fn link(&self, arch: &str, relocatable: &[u8], devrt: &str) -> Result<Vec<u8>, String> {
        let option = CString::new(format!("-arch={arch}")).unwrap();
        let options = [option.as_ptr()];
        let (name, devrt) = (c"loop_setter.cu", CString::new(devrt).unwrap());
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: every string is NUL-terminated and outlives the calls; `relocatable`
        // is read for its length; the handle is created once, used, and destroyed once;
        // each buffer holds the size nvJitLink reported.
        unsafe {
            let code = (self.create)(&mut handle, 1, options.as_ptr());
            if code != 0 {
                return Err(format!("nvJitLinkCreate failed ({code})"));
            }
            let mut codes = vec![
                (self.add_data)(
                    handle,
                    INPUT_CUBIN,
                    relocatable.as_ptr().cast(),
                    relocatable.len(),
                    name.as_ptr(),
                ),
                (self.add_file)(handle, INPUT_LIBRARY, devrt.as_ptr()),
            ];
            if codes.iter().all(|&c| c == 0) {
                codes.push((self.complete)(handle));
            }
            let result = if codes.iter().all(|&c| c == 0) {
                let mut size = 0;
                (self.cubin_size)(handle, &mut size);
                let mut out = vec![0u8; size];
                (self.cubin)(handle, out.as_mut_ptr().cast());
                Ok(out)
            } else {
                let mut size = 0;
                (self.log_size)(handle, &mut size);
                let mut log = vec![0u8; size + 1];
                (self.log)(handle, log.as_mut_ptr().cast());
                Err(format!(
                    "nvJitLink refused the link ({codes:?}): {}",
                    String::from_utf8_lossy(&log).trim_end_matches('\0')
                ))
            };
            (self.destroy)(&mut handle);
            result
        }
    }
}

/// Why the link cannot be checked here, if it cannot.
fn missing() -> Option<String> {
    match nvrtc_version() {
        Err(why) => return Some(format!("libnvrtc cannot be loaded: {why}")),
        Ok((library, version)) if version != NVRTC_RELEASE => {
            return Some(format!(
                "{library} is NVRTC {}.{}, not the pinned {}.{}",
                version.0, version.1, NVRTC_RELEASE.0, NVRTC_RELEASE.1
            ));
        }
        Ok(_) => {}
    }
    match std::env::var("CAPTURE_CUDADEVRT") {
        Ok(path) if std::path::Path::new(&path).is_file() => None,
        Ok(path) => Some(format!("CAPTURE_CUDADEVRT names {path}, which is no file")),
        Err(_) => Some("CAPTURE_CUDADEVRT does not name libcudadevrt.a".into()),
    }
}

#[test]
fn the_loop_setter_builds_to_the_shipped_ptx_and_cubins() {
    let required = std::env::var("CAPTURE_REQUIRE_NVJITLINK").is_ok_and(|v| v == "1");
    if let Some(why) = missing() {
        assert!(!required, "CAPTURE_REQUIRE_NVJITLINK=1 but {why}");
        println!("SKIP: loop setter: {why} (cargo xtask test provides it)");
        return;
    }
    let jit = match NvJitLink::load() {
        Ok(jit) => jit,
        Err(why) => {
            assert!(!required, "CAPTURE_REQUIRE_NVJITLINK=1 but {why}");
            println!("SKIP: loop setter: {why}");
            return;
        }
    };
    assert_eq!(jit.version(), (12, 9), "nvJitLink is not the pinned 12.9");
    let devrt = std::env::var("CAPTURE_CUDADEVRT").unwrap();
    let update = std::env::var("CAPTURE_UPDATE_PTX").is_ok_and(|v| v == "1");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/kernels");
    for (arch, ptx, cubin) in [
        ("80", LOOP_SETTER_SM80, LOOP_SETTER_SM80_CUBIN),
        ("90", LOOP_SETTER_SM90, LOOP_SETTER_SM90_CUBIN),
    ] {
        let built = compile_loop_setter(&format!("compute_{arch}")).unwrap();
        assert!(
            String::from_utf8_lossy(&built).contains(".extern .func cudaGraphSetConditional"),
            "the setter calls the device runtime"
        );
        let relocatable = compile_loop_setter(&format!("sm_{arch}")).unwrap();
        let linked = jit
            .link(&format!("sm_{arch}"), &relocatable, &devrt)
            .unwrap_or_else(|e| panic!("sm_{arch}: {e}"));
        if update {
            std::fs::write(format!("{dir}/loop_setter.sm_{arch}.ptx"), &built).unwrap();
            std::fs::write(format!("{dir}/loop_setter.sm_{arch}.cubin"), &linked).unwrap();
            continue;
        }
        assert!(
            built == ptx.as_bytes(),
            "kernels/loop_setter.sm_{arch}.ptx is not what NVRTC makes of loop_setter.cu \
             (CAPTURE_UPDATE_PTX=1 rewrites it)"
        );
        assert!(
            linked == cubin,
            "kernels/loop_setter.sm_{arch}.cubin is not what nvJitLink links (CAPTURE_UPDATE_PTX=1 \
             rewrites it)"
        );
    }
}
