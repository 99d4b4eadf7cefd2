//! What needs a CUDA driver, a GPU's or the driver model's (each says `SKIP:` without
//! one): user PTX checked against its declared signature, two devices on one context
//! keeping each other's captures, teardown with a window open and while another device
//! records (rule 25), calls from threads that never made the context current; on the
//! driver model, which counts them, what outlives a device and the context switches.

use std::sync::Arc;

use capture_core::{
    Arg, Builtin, Builtins, Device, DeviceConfig, KernelSignature, ServerError, StreamId,
};
use capture_cuda::{BUILTINS_SM80, BUILTINS_SM90, CudaBackend, CudaKernelSource};

use crate::driver_model;

const S0: StreamId = StreamId::new(0);

fn backend(test: &str) -> Option<crate::support::Cuda> {
    crate::support::open(test)
}

fn device(b: &CudaBackend) -> Device<CudaBackend> {
    Device::new(b.clone(), DeviceConfig::new().streams(2).unwrap()).unwrap()
}

/// The builtins' PTX for `b`, under a user's name.
fn user_fill(b: &CudaBackend, signature: KernelSignature) -> CudaKernelSource {
    let ptx = if b.compute_capability().0 >= 9 {
        BUILTINS_SM90
    } else {
        BUILTINS_SM80
    };
    CudaKernelSource::ptx("my_fill", ptx.to_owned(), "fill", signature).unwrap()
}

