//! Threads: a capture begun on one user thread ends from another, directly (relaxed
//! mode, `MockBackend`) and with the driver capture opened and closed on the stream's
//! worker (a thread-affine driver, `AffineMock`); the device is Send + Sync; a panic in
//! a kernel reaches its caller as an asynchronous error, on the caller's thread or a
//! worker.

use std::sync::Arc;

use capture_core::backend::Backend;
use capture_core::{Arg, Device, DeviceConfig, KernelSignature, StreamId};
use capture_mock::{AffineMock, Faulty, MockBackend, MockKernel};

use crate::{Dev, S0, bytes_of, filled, kernels, read};

fn mock_device(config: DeviceConfig) -> Dev {
    Device::new(Faulty::new(MockBackend::new()), config).unwrap()
}

fn affine_device(config: DeviceConfig) -> Device<AffineMock> {
    Device::new(AffineMock::new(), config).unwrap()
}

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn a_device_is_send_and_sync() {
    let _suite = crate::suite_lock();
    assert_send_sync::<Device<MockBackend>>();
    assert_send_sync::<Dev>();
}

#[test]
fn with_a_thread_affine_driver_a_capture_begun_on_one_user_thread_ends_from_another() {
    let _suite = crate::suite_lock();
    let config = DeviceConfig::new().streams(2).unwrap().trace(true);
    begun_on_one_thread_ended_on_another(Arc::new(affine_device(config)));
}

#[test]
fn in_relaxed_mode_a_capture_begun_on_one_user_thread_ends_from_another() {
    let _suite = crate::suite_lock();
    let config = DeviceConfig::new().streams(2).unwrap().trace(true);
    begun_on_one_thread_ended_on_another(Arc::new(mock_device(config)));
}

fn begun_on_one_thread_ended_on_another<B: Backend<KernelSource = MockKernel>>(
    dev: Arc<Device<B>>,
) {
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1, 2, 3]);
    let y = dev.alloc(S0, 12).unwrap();
    let opener = {
        let (dev, x, y) = (Arc::clone(&dev), x.clone(), y.clone());
        let add_one = k.add_one;
        std::thread::spawn(move || {
            dev.prepare(S0).unwrap();
            dev.launch(
                S0,
                &add_one,
                [1, 1, 1],
                &[Arg::read(&x), Arg::write(&y)],
                &[],
            )
            .unwrap();
            dev.begin(S0).unwrap();
            dev.launch(
                S0,
                &add_one,
                [1, 1, 1],
                &[Arg::read(&x), Arg::write(&y)],
                &[],
            )
            .unwrap();
        })
    };
    opener.join().unwrap();
    let closer = {
        let dev = Arc::clone(&dev);
        std::thread::spawn(move || dev.end(S0))
    };
    let g = closer
        .join()
        .unwrap()
        .expect("the driver saw begin and end on one thread");
    dev.write(S0, &x, 0, bytes_of(&[10, 20, 30])).unwrap();
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &y).unwrap(), vec![11, 21, 31]);
}

