//! Hot paths allocate nothing per call beyond amortised growth on CUDA: a steady-state
//! eager launch, a recorded launch and a replay (one `cuGraphLaunch` each). The checks
//! are the suite's ([`capture_suite::hot_paths`]), the same the mock and Vulkan pass.
//!
//! A counting global allocator sees every allocation of the process made through Rust,
//! so this binary runs single-threaded with its own `main`. (What the CUDA driver's C
//! code allocates is not seen.) Without a driver it says `SKIP:`, unless
//! `CAPTURE_REQUIRE_CUDA=1`.

use std::alloc::System;

use capture_core::{Device, DeviceConfig};
use capture_suite::hot_paths;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[path = "it/support.rs"]
mod support;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn allocations_during(f: &mut dyn FnMut()) -> usize {
    let region = Region::new(GLOBAL);
    f();
    let change = region.change();
    change.allocations + change.reallocations
}

fn main() {
    let (_suite, opened) = support::try_new(0);
    let backend = match opened {
        Ok(backend) => backend,
        Err(e) if support::cuda_required() => panic!("CAPTURE_REQUIRE_CUDA=1 and {e}"),
        Err(e) => {
            println!("SKIP: CUDA unavailable ({e}); the allocation checks did not run");
            println!("alloc_count: 0 passed, 0 failed");
            return;
        }
    };
    println!("cuda device: {}", backend.device_name());
    let open = || {
        let config = DeviceConfig::new().streams(1).expect("one stream");
        Device::new(backend.clone(), config).expect("the device opens")
    };
    let (passed, failed) = hot_paths::run_all("cuda", &open, &allocations_during);
    println!();
    println!("alloc_count: {passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}
