//! What the CUDA driver model (`crates/capture-cuda-model`) says about itself: the live
//! objects it counts (`capture_model_counts` in `driver/model.h`), read through the
//! library the backend loaded. `None` on any other driver.

use std::ffi::c_int;

/// `struct capture_model_counts` of `driver/model.h`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) contexts: usize,
    pub(crate) streams: usize,
    pub(crate) events: usize,
    pub(crate) modules: usize,
    pub(crate) graphs: usize,
    pub(crate) graph_execs: usize,
    pub(crate) device_allocations: usize,
    pub(crate) host_allocations: usize,
    pub(crate) device_bytes: usize,
    pub(crate) host_bytes: usize,
    pub(crate) kernels_run: usize,
    pub(crate) graphs_launched: usize,
    pub(crate) context_switches: usize,
    pub(crate) programmatic_kernels_run: usize,
    pub(crate) kernel_node_updates: usize,
    pub(crate) capture_info_calls: usize,
}

impl Counts {
    /// The objects alive, without the running tallies (kernels run, graphs launched,
    /// context switches, programmatic kernels run, kernel nodes updated, capture info
    /// asked), which only grow.
    pub(crate) fn live(self) -> Counts {
        Counts {
            kernels_run: 0,
            graphs_launched: 0,
            context_switches: 0,
            programmatic_kernels_run: 0,
            kernel_node_updates: 0,
            capture_info_calls: 0,
            ..self
        }
    }
}

/// The model's counts now, if the loaded CUDA driver is the model.
pub(crate) fn counts() -> Option<Counts> {
    // SAFETY: the backend loaded this library already (dlopen hands back the same
    // handle); it is never unloaded while the process runs, as the backend keeps it.
    let library = unsafe { libloading::Library::new("libcuda.so.1") }.ok()?;
    // SAFETY: the model's export has exactly this C signature (driver/model.h).
    let f = unsafe {
        library.get::<unsafe extern "C" fn(*mut Counts) -> c_int>(b"capture_model_counts\0")
    }
    .ok()?;
    let mut counts = Counts::default();
    // SAFETY: `counts` is a valid, writable `struct capture_model_counts`.
    let code = unsafe { f(&mut counts) };
    std::mem::forget(library);
    (code == 0).then_some(counts)
}
