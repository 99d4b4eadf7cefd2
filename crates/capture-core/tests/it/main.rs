//! Integration tests of capture-core: the runtime over a small test driver that defers
//! work to fences like a GPU. One binary; one module per area.

// Test helpers are shared across this binary's modules, not a public API.
#![allow(missing_docs, unreachable_pub, clippy::missing_errors_doc)]

mod bad_input;
mod driver;
mod rules;
mod threads;
mod trace;

use std::sync::Arc;

use capture_core::ServerError;
use capture_core::ids::StreamId;
use capture_core::runtime::{Buffer, Device, DeviceConfig, KernelHandle};

use driver::{TestBackend, World, bytes_of, values_of};

/// Two pooled streams: S0 and S2 share pooled stream 0, S1 is on pooled stream 1.
pub const S0: StreamId = StreamId::new(0);
pub const S1: StreamId = StreamId::new(1);
pub const S2: StreamId = StreamId::new(2);

pub type Dev = Device<TestBackend>;

/// A device over the test backend with two pooled streams and the trace on.
pub fn device() -> (Dev, Arc<World>) {
    device_with(DeviceConfig::new())
}

pub fn device_with(config: DeviceConfig) -> (Dev, Arc<World>) {
    let backend = TestBackend::default();
    let world = Arc::clone(&backend.world);
    let config = config.streams(2).expect("two streams").trace(true);
    (Device::new(backend, config).expect("device"), world)
}

/// Kernels every test registers, in this order.
pub struct Kernels {
    pub add_one: KernelHandle,
    pub add_scalar: KernelHandle,
    pub add: KernelHandle,
}

pub fn kernels<B: capture_core::driver::Backend<KernelSource = driver::TestKernel>>(
    dev: &Device<B>,
) -> Kernels {
    Kernels {
        add_one: dev.kernel(driver::ADD_ONE),
        add_scalar: dev.kernel(driver::ADD_SCALAR),
        add: dev.kernel(driver::ADD),
    }
}

/// Launches `add_one` (`y = x + 1`) on `stream`.
pub fn add_one<B: capture_core::driver::Backend>(
    dev: &Device<B>,
    k: &Kernels,
    stream: StreamId,
    x: &Buffer,
    y: &Buffer,
) -> Result<(), ServerError> {
    dev.launch(
        stream,
        &k.add_one,
        [1, 1, 1],
        &[
            capture_core::runtime::Arg::read(x),
            capture_core::runtime::Arg::write(y),
        ],
        &[],
    )
}

/// A buffer on `stream` holding `values` (written and settled).
pub fn filled<B: capture_core::driver::Backend>(
    dev: &Device<B>,
    stream: StreamId,
    values: &[u32],
) -> Buffer {
    let b = dev.alloc(stream, values.len() as u64 * 4).expect("alloc");
    dev.write(stream, &b, 0, bytes_of(values)).expect("write");
    b
}

/// The u32 values of `buffer`, read on `stream`.
pub fn read<B: capture_core::driver::Backend>(
    dev: &Device<B>,
    stream: StreamId,
    buffer: &Buffer,
) -> Result<Vec<u32>, ServerError> {
    dev.read(stream, buffer).map(|b| values_of(&b))
}
