//! Hot-path allocation checks through the runtime, on the mock. After warmup, 1,000
//! eager launches (each entering and settling a taint scope, propagating through its
//! inputs, hitting the info cache and binding its buffers), 1,000 recorded launches and
//! 1,000 replays allocate only for amortised growth. (A host write is not on this list:
//! each takes a staging slice, whose handle is an allocation.) The mock's own work
//! (its queue, its kernels' scratch) counts too.
//!
//! The device is the mock's direct mode: on a thread-affine backend every call is handed
//! to the stream's worker, a cost the performance work measures on its own.

use capture_core::{Arg, Builtin, Builtins, Device, DeviceConfig, StreamId};
use capture_mock::MockBackend;

use crate::{allocations_during, assert_amortised};

pub(crate) const CHECKS: &[crate::Check] = &[
    ("runtime::eager_launches", eager_launches),
    ("runtime::recorded_launches", recorded_launches),
    ("runtime::replays", replays),
];

const S: StreamId = StreamId::new(0);
const N: usize = 1_000;
/// Elements of every buffer.
const E: u64 = 64;

type Dev = Device<MockBackend>;

fn device() -> Dev {
    Device::new(MockBackend::new(), DeviceConfig::new().streams(1).unwrap()).unwrap()
}

fn bytes_of(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn add_one(dev: &Dev) -> capture_core::KernelHandle {
    dev.kernel(MockBackend::builtin(Builtin::AddScalar))
}

const ONE: [u64; 2] = [E, 0x3f80_0000];

fn eager_launches() {
    let dev = device();
    let add_one = add_one(&dev);
    let axpy = dev.kernel(MockBackend::builtin(Builtin::Axpy));
    let a = dev.alloc(S, 256).unwrap();
    let b = dev.alloc(S, 256).unwrap();
    dev.write(S, &a, 0, bytes_of(&[0.0; 64])).unwrap();
    let step = |i: usize| {
        let (x, y) = if i.is_multiple_of(2) {
            (&a, &b)
        } else {
            (&b, &a)
        };
        dev.launch(S, &add_one, [1, 1, 1], &[Arg::read(x), Arg::write(y)], &ONE)
            .unwrap();
        dev.launch(
            S,
            &axpy,
            [1, 1, 1],
            &[Arg::read(x), Arg::read_write(y)],
            &Builtin::Axpy.info(E, 0.5),
        )
        .unwrap();
    };
    for i in 0..N {
        step(i);
    }
    dev.sync(S).unwrap();
    let n = allocations_during(|| {
        for i in 0..N {
            step(i);
        }
    });
    assert_amortised("Device::launch (eager)", 2 * N, n);
    dev.sync(S).unwrap();
}

fn recorded_launches() {
    let dev = device();
    let add_one = add_one(&dev);
    let a = dev.alloc(S, 256).unwrap();
    let b = dev.alloc(S, 256).unwrap();
    dev.write(S, &a, 0, bytes_of(&[0.0; 64])).unwrap();
    let chain = |d: &Dev| {
        for i in 0..N {
            let (x, y) = if i.is_multiple_of(2) {
                (&a, &b)
            } else {
                (&b, &a)
            };
            d.launch(S, &add_one, [1, 1, 1], &[Arg::read(x), Arg::write(y)], &ONE)?;
        }
        Ok(())
    };
    // One capture to size every vector, then count the recording pass of a second.
    let g = dev.capture(S, chain).unwrap();
    dev.drop_graph(g).unwrap();
    dev.sync(S).unwrap();
    dev.prepare(S).unwrap();
    chain(&dev).unwrap();
    dev.begin(S).unwrap();
    let n = allocations_during(|| chain(&dev).unwrap());
    assert_amortised("Device::launch (recorded)", N, n);
    dev.end(S).unwrap();
}

fn replays() {
    let dev = device();
    let add_one = add_one(&dev);
    let a = dev.alloc(S, 256).unwrap();
    let b = dev.alloc(S, 256).unwrap();
    dev.write(S, &a, 0, bytes_of(&[0.0; 64])).unwrap();
    let g = dev
        .capture(S, |d| {
            d.launch(
                S,
                &add_one,
                [1, 1, 1],
                &[Arg::read(&a), Arg::write(&b)],
                &ONE,
            )?;
            d.launch(
                S,
                &add_one,
                [1, 1, 1],
                &[Arg::read(&b), Arg::write(&a)],
                &ONE,
            )
        })
        .unwrap();
    for _ in 0..N {
        dev.replay(S, g, 1).unwrap();
    }
    dev.sync(S).unwrap();
    let n = allocations_during(|| {
        for _ in 0..N {
            dev.replay(S, g, 1).unwrap();
        }
    });
    assert_amortised("Device::replay", N, n);
    dev.sync(S).unwrap();
}
