//! The device's `maxMemoryAllocationCount` (lowered through
//! `VulkanOptions::max_allocations`): a page past it is refused with an out-of-memory
//! error before `vkAllocateMemory` is called, and once pages are released the stream
//! allocates again.

use capture_core::{ServerError, StreamId};
use capture_suite::scenarios::{Harness, N, map, ramp, suite_lock};
use capture_vulkan::{MemoryMode, VulkanOptions};

use crate::support;

const S: StreamId = StreamId::new(0);

#[test]
fn a_page_past_the_allocation_count_limit_is_out_of_memory_before_the_driver_is_asked() {
    let _suite = suite_lock();
    let backend = match support::with(VulkanOptions {
        memory: MemoryMode::ForcedStaging,
        max_allocations: Some(6),
        ..VulkanOptions::from_env()
    }) {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: allocation limit: {why}");
            return;
        }
    };
    let keep = backend.clone();
    let h = Harness::new(backend).expect("device");
    let x = h.buffer(S, &ramp(1.0)).expect("x");
    let y = h.dev.alloc(S, N * 4).expect("y");
    // Large buffers, a page each, until the limit refuses one.
    let mut held = Vec::new();
    let refusal = loop {
        assert!(held.len() < 64, "64 pages past a limit of 6 allocations");
        match h.dev.alloc(S, 64 << 20) {
            Ok(b) => held.push(b),
            Err(e) => break e,
        }
    };
    match &refusal {
        ServerError::OutOfMemory(oom) => {
            assert!(
                oom.reason.contains("maxMemoryAllocationCount"),
                "{}",
                oom.reason
            );
            assert!(
                oom.reason.contains("refused before the call"),
                "{}",
                oom.reason
            );
        }
        other => panic!("not out of memory: {other:?}"),
    }
    // Nothing was lost: the stream reads, launches and allocates again once pages go.
    drop(held);
    h.dev.sync(S).expect("sync");
    h.dev.cleanup().expect("cleanup");
    let z = h.dev.alloc(S, 64 << 20).expect("a page fits again");
    h.add(S, &x, &y, 1.0).expect("launch");
    h.expect(S, &y, &map(&ramp(1.0), |v| v + 1.0));
    drop((x, y, z, h));
    support::assert_no_validation_messages(&keep);
}