#[test]
fn streams_used_from_several_threads_stay_consistent() {
    let _suite = crate::suite_lock();
    // Two threads, one per pooled stream, each run an eager chain, a capture and
    // replays, while the test thread's handles reach both workers. The captures
    // take turns: on the mock, as on CUDA in global mode, another stream's allocation
    // while one records is refused, and capturing on two pooled streams at once is the
    // reliability work's to make safe.
    let config = DeviceConfig::new().streams(2).unwrap();
    let dev = Arc::new(mock_device(config));
    let k = kernels(&dev);
    let turns = Arc::new(std::sync::Mutex::new(()));
    let handles: Vec<_> = (0..2u64)
        .map(|i| {
            let dev = Arc::clone(&dev);
            let turns = Arc::clone(&turns);
            let add_one = k.add_one;
            std::thread::spawn(move || {
                let s = StreamId::new(i);
                let x = filled(&dev, s, &[i as u32; 8]);
                let y = dev.alloc(s, 32).unwrap();
                for _ in 0..50 {
                    dev.launch(
                        s,
                        &add_one,
                        [1, 1, 1],
                        &[Arg::read(&x), Arg::write(&y)],
                        &[],
                    )
                    .unwrap();
                }
                let turn = turns.lock().unwrap_or_else(|p| p.into_inner());
                let g = dev
                    .capture(s, |d| {
                        d.launch(
                            s,
                            &add_one,
                            [1, 1, 1],
                            &[Arg::read(&x), Arg::write(&y)],
                            &[],
                        )
                    })
                    .unwrap();
                drop(turn);
                dev.write(s, &x, 0, bytes_of(&[100; 8])).unwrap();
                dev.replay(s, &g, 3).unwrap();
                read(&dev, s, &y).unwrap()
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), vec![101; 8]);
    }
}

#[test]
fn a_kernel_that_panics_on_the_worker_fails_the_wait_and_the_worker_keeps_serving() {
    let _suite = crate::suite_lock();
    let dev = affine_device(DeviceConfig::new().streams(1).unwrap());
    let boom = dev.kernel(BOOM);
    let x = filled(&dev, S0, &[1]);
    // Warmup's work is waited for by `begin`, which runs on the stream's worker: the
    // mock runs the kernel (and it panics) there.
    dev.prepare(S0).unwrap();
    dev.launch(S0, &boom, [1, 1, 1], &[Arg::read_write(&x)], &[])
        .unwrap();
    let begun = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dev.begin(S0)));
    assert!(
        matches!(begun, Ok(Err(capture_core::ServerError::Driver { .. }))),
        "the kernel's failure is begin's asynchronous error, not a panic; the window does \
         not open on the work it lost: {begun:?}"
    );
    assert!(dev.captures().active().is_empty(), "unwound to no capture");
    assert!(matches!(
        read(&dev, S0, &x),
        Err(capture_core::ServerError::Unwritten(_))
    ));
    // The worker keeps serving: a later capture opens and closes on it.
    let y = filled(&dev, S0, &[7, 8]);
    let g = dev
        .capture(S0, |_| Ok::<(), capture_core::ServerError>(()))
        .unwrap();
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &y).unwrap(), vec![7, 8]);
}

/// A kernel that panics when it runs.
const BOOM: MockKernel = MockKernel {
    name: "boom",
    signature: KernelSignature::new(1, 0),
    f: |_, _| std::panic::resume_unwind(Box::new("a kernel panicked")),
};

#[test]
fn a_kernel_that_panics_on_the_callers_thread_fails_the_wait() {
    let _suite = crate::suite_lock();
    a_panicking_kernel_fails_the_wait(mock_device(DeviceConfig::new().streams(1).unwrap()));
    a_panicking_kernel_fails_the_wait(affine_device(DeviceConfig::new().streams(1).unwrap()));
}

fn a_panicking_kernel_fails_the_wait<B: Backend<KernelSource = MockKernel>>(dev: Device<B>) {
    let boom = dev.kernel(BOOM);
    let x = filled(&dev, S0, &[1]);
    dev.launch(S0, &boom, [1, 1, 1], &[Arg::read_write(&x)], &[])
        .unwrap();
    // The kernel runs (and panics) inside the sync, on the caller's thread (on either
    // backend: only capture calls go to a thread-affine stream's worker): like a kernel that
    // faults on a GPU, an asynchronous error the wait reports, claiming what it wrote.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dev.sync(S0)));
    assert!(
        matches!(outcome, Ok(Err(_))),
        "the sync reports the kernel's failure, without a panic"
    );
    assert!(matches!(
        read(&dev, S0, &x),
        Err(capture_core::ServerError::Unwritten(_))
    ));
    let y = filled(&dev, S0, &[7, 8]);
    assert_eq!(read(&dev, S0, &y).unwrap(), vec![7, 8]);
}
