//! Hot-path allocation checks: memory. Binding a live buffer for a launch (resolving its
//! location, touching it when armed) is done for every binding of every launch.

use capture_core::ServerError;
use capture_core::ids::StreamId;
use capture_core::memory::{
    ComputeStorage, MemoryConfig, MemoryKind, MemoryManagement, PageUpdate, StorageId,
};
use capture_core::range::ByteRange;

use crate::{allocations_during, assert_amortised};

pub(crate) const CHECKS: &[crate::Check] = &[
    ("memory::bind_outside_a_window", bind_outside_a_window),
    ("memory::bind_while_armed", bind_while_armed),
];

struct Pages(u64);

impl ComputeStorage for Pages {
    type Resource = ();

    fn alloc(&mut self, _size: u64) -> Result<StorageId, ServerError> {
        self.0 += 1;
        Ok(StorageId(self.0))
    }

    fn dealloc(&mut self, _id: StorageId) {}

    fn resource(&mut self, _id: StorageId, _bytes: ByteRange) {}
}

fn bind_loop(armed: bool) {
    let mut m = MemoryManagement::new(Pages(0), MemoryKind::Device, MemoryConfig::unlimited());
    if armed {
        m.capture_begin();
        m.capture_priming_end();
    }
    let buffers: Vec<_> = (0..4)
        .map(|_| m.reserve(1024, StreamId::new(0), PageUpdate::Free).unwrap())
        .collect();
    for b in &buffers {
        m.bind(b.id()).unwrap();
    }
    let n = allocations_during(|| {
        for i in 0..1_000 {
            m.bind(buffers[i % 4].id()).unwrap();
        }
    });
    assert_amortised("MemoryManagement::bind", 1_000, n);
    drop(m.capture_end());
}

fn bind_outside_a_window() {
    bind_loop(false);
}

fn bind_while_armed() {
    bind_loop(true);
}