/// Fills the 64 floats of `x` with `value`.
fn fill_with(
    dev: &Device<CudaBackend>,
    k: &capture_core::KernelHandle,
    x: &capture_core::Buffer,
    value: f32,
) {
    dev.launch(
        S0,
        k,
        [1, 1, 1],
        &[Arg::write(x)],
        &Builtin::Fill.info(64, value),
    )
    .unwrap();
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn user_ptx_whose_parameters_differ_from_its_signature_is_refused() {
    let Some(b) = backend("user_ptx_signature") else {
        return;
    };
    let dev = device(&b);
    let x = dev.alloc(S0, 256).unwrap();
    let y = dev.alloc(S0, 256).unwrap();
    dev.write(S0, &x, 0, vec![0u8; 256]).unwrap();
    let wrong = dev.kernel(user_fill(&b, KernelSignature::new(2, Builtin::INFO_WORDS)));
    let err = dev
        .launch(
            S0,
            &wrong,
            [1, 1, 1],
            &[Arg::write(&x), Arg::write(&y)],
            &Builtin::Fill.info(64, 1.0),
        )
        .unwrap_err();
    assert!(
        matches!(err, ServerError::InvalidArgument { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("my_fill") || format!("{err:?}").contains("my_fill"),
        "{err}"
    );
    // The device stays usable: the right signature loads and runs.
    let right = dev.kernel(user_fill(&b, KernelSignature::new(1, Builtin::INFO_WORDS)));
    fill_with(&dev, &right, &x, 2.5);
    assert_eq!(floats(&dev.read(S0, &x).unwrap()), vec![2.5; 64]);
}

#[test]
fn two_devices_on_one_gpu_keep_each_others_captures() {
    let Some(b) = backend("two_devices") else {
        return;
    };
    let again = crate::support::another(&b);
    let (a, other) = (device(&b), device(&again));
    drop(other.alloc(S0, 256).unwrap());
    other.sync(S0).unwrap();
    let fill = a.kernel(<CudaBackend as Builtins>::builtin(Builtin::Fill));
    let x = a.alloc(S0, 256).unwrap();
    a.prepare(S0).unwrap();
    fill_with(&a, &fill, &x, 3.0);
    a.begin(S0).unwrap();
    fill_with(&a, &fill, &x, 3.0);
    // From another thread, on the other device: an allocation is fine; a page release
    // is refused rather than invalidating the capture.
    std::thread::scope(|s| {
        s.spawn(|| {
            let y = other.alloc(S0, 4 << 20).unwrap();
            other.write(S0, &y, 0, vec![1u8; 4 << 20]).unwrap();
            assert!(other.cleanup().is_err());
        });
    });
    let g = a.end(S0).unwrap();
    a.replay(S0, &g, 2).unwrap();
    assert_eq!(floats(&a.read(S0, &x).unwrap()), vec![3.0; 64]);
}

#[test]
fn a_device_dropped_with_a_window_open_ends_the_capture() {
    let Some(b) = backend("teardown") else {
        return;
    };
    let dev = device(&b);
    let fill = dev.kernel(<CudaBackend as Builtins>::builtin(Builtin::Fill));
    let x = dev.alloc(S0, 256).unwrap();
    dev.prepare(S0).unwrap();
    fill_with(&dev, &fill, &x, 1.0);
    dev.begin(S0).unwrap();
    fill_with(&dev, &fill, &x, 1.0);
    drop(x);
    drop(dev);
    // The context is still sound: a new device on it works.
    let dev = device(&b);
    let y = dev.alloc(S0, 256).unwrap();
    fill_with(&dev, &fill_of(&dev), &y, 4.0);
    assert_eq!(floats(&dev.read(S0, &y).unwrap()), vec![4.0; 64]);
}

fn fill_of(dev: &Device<CudaBackend>) -> capture_core::KernelHandle {
    dev.kernel(<CudaBackend as Builtins>::builtin(Builtin::Fill))
}

#[test]
fn a_capture_begun_on_one_thread_ends_on_another_with_no_context_made_current() {
    let Some(b) = backend("relaxed_threads") else {
        return;
    };
    let dev = Arc::new(device(&b));
    let fill = fill_of(&dev);
    let x = dev.alloc(S0, 256).unwrap();
    let (d, k, xx) = (Arc::clone(&dev), fill, x.clone());
    std::thread::spawn(move || {
        d.prepare(S0).unwrap();
        fill_with(&d, &k, &xx, 5.0);
        d.begin(S0).unwrap();
        fill_with(&d, &k, &xx, 5.0);
    })
    .join()
    .unwrap();
    let d = Arc::clone(&dev);
    let g = std::thread::spawn(move || d.end(S0))
        .join()
        .unwrap()
        .unwrap();
    let d = Arc::clone(&dev);
    let bytes = std::thread::spawn(move || {
        d.replay(S0, &g, 1).unwrap();
        d.read(S0, &x).unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(floats(&bytes), vec![5.0; 64]);
}

#[test]
fn one_backend_value_hosts_devices_one_after_another_and_side_by_side() {
    let Some(b) = backend("devices one after another") else {
        return;
    };
    let results = capture_suite::reuse::devices_one_after_another(&b.backend, 2).unwrap();
    assert_eq!(results, [3.0; 5]);
}

#[test]
fn a_device_dropped_while_another_records_releases_nothing_until_the_window_closes() {
    let Some(b) = backend("teardown_deferred") else {
        return;
    };
    let again = crate::support::another(&b);
    let (a, other) = (device(&b), device(&again));
    // `other` holds pages and a loaded module.
    let other_fill = fill_of(&other);
    let y = other.alloc(S0, 256).unwrap();
    fill_with(&other, &other_fill, &y, 1.0);
    other.sync(S0).unwrap();
    let fill = fill_of(&a);
    let x = a.alloc(S0, 256).unwrap();
    a.prepare(S0).unwrap();
    fill_with(&a, &fill, &x, 6.0);
    a.begin(S0).unwrap();
    fill_with(&a, &fill, &x, 6.0);
    let before = driver_model::counts();

    // Dropped while `a` records: a free or a module unload now would break its capture
    // (the driver model refuses them and invalidates it). Nothing is released yet.
    drop((y, other_fill));
    drop(other);
    if let (Some(before), Some(now)) = (before, driver_model::counts()) {
        assert_eq!(now.device_allocations, before.device_allocations, "{now:?}");
        assert_eq!(now.modules, before.modules, "{now:?}");
    }
    let g = a.end(S0).unwrap();
    if let (Some(before), Some(now)) = (before, driver_model::counts()) {
        assert!(
            now.device_allocations < before.device_allocations,
            "{now:?}"
        );
        assert!(now.modules < before.modules, "{now:?}");
    }
    a.write(S0, &x, 0, vec![0u8; 256]).unwrap();
    a.replay(S0, &g, 1).unwrap();
    assert_eq!(floats(&a.read(S0, &x).unwrap()), vec![6.0; 64]);
}

#[test]
fn nothing_outlives_its_device_on_the_driver_model() {
    let Some(b) = backend("leaks") else {
        return;
    };
    let Some(before) = driver_model::counts() else {
        println!("SKIP: leaks: the driver is not the model, which counts what lives");
        return;
    };
    {
        let dev = device(&b);
        let fill = fill_of(&dev);
        let copy = dev.kernel(<CudaBackend as Builtins>::builtin(Builtin::Copy));
        let x = dev.alloc(S0, 256).unwrap();
        let y = dev.alloc(StreamId::new(1), 256).unwrap();
        fill_with(&dev, &fill, &x, 2.0);
        // A cross-stream copy (an event and a wait), a capture and replays.
        let copy_xy = |d: &Device<CudaBackend>| {
            d.launch(
                StreamId::new(1),
                &copy,
                [1, 1, 1],
                &[Arg::read(&x), Arg::write(&y)],
                &Builtin::Copy.info(64, 0.0),
            )
        };
        copy_xy(&dev).unwrap();
        let g = dev.capture(S0, |d| {
            d.launch(
                S0,
                &fill,
                [1, 1, 1],
                &[Arg::write(&x)],
                &Builtin::Fill.info(64, 7.0),
            )
        });
        let g = g.unwrap();
        dev.replay(S0, &g, 3).unwrap();
        copy_xy(&dev).unwrap();
        assert_eq!(
            floats(&dev.read(StreamId::new(1), &y).unwrap()),
            vec![7.0; 64]
        );
        dev.drop_graph(g).unwrap();
    }
    let after = driver_model::counts().expect("still the model");
    assert_eq!(after.live(), before.live(), "what the device left behind");
    assert!(after.kernels_run > before.kernels_run, "{after:?}");
    assert!(
        after.graphs_launched >= before.graphs_launched + 3,
        "{after:?}"
    );
}

#[test]
fn a_thread_with_no_context_switches_to_the_backends_once_not_per_call() {
    let Some(b) = backend("context_switches") else {
        return;
    };
    let dev = device(&b);
    let fill = fill_of(&dev);
    let x = dev.alloc(S0, 256).unwrap();
    fill_with(&dev, &fill, &x, 0.5);
    dev.sync(S0).unwrap();
    let switches = || driver_model::counts().map(|c| c.context_switches);
    let (dev, fill, x) = (&dev, &fill, &x);
    let (before, after) = std::thread::scope(|s| {
        s.spawn(|| {
            // A fresh thread: no context current.
            let before = switches();
            for _ in 0..50 {
                fill_with(dev, fill, x, 0.5);
            }
            dev.sync(S0).unwrap();
            (before, switches())
        })
        .join()
        .unwrap()
    });
    match (before, after) {
        (Some(before), Some(after)) => assert!(
            after - before <= 1,
            "{} context switches for 50 launches and a sync from one thread",
            after - before
        ),
        _ => println!("SKIP: context_switches: the driver is not the model, which counts them"),
    }
}

#[test]
fn reads_go_through_one_kept_pinned_page() {
    let Some(b) = backend("read staging") else {
        return;
    };
    let dev = device(&b);
    let kept = |dev: &Device<CudaBackend>| dev.memory_report().streams[0].read_staging_bytes;
    let bytes: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    let ramp: Vec<u8> = (0..1u32 << 20).map(|i| (i % 253) as u8).collect();
    let x = dev.alloc(S0, bytes.len() as u64).unwrap();
    let y = dev.alloc(S0, ramp.len() as u64).unwrap();
    let z = dev.alloc(S0, 17 << 20).unwrap();
    dev.write(S0, &x, 0, bytes.clone()).unwrap();
    dev.write(S0, &y, 0, ramp.clone()).unwrap();
    dev.write(S0, &z, 0, vec![3u8; 17 << 20]).unwrap();
    assert_eq!(kept(&dev), 0, "no read yet");
    assert_eq!(dev.read(S0, &x).unwrap(), bytes);
    assert_eq!(
        kept(&dev),
        64 << 10,
        "the first read keeps the smallest page"
    );
    let report = dev.memory_report().to_string();
    assert!(report.contains("read-back staging: 65536 B"), "{report}");
    // Later reads of no more bytes pin nothing new.
    let pinned = || driver_model::counts().map(|c| (c.host_allocations, c.host_bytes));
    let before = pinned();
    let mut into = vec![0u8; 4096];
    for offset in 0..100u64 {
        let len = 4096 - offset as usize * 8;
        dev.read_into(S0, &x, offset * 8, &mut into[..len]).unwrap();
        assert_eq!(into[..len], bytes[offset as usize * 8..]);
    }
    assert_eq!(pinned(), before, "100 reads pinned no more host memory");
    // A larger read grows the page: the old one is freed as the new one is made.
    assert_eq!(dev.read(S0, &y).unwrap(), ramp);
    assert_eq!(kept(&dev), 1 << 20);
    if let (Some((n0, b0)), Some((n1, b1))) = (before, pinned()) {
        assert_eq!(n1, n0, "one page replaced another");
        assert_eq!(b1 - b0, (1 << 20) - (64 << 10));
    }
    // Past the cap (16 MiB) the read copies straight into the caller's memory.
    let after_grow = pinned();
    assert_eq!(dev.read(S0, &z).unwrap(), vec![3u8; 17 << 20]);
    assert_eq!(
        kept(&dev),
        1 << 20,
        "a read past the cap keeps nothing more"
    );
    assert_eq!(pinned(), after_grow, "and pins nothing");
}
