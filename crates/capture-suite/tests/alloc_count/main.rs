//! Hot paths allocate nothing per call beyond amortised growth, on the mock in both of
//! its modes: direct (`MockBackend`, every call on the caller's thread) and thread-affine
//! (`AffineMock`, whose captures open and close on each stream's worker).
//!
//! A counting global allocator sees every allocation in the process, so this binary runs
//! single-threaded with its own `main` (no libtest threads) and runs each check of
//! [`capture_suite::hot_paths`] in turn: after a warmup, 1,000 steady-state calls may
//! allocate only a handful of times (vector growth), never once per call.

use std::alloc::System;
use std::panic::{AssertUnwindSafe, catch_unwind};

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

/// Runs every check on a fresh device of `backend`; returns how many failed.
fn run_all<B: Builtins + Clone>(label: &str, backend: B) -> usize {
    let mut failed = 0;
    for (name, check) in hot_paths::checks::<B>() {
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let dev = Device::new(backend.clone(), DeviceConfig::new().streams(1).unwrap())
                .expect("the device opens");
            check(&dev, &allocations_during)
        }));
        match outcome {
            Ok(Ok(measured)) if measured.amortised() => {
                println!("  {measured}");
                println!("test {label}::{name} ... ok");
            }
            Ok(Ok(measured)) => {
                println!("  {measured}: over budget");
                println!("test {label}::{name} ... FAILED");
                failed += 1;
            }
            Ok(Err(error)) => {
                println!(
                    "  {name}: the device failed: {}",
                    capture_core::Chain(&error)
                );
                println!("test {label}::{name} ... FAILED");
                failed += 1;
            }
            Err(_) => {
                println!("test {label}::{name} ... FAILED (panicked)");
                failed += 1;
            }
        }
    }
    failed
}

fn main() {
    let failed = run_all("mock", MockBackend::new()) + run_all("affine_mock", AffineMock::new());
    let total = 2 * hot_paths::checks::<MockBackend>().len();
    println!();
    println!("alloc_count: {} passed, {failed} failed", total - failed);
    if failed > 0 {
        std::process::exit(1);
    }
}
