//! What a kernel library's one symbol, `capture_model_run` (`driver/model.h`), does:
//! [`serve`] runs a launch through a [`Library`]'s kernels over the model's memory as a
//! kernel sees it: addresses the model vouches for, through its `inside` check, while it
//! runs the kernel under its lock. Each kernel library (this crate's `examples/kernels.rs`,
//! capture-decode's `examples/cuda_model_kernels.rs`) exports `capture_model_run` calling
//! it: the symbol is not defined here, so a second library can link this crate. The only
//! unsafe code of the crate, each block with a `// SAFETY:` line.

use std::ffi::{CStr, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::kernels::{self, HostKernel, Memory, ParamKernel, Range};

/// One kernel library's kernels, by entry point name: the parameter-list form's and the
/// pairs form's.
#[derive(Clone, Copy, Debug)]
pub struct Library {
    /// The parameter-list kernel named `entry`, if the library has one.
    pub params: fn(&str) -> Option<ParamKernel>,
    /// The pairs-form kernel named `entry`, if the library has one.
    pub pairs: fn(&str) -> Option<HostKernel>,
}

/// This crate's kernels: the builtins, the CUDA example's, the launch-model tests' and
/// the engine example's.
pub const KERNELS: Library = Library {
    params: kernels::find_params,
    pairs: kernels::find,
};

/// `struct capture_model_launch` of `driver/model.h`: one kernel run as the model hands
/// it over.
#[repr(C)]
#[derive(Debug)]
pub struct Launch {
    entry: *const c_char,
    grid: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
    param_count: u32,
    params: *const u8,
    param_offsets: *const usize,
    param_sizes: *const usize,
    // SAFETY: a function-pointer type; calling it is sound while the model runs the
    // kernel (see `ModelMemory::inside`).
    inside: unsafe extern "C" fn(u64, usize) -> c_int,
}

const RAN: c_int = 0;
const UNKNOWN: c_int = 1;
const FAULT: c_int = 2;

/// The model's allocations, through its `inside` check.
struct ModelMemory {
    // SAFETY: a function-pointer type, called only in `Memory::inside` below.
    inside: unsafe extern "C" fn(u64, usize) -> c_int,
}

impl Memory for ModelMemory {
    fn inside(&self, range: Range) -> bool {
        // SAFETY: the model's check reads only its allocation table, under the lock it
        // holds while the kernel runs.
        unsafe { (self.inside)(range.address, range.bytes) != 0 }
    }

    fn read(&self, range: Range) -> Vec<u8> {
        // SAFETY: `range` was checked inside one live allocation (the model's memory is
        // host memory at the device address), which nothing else touches while the model
        // runs this kernel under its lock.
        unsafe { std::slice::from_raw_parts(range.address as *const u8, range.bytes) }.to_vec()
    }

    fn write(&mut self, range: Range, bytes: &[u8]) {
        debug_assert_eq!(bytes.len(), range.bytes);
        // SAFETY: as for `read`; `bytes` is a copy, so the ranges do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), range.address as *mut u8, range.bytes)
        };
    }
}

/// Writes `message` into the caller's `error` buffer of `len` bytes, cut to fit and
/// NUL-terminated.
fn say(error: *mut c_char, len: usize, message: &str) {
    if error.is_null() || len == 0 {
        return;
    }
    let n = message.len().min(len - 1);
    // SAFETY: the model passes a buffer of `len` bytes; `n + 1 <= len`.
    unsafe {
        std::ptr::copy_nonoverlapping(message.as_ptr(), error as *mut u8, n);
        *error.add(n) = 0;
    }
}

/// Runs the kernel `launch` names from `library` over the model's memory
/// (`driver/model.h`'s `capture_model_run`): 0 when it ran, 1 when `library` has no host
/// implementation of that name (the model asks the next library), 2 when it faulted (a
/// range outside the live allocations, parameters it does not take, a panic), with a
/// line in `error`.
///
/// # Safety
///
/// `launch` points at a valid `struct capture_model_launch` whose pointers are valid for
/// the call (the entry point a NUL-terminated string, `param_count` offsets and sizes,
/// a parameter buffer they fit in), and `error` at `error_len` writable bytes: the
/// driver model's contract, which a library's `capture_model_run` passes on.
// SAFETY: the contract is the list above, which the driver model keeps.
pub unsafe fn serve(
    launch: *const Launch,
    error: *mut c_char,
    error_len: usize,
    library: &Library,
) -> c_int {
    // SAFETY: the caller's contract: `launch` is valid for the call.
    let launch = unsafe { &*launch };
    // SAFETY: as above, the entry point is NUL-terminated.
    let entry = unsafe { CStr::from_ptr(launch.entry) }.to_string_lossy();
    let mut memory = ModelMemory {
        inside: launch.inside,
    };
    if let Some(kernel) = (library.params)(&entry) {
        // A kernel of the parameter-list form: each parameter's bytes as the image lays
        // them out.
        let mut params = Vec::with_capacity(launch.param_count as usize);
        for i in 0..launch.param_count as usize {
            // SAFETY: the caller's contract: `param_count` offsets and sizes, and a
            // parameter buffer holding `offset + size` bytes.
            let bytes = unsafe {
                let (offset, size) = (*launch.param_offsets.add(i), *launch.param_sizes.add(i));
                std::slice::from_raw_parts(launch.params.add(offset), size).to_vec()
            };
            params.push(bytes);
        }
        let call = kernels::ParamLaunch {
            entry: entry.to_string(),
            grid: launch.grid,
            block: launch.block,
            shared_bytes: launch.shared_bytes,
            params,
        };
        let ran = catch_unwind(AssertUnwindSafe(|| (kernel.f)(&call, &mut memory)));
        return answer(ran, &entry, error, error_len);
    }
    let Some(kernel) = (library.pairs)(&entry) else {
        say(
            error,
            error_len,
            &format!("no host kernel is named {entry}"),
        );
        return UNKNOWN;
    };
    let mut params = Vec::with_capacity(launch.param_count as usize);
    for i in 0..launch.param_count as usize {
        // SAFETY: the caller's contract: `param_count` offsets and sizes.
        let (offset, size) = unsafe { (*launch.param_offsets.add(i), *launch.param_sizes.add(i)) };
        if size != 8 {
            say(
                error,
                error_len,
                &format!(
                    "{entry}: parameter {i} is {size} bytes, every parameter of capture's pairs form is 8"
                ),
            );
            return FAULT;
        }
        let mut word = [0u8; 8];
        // SAFETY: the caller's contract: the parameter buffer holds `offset + size` bytes.
        unsafe { std::ptr::copy_nonoverlapping(launch.params.add(offset), word.as_mut_ptr(), 8) };
        params.push(u64::from_le_bytes(word));
    }
    let ran = catch_unwind(AssertUnwindSafe(|| {
        kernels::run(&entry, kernel, &params, &mut memory)
    }));
    answer(ran, &entry, error, error_len)
}

/// The model's answer for a kernel run: ran, or faulted with why.
fn answer(
    ran: std::thread::Result<Result<(), String>>,
    entry: &str,
    error: *mut c_char,
    error_len: usize,
) -> c_int {
    match ran {
        Ok(Ok(())) => RAN,
        Ok(Err(why)) => {
            say(error, error_len, &why);
            FAULT
        }
        Err(_) => {
            say(error, error_len, &format!("{entry} panicked"));
            FAULT
        }
    }
}
