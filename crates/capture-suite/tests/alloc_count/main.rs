//! Hot paths allocate nothing per call beyond amortised growth, on the mock in both of
//! its modes: direct (`MockBackend`, every call on the caller's thread) and thread-affine
//! (`AffineMock`, whose captures open and close on each stream's worker).
//!
//! A counting global allocator sees every allocation in the process, so this binary runs
//! single-threaded with its own `main` (no libtest threads) and runs each check of
//! [`capture_suite::hot_paths`] in turn: after a warmup, 1,000 steady-state calls may
//! allocate only a handful of times (vector growth), never once per call.

use std::alloc::System;

use capture_core::{Builtins, Device, DeviceConfig};
use capture_mock::{AffineMock, MockBackend};
use capture_suite::hot_paths;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// How many allocations (and reallocations) `f` made.
fn allocations_during(f: &mut dyn FnMut()) -> usize {
    let region = Region::new(GLOBAL);
    f();
    let change = region.change();
    change.allocations + change.reallocations
}

/// Every check on fresh one-stream devices of `backend`.
fn run_all<B: Builtins + Clone>(label: &str, backend: B) -> (usize, usize) {
    let open = || {
        Device::new(backend.clone(), DeviceConfig::new().streams(1).unwrap())
            .expect("the device opens")
    };
    hot_paths::run_all(label, &open, &allocations_during)
}

fn main() {
    let (direct, affine) = (
        run_all("mock", MockBackend::new()),
        run_all("affine_mock", AffineMock::new()),
    );
    let (passed, failed) = (direct.0 + affine.0, direct.1 + affine.1);
    println!();
    println!("alloc_count: {passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}
