//! The user's view, as a first program meets it: an error matched in one step, the
//! capture closure's phase, builtins by name, the binding alignment, the memory
//! report's page and driver-allocation counts checked against the driver, and one
//! backend value hosting devices one after another and side by side.

use std::sync::Mutex;

use capture_core::{
    Arg, Builtin, CapturePhase, Device, DeviceConfig, MemoryKind, ServerError, StreamId,
};
use capture_mock::MockBackend;

use crate::{S0, S2, add_one, device, filled, kernels, read};

#[test]
fn a_foreign_end_is_a_flat_abandoned_and_a_doomed_window_s_cause_is_one_step_away() {
    let _suite = crate::suite_lock();
    let (dev, world) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1]);
    let y = dev.alloc(S0, 4).unwrap();
    dev.prepare(S0).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap();
    dev.begin(S0).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap();
    // Flat for the ender and for the owner.
    assert!(matches!(
        dev.end(S2).unwrap_err(),
        ServerError::Abandoned { owner: S0, by: S2 }
    ));
    assert!(matches!(
        dev.end(S0).unwrap_err(),
        ServerError::Abandoned { owner: S0, by: S2 }
    ));
    // A window doomed by a failed launch: the post-mortem wraps the driver's error,
    // and `root_cause` reaches it in one step.
    world.fail(capture_mock::FaultOp::Launch, 2);
    let err = dev.capture(S0, |d| add_one(d, &k, S0, &x, &y)).unwrap_err();
    let pm = err
        .post_mortem()
        .expect("a doomed window has a post-mortem");
    assert_eq!((pm.owner, pm.launches), (S0, 0));
    match err.root_cause() {
        ServerError::Driver { op, .. } => assert_eq!(*op, "launch"),
        other => panic!("the root cause is the driver's failure, not {other:?}"),
    }
    // A read of what the window would have written: its refusal is typed too.
    let refused = read(&dev, S0, &y).unwrap_err();
    let unwritten = refused.unwritten().expect("a refused read");
    assert_eq!(unwritten.memory, y.id());
}

#[test]
fn the_capture_closure_is_told_its_phase_and_it_agrees_with_the_device() {
    let _suite = crate::suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1]);
    let y = dev.alloc(S0, 4).unwrap();
    let seen = Mutex::new(Vec::new());
    let graph = dev
        .capture(S0, |d| {
            let recording = d.captures().recording().contains(&S0);
            seen.lock().unwrap().push((d.phase(), recording));
            add_one(d.device(), &k, S0, &x, &y)
        })
        .unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        [(CapturePhase::Warmup, false), (CapturePhase::Record, true)]
    );
    dev.drop_graph(graph).unwrap();
}

#[test]
fn builtins_are_registered_once_and_found_by_name() {
    let dev = Device::new(MockBackend::new(), DeviceConfig::new()).unwrap();
    let s = StreamId::new(0);
    let fill = dev.builtin(Builtin::Fill);
    assert_eq!(dev.builtin(Builtin::Fill), fill, "one handle per builtin");
    assert_eq!(dev.builtin("fill".parse().unwrap()), fill);
    assert_eq!(dev.kernel_by_name("fill"), Some(fill));
    assert_eq!(dev.kernel_by_name("no_such_kernel"), None);
    assert_ne!(dev.builtin(Builtin::Copy), fill);
    assert!(matches!(
        "fil".parse::<Builtin>(),
        Err(ServerError::InvalidArgument {
            what: "builtin",
            ..
        })
    ));
    // The handle found by name launches.
    let out = dev.alloc(s, 16).unwrap();
    let by_name = dev.kernel_by_name("fill").unwrap();
    dev.launch(
        s,
        &by_name,
        [1, 1, 1],
        &[Arg::write(&out)],
        &Builtin::Fill.info(4, 2.5),
    )
    .unwrap();
    let floats: Vec<f32> = dev
        .read(s, &out)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(floats, [2.5; 4]);
}

#[test]
fn a_range_off_the_device_s_binding_alignment_is_refused_naming_it() {
    let dev = Device::new(MockBackend::new(), DeviceConfig::new()).unwrap();
    let s = StreamId::new(0);
    let align = dev.binding_alignment();
    assert_eq!(align, 16, "the mock declares CUDA's 16-byte alignment");
    let copy = dev.builtin(Builtin::Copy);
    let x = dev.alloc(s, 256).unwrap();
    let y = dev.alloc(s, 256).unwrap();
    dev.write(s, &x, 0, vec![0u8; 256]).unwrap();
    let launch = |offset: u64| {
        dev.launch(
            s,
            &copy,
            [1, 1, 1],
            &[
                Arg::read(&x).range(offset, 64),
                Arg::write(&y).range(offset, 64),
            ],
            &Builtin::Copy.info(16, 0.0),
        )
    };
    launch(align).expect("an aligned range binds");
    let err = launch(align / 2).unwrap_err();
    assert!(matches!(err, ServerError::InvalidBinding { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains(&format!("binds ranges at multiples of {align} bytes")),
        "{err}"
    );
    // Nothing was lost: the stream still works.
    launch(0).unwrap();
    dev.sync(s).unwrap();
}

#[test]
fn the_memory_report_counts_pages_and_driver_allocations_as_the_driver_sees_them() {
    let backend = MockBackend::new();
    let dev = Device::new(backend.clone(), DeviceConfig::new()).unwrap();
    let s = StreamId::new(0);
    let copy = dev.builtin(Builtin::Copy);
    let x = dev.alloc(s, 4096).unwrap();
    let y = dev.alloc(s, 3 << 20).unwrap();
    dev.write(s, &x, 0, vec![1u8; 4096]).unwrap();
    let graph = dev
        .capture(s, |d| {
            d.launch(
                s,
                &copy,
                [1, 1, 1],
                &[Arg::read(&x), Arg::write(&y)],
                &Builtin::Copy.info(1024, 0.0),
            )
        })
        .unwrap();
    dev.replay(s, &graph, 2).unwrap();
    let live = |kind| backend.live_pages(kind) as u64;
    let report = dev.memory_report();
    assert!(report.pages() >= 2, "{report}");
    let device_pages: u64 = report.streams.iter().map(|r| r.device.pages()).sum();
    let host_pages: u64 = report.streams.iter().map(|r| r.host.pages()).sum();
    assert_eq!(device_pages, live(MemoryKind::Device), "{report}");
    assert_eq!(host_pages, live(MemoryKind::Host), "{report}");
    assert!(!report.is_empty());
    assert!(
        report.to_string().contains("live driver allocations"),
        "{report}"
    );

    drop((x, y));
    dev.drop_graph(graph).unwrap();
    dev.sync(s).unwrap();
    dev.cleanup().unwrap();
    let report = dev.memory_report();
    assert!(report.is_empty(), "everything was freed: {report}");
    let (allocations, frees) = report.driver_allocations();
    assert!(allocations >= 2);
    assert_eq!(allocations, frees, "{report}");
    assert_eq!(live(MemoryKind::Device) + live(MemoryKind::Host), 0);
}

#[test]
fn one_backend_value_hosts_devices_one_after_another_and_side_by_side() {
    let backend = MockBackend::new();
    let results = capture_suite::reuse::devices_one_after_another(&backend, 3).unwrap();
    assert_eq!(results, [3.0; 6]);
    drop(results);
    assert_eq!(
        backend.live_pages(MemoryKind::Device),
        0,
        "each device freed its pages"
    );
    let affine = capture_mock::AffineMock::new();
    let results = capture_suite::reuse::devices_one_after_another(&affine, 2).unwrap();
    assert_eq!(results, [3.0; 5]);
}
