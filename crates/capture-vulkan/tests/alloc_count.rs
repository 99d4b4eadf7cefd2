//! Hot paths allocate nothing per call beyond amortised growth on Vulkan: a steady-state
//! eager launch (with the submission cadence's submissions among them), a recorded
//! launch and a replay (one submission each), in both memory modes. The checks are the
//! suite's ([`capture_suite::hot_paths`]), the same the mock passes.
//!
//! A counting global allocator sees every allocation of the process made through Rust,
//! so this binary runs single-threaded with its own `main`. (What the Vulkan driver's C
//! code allocates is not seen; validation stays off, as its messages would be collected
//! in Rust.) Without a Vulkan device it says `SKIP:`, unless `CAPTURE_REQUIRE_VULKAN=1`.

use std::alloc::System;

use capture_core::{Device, DeviceConfig};
use capture_suite::hot_paths;
use capture_vulkan::{MemoryMode, VulkanBackend, VulkanOptions};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn allocations_during(f: &mut dyn FnMut()) -> usize {
    let region = Region::new(GLOBAL);
    f();
    let change = region.change();
    change.allocations + change.reallocations
}

fn main() {
    let required = std::env::var("CAPTURE_REQUIRE_VULKAN").is_ok_and(|v| v == "1");
    let mut passed = 0;
    let mut failed = 0;
    for memory in [MemoryMode::Auto, MemoryMode::ForcedStaging] {
        let options = VulkanOptions {
            memory,
            ..VulkanOptions::from_env()
        };
        let backend = match VulkanBackend::new(options) {
            Ok(backend) => backend,
            Err(e) if required => panic!("CAPTURE_REQUIRE_VULKAN=1 and {e}"),
            Err(e) => {
                println!("SKIP: no Vulkan device ({e}); the allocation checks did not run");
                println!("alloc_count: 0 passed, 0 failed");
                return;
            }
        };
        println!(
            "vulkan device: {}, {}",
            backend.device_name(),
            backend.memory_choice()
        );
        let open = || {
            let config = DeviceConfig::new().streams(1).expect("one stream");
            Device::new(backend.clone(), config).expect("the device opens")
        };
        let (p, f) = hot_paths::run_all(&format!("vulkan_{memory:?}"), &open, &allocations_during);
        passed += p;
        failed += f;
    }
    println!();
    println!("alloc_count: {passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}
