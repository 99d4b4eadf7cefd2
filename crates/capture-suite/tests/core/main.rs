//! The core's integration tests: the rules, bad input, threads and the trace, all on the
//! mock (wrapped in `Faulty` so any driver call can fail on cue). One binary; one module
//! per area. Every test holds the suite lock, so the counts of driver calls and the
//! timing of threads one test sees are its own.

// Test helpers are shared across this binary's modules, not a public API.
#![allow(missing_docs, unreachable_pub, clippy::missing_errors_doc)]

mod api;
mod bad_input;
mod branches;
mod contexts;
mod fourth_pass;
mod host_io;
mod labels;
mod launch_model;
mod ledger;
mod loops;
mod reliability;
mod replay_order;
mod rules;
mod second_pass;
mod slots;
mod third_pass;
mod threads;
mod trace;

use std::sync::Arc;

use capture_core::backend::Backend;
use capture_core::{
    Arg, Buffer, Device, DeviceConfig, KernelHandle, KernelSignature, ServerError, StreamId,
};
use capture_mock::{FaultOp, FaultPlan, Faulty, MockBackend, MockKernel};

pub use capture_suite::scenarios::suite_lock;

/// Two pooled streams: S0 and S2 share pooled stream 0, S1 is on pooled stream 1.
pub const S0: StreamId = StreamId::new(0);
pub const S1: StreamId = StreamId::new(1);
pub const S2: StreamId = StreamId::new(2);

pub type Dev = Device<Faulty<MockBackend>>;

/// The fault plan of a test's device: fail the nth next call of an operation, count
/// the calls made.
pub struct World(Arc<FaultPlan>);

impl World {
    /// Fails the `nth` next call of `op` (1 = the next one).
    pub fn fail(&self, op: FaultOp, nth: u32) {
        self.0.fail(op, nth).expect("a valid fault position");
    }

    /// How many times `op` was called.
    pub fn calls(&self, op: FaultOp) -> u64 {
        self.0.calls(op)
    }
}

/// A device over the mock with two pooled streams and the trace on.
pub fn device() -> (Dev, World) {
    device_with(DeviceConfig::new())
}

pub fn device_with(config: DeviceConfig) -> (Dev, World) {
    device_on_with(MockBackend::new(), config)
}

/// A device as [`device`] makes one, over `mock` (to use its own memory, say).
pub fn device_on(mock: MockBackend) -> (Dev, World) {
    device_on_with(mock, DeviceConfig::new())
}

fn device_on_with(mock: MockBackend, config: DeviceConfig) -> (Dev, World) {
    let backend = Faulty::new(mock);
    let world = World(Arc::clone(backend.plan()));
    let config = config.streams(2).expect("two streams").trace(true);
    (Device::new(backend, config).expect("device"), world)
}

/// Kernels every test registers, in this order.
pub struct Kernels {
    pub add_one: KernelHandle,
    pub add_scalar: KernelHandle,
    pub add: KernelHandle,
}

pub fn kernels<B: Backend<KernelSource = MockKernel>>(dev: &Device<B>) -> Kernels {
    Kernels {
        add_one: dev.kernel(ADD_ONE),
        add_scalar: dev.kernel(ADD_SCALAR),
        add: dev.kernel(ADD),
    }
}

/// Launches `add_one` (`y = x + 1`) on `stream`.
pub fn add_one(
    dev: &Dev,
    k: &Kernels,
    stream: StreamId,
    x: &Buffer,
    y: &Buffer,
) -> Result<(), ServerError> {
    dev.launch(
        stream,
        &k.add_one,
        [1, 1, 1],
        &[Arg::read(x), Arg::write(y)],
        &[],
    )
}

/// A buffer on `stream` holding `values` (written and settled).
pub fn filled<B: Backend>(dev: &Device<B>, stream: StreamId, values: &[u32]) -> Buffer {
    let b = dev.alloc(stream, values.len() as u64 * 4).expect("alloc");
    dev.write_values(stream, &b, 0, values).expect("write");
    b
}

/// The u32 values of `buffer`, read on `stream`.
pub fn read<B: Backend>(
    dev: &Device<B>,
    stream: StreamId,
    buffer: &Buffer,
) -> Result<Vec<u32>, ServerError> {
    dev.read_values(stream, buffer)
}

/// Little-endian bytes of `values`.
pub fn bytes_of(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The u32 values of `bytes`.
pub fn values_of(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect()
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().expect("4 bytes"))
}

/// `out = in + 1`, elementwise u32. Arguments: in, out.
pub const ADD_ONE: MockKernel = MockKernel {
    name: "add_one",
    signature: KernelSignature::new(2, 0),
    f: |b, _| {
        let (a, rest) = b.split_at_mut(1);
        let n = a[0].len().min(rest[0].len()) / 4;
        for i in 0..n {
            let v = u32_at(&a[0], i).wrapping_add(1);
            rest[0][i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
    },
};

/// `buf += info[0]` in place, elementwise u32. Arguments: buf (read-write).
pub const ADD_SCALAR: MockKernel = MockKernel {
    name: "add_scalar",
    signature: KernelSignature::new(1, 1),
    f: |b, info| {
        let k = info.first().copied().unwrap_or(0) as u32;
        for c in b[0].chunks_exact_mut(4) {
            let x = u32::from_le_bytes(c.try_into().expect("4 bytes"));
            c.copy_from_slice(&x.wrapping_add(k).to_le_bytes());
        }
    },
};

/// `out = a + b`, elementwise u32. Arguments: a, b, out.
pub const ADD: MockKernel = MockKernel {
    name: "add",
    signature: KernelSignature::new(3, 0),
    f: |b, _| {
        let (ab, out) = b.split_at_mut(2);
        let n = ab[0].len().min(ab[1].len()).min(out[0].len()) / 4;
        for i in 0..n {
            let v = u32_at(&ab[0], i).wrapping_add(u32_at(&ab[1], i));
            out[0][i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
    },
};

/// Panics: a kernel that faults. Arguments: buf (read-write).
pub const PANIC: MockKernel = MockKernel {
    name: "panic",
    signature: KernelSignature::new(1, 0),
    f: |_, _| std::panic::resume_unwind(Box::new("a kernel that faults")),
};

/// Shortens the buffer it was given by a word: a kernel that breaks the contract.
/// Arguments: buf (read-write).
pub const RESIZE: MockKernel = MockKernel {
    name: "resize",
    signature: KernelSignature::new(1, 0),
    f: |b, _| {
        b[0].truncate(b[0].len().saturating_sub(4));
    },
};
