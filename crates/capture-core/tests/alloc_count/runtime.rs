//! Hot-path allocation checks: the runtime. After warmup, 1,000 eager launches, 1,000
//! recorded launches and 1,000 replays allocate only for amortised growth, over the
//! integration tests' fence-deferring driver (its own allocations count too).

use capture_core::ids::StreamId;
use capture_core::runtime::{Arg, Device, DeviceConfig};

#[path = "../it/driver.rs"]
mod driver;

use driver::{ADD_ONE, ADD_SCALAR, TestBackend, bytes_of};

use crate::{allocations_during, assert_amortised};

pub(crate) const CHECKS: &[crate::Check] = &[
    ("runtime::eager_launches", eager_launches),
    ("runtime::recorded_launches", recorded_launches),
    ("runtime::replays", replays),
];

const S: StreamId = StreamId::new(0);
const N: usize = 1_000;

fn device() -> Device<TestBackend> {
    Device::new(
        TestBackend::default(),
        DeviceConfig::new().streams(1).unwrap(),
    )
    .unwrap()
}

fn eager_launches() {
    let dev = device();
    let add_one = dev.kernel(ADD_ONE);
    let bump = dev.kernel(ADD_SCALAR);
    let a = dev.alloc(S, 256).unwrap();
    let b = dev.alloc(S, 256).unwrap();
    dev.write(S, &a, 0, bytes_of(&[0; 64])).unwrap();
    let step = |i: usize| {
        let (x, y) = if i.is_multiple_of(2) {
            (&a, &b)
        } else {
            (&b, &a)
        };
        dev.launch(S, &add_one, [1, 1, 1], &[Arg::read(x), Arg::write(y)], &[])
            .unwrap();
        dev.launch(S, &bump, [1, 1, 1], &[Arg::read_write(y)], &[3, 64])
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
    let add_one = dev.kernel(ADD_ONE);
    let a = dev.alloc(S, 256).unwrap();
    let b = dev.alloc(S, 256).unwrap();
    dev.write(S, &a, 0, bytes_of(&[0; 64])).unwrap();
    let chain = |d: &Device<TestBackend>| {
        for i in 0..N {
            let (x, y) = if i.is_multiple_of(2) {
                (&a, &b)
            } else {
                (&b, &a)
            };
            d.launch(S, &add_one, [1, 1, 1], &[Arg::read(x), Arg::write(y)], &[])?;
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
    let add_one = dev.kernel(ADD_ONE);
    let a = dev.alloc(S, 256).unwrap();
    let b = dev.alloc(S, 256).unwrap();
    dev.write(S, &a, 0, bytes_of(&[0; 64])).unwrap();
    let g = dev
        .capture(S, |d| {
            d.launch(
                S,
                &add_one,
                [1, 1, 1],
                &[Arg::read(&a), Arg::write(&b)],
                &[],
            )?;
            d.launch(
                S,
                &add_one,
                [1, 1, 1],
                &[Arg::read(&b), Arg::write(&a)],
                &[],
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
