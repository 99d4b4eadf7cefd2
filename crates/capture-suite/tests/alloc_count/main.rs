//! Hot paths allocate nothing per call beyond amortised growth.
//!
//! A counting global allocator sees every allocation in the process, so this binary runs
//! single-threaded with its own `main` (no libtest threads) and checks each hot path in
//! turn: after a warmup, 1,000 steady-state calls may allocate only a handful of times
//! (vector growth), never once per call.

use std::alloc::System;
use std::panic::{AssertUnwindSafe, catch_unwind};

use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

mod runtime;

/// How many allocations (and reallocations) `f` made.
pub fn allocations_during(f: impl FnOnce()) -> usize {
    let region = Region::new(GLOBAL);
    f();
    let change = region.change();
    change.allocations + change.reallocations
}

/// The most allocations 1,000 steady-state calls may make: amortised growth only.
pub const BUDGET: usize = 8;

/// Fails with a message naming the check when `allocations` is over [`BUDGET`].
pub fn assert_amortised(what: &str, calls: usize, allocations: usize) {
    println!("  {what}: {allocations} allocations over {calls} calls");
    assert!(
        allocations <= BUDGET,
        "{what}: {allocations} allocations over {calls} steady-state calls (budget {BUDGET})"
    );
}

type Check = (&'static str, fn());

fn main() {
    let checks: Vec<Check> = runtime::CHECKS.to_vec();
    let mut failed = 0;
    for (name, check) in &checks {
        match catch_unwind(AssertUnwindSafe(check)) {
            Ok(()) => println!("test {name} ... ok"),
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    println!();
    println!(
        "alloc_count: {} passed, {failed} failed",
        checks.len() - failed
    );
    if failed > 0 {
        std::process::exit(1);
    }
}
