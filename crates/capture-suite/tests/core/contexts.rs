//! Devices that share one driver context (issue 11, item 3): the capture rules of a
//! context reach past one `Device`, so a device's page release or first kernel load is
//! decided against every window the context's devices record. On the mock, one backend
//! value is one context (as every `Device` over clones of one `CudaBackend` is), and a
//! free or a module load anywhere on it invalidates its recordings, as CUDA's relaxed
//! mode leaves them to the core.

use capture_core::{
    Arg, Buffer, Chain, Device, DeviceConfig, KernelHandle, MemoryKind, ServerError,
};
use capture_mock::MockBackend;

use crate::{ADD_ONE, ADD_SCALAR, S0, bytes_of, suite_lock, values_of};

type Mock = Device<MockBackend>;

fn device(backend: &MockBackend) -> Mock {
    Device::new(backend.clone(), DeviceConfig::new().streams(2).unwrap()).unwrap()
}

fn filled(dev: &Mock, values: &[u32]) -> Buffer {
    let b = dev.alloc(S0, values.len() as u64 * 4).unwrap();
    dev.write(S0, &b, 0, bytes_of(values)).unwrap();
    b
}

fn add_one(dev: &Mock, k: &KernelHandle, x: &Buffer, y: &Buffer) -> Result<(), ServerError> {
    dev.launch(S0, k, [1, 1, 1], &[Arg::read(x), Arg::write(y)], &[])
}

fn text(e: &ServerError) -> String {
    Chain(e).to_string()
}

/// `a` with a window recording one `add_one` from `x` into `y`.
fn recording(a: &Mock) -> (KernelHandle, Buffer, Buffer) {
    let k = a.kernel(ADD_ONE);
    let x = filled(a, &[1, 2, 3, 4]);
    let y = a.alloc(S0, 16).unwrap();
    add_one(a, &k, &x, &y).unwrap();
    a.prepare(S0).unwrap();
    add_one(a, &k, &x, &y).unwrap();
    a.begin(S0).unwrap();
    add_one(a, &k, &x, &y).unwrap();
    (k, x, y)
}

#[test]
fn a_device_on_the_same_context_keeps_another_devices_capture_valid() {
    let _suite = suite_lock();
    let mock = MockBackend::new();
    let a = device(&mock);
    let b = device(&mock);
    // `b` holds an empty page a cleanup would release.
    drop(b.alloc(S0, 64).unwrap());
    b.sync(S0).unwrap();
    let (_k, x, y) = recording(&a);

    // Pools may grow: an allocation leaves a relaxed-mode capture valid.
    let z = filled(&b, &[7; 4]);
    // A page release would invalidate `a`'s capture: refused, naming the recording.
    let err = b.cleanup().unwrap_err();
    assert!(
        matches!(err, ServerError::GraphState { .. }) && text(&err).contains("is recording"),
        "{}",
        text(&err)
    );
    assert_eq!(
        err.window(),
        Some(S0),
        "the refusal names `a`'s window by id"
    );
    // So would a first kernel load.
    let kb = b.kernel(ADD_SCALAR);
    let err = b
        .launch(S0, &kb, [1, 1, 1], &[Arg::read_write(&z)], &[1])
        .unwrap_err();
    assert!(
        text(&err).contains("on another device of the same driver context is recording"),
        "{}",
        text(&err)
    );
    let load = err.root_cause();
    assert_eq!(load.window(), Some(S0), "{}", text(&err));
    assert_eq!(load.subject().and_then(|s| s.kernel()), Some(kb.id()));

    let g = a.end(S0).unwrap();
    a.write(S0, &x, 0, bytes_of(&[10, 20, 30, 40])).unwrap();
    a.replay(S0, &g, 1).unwrap();
    assert_eq!(values_of(&a.read(S0, &y).unwrap()), [11, 21, 31, 41]);

    // The refused launch's output is claimed, as any launch that did not run; a host
    // write recovers it. The window closed: `b` loads, launches and releases pages.
    assert!(matches!(b.read(S0, &z), Err(ServerError::Unwritten(_))));
    b.write(S0, &z, 0, bytes_of(&[7; 4])).unwrap();
    b.launch(S0, &kb, [1, 1, 1], &[Arg::read_write(&z)], &[1])
        .unwrap();
    assert_eq!(values_of(&b.read(S0, &z).unwrap()), [8; 4]);
    drop(z);
    b.sync(S0).unwrap();
    let report = b.cleanup().unwrap();
    assert!(report.pages_released > 0, "{report:?}");
}

#[test]
fn a_device_dropped_with_its_window_open_leaves_the_context() {
    let _suite = suite_lock();
    let mock = MockBackend::new();
    let a = device(&mock);
    let b = device(&mock);
    drop(b.alloc(S0, 64).unwrap());
    b.sync(S0).unwrap();
    let _recording = recording(&a);
    assert!(b.cleanup().is_err(), "a window of the context records");
    drop(a);
    let report = b.cleanup().unwrap();
    assert!(report.pages_released > 0, "{report:?}");
}

#[test]
fn devices_on_two_contexts_do_not_wait_for_each_other() {
    let _suite = suite_lock();
    let a = device(&MockBackend::new());
    let b = device(&MockBackend::new());
    drop(b.alloc(S0, 64).unwrap());
    b.sync(S0).unwrap();
    let (_k, _x, y) = recording(&a);
    b.cleanup().unwrap();
    let kb = b.kernel(ADD_SCALAR);
    let z = filled(&b, &[1; 4]);
    b.launch(S0, &kb, [1, 1, 1], &[Arg::read_write(&z)], &[1])
        .unwrap();
    let g = a.end(S0).unwrap();
    a.replay(S0, &g, 1).unwrap();
    assert_eq!(values_of(&a.read(S0, &y).unwrap()), [2, 3, 4, 5]);
}

#[test]
fn rule_25_a_device_dropped_while_another_records_releases_nothing_until_the_window_closes() {
    let _suite = suite_lock();
    let mock = MockBackend::new();
    let a = device(&mock);
    let b = device(&mock);
    // `b` holds pages and a loaded kernel.
    let kb = b.kernel(ADD_ONE);
    let bx = filled(&b, &[1; 4]);
    let by = b.alloc(S0, 16).unwrap();
    add_one(&b, &kb, &bx, &by).unwrap();
    b.sync(S0).unwrap();
    let (_k, x, y) = recording(&a);
    let pages = mock.live_pages(MemoryKind::Device);

    // Dropped while `a` records: its pages would be freed inside `a`'s window, which
    // the driver's capture cannot contain. Nothing is released yet.
    drop((bx, by, kb));
    drop(b);
    assert_eq!(mock.live_pages(MemoryKind::Device), pages);

    // `a`'s capture is intact; once its window closes, `b`'s pages go.
    let g = a.end(S0).unwrap();
    assert!(mock.live_pages(MemoryKind::Device) < pages);
    a.write(S0, &x, 0, bytes_of(&[5, 6, 7, 8])).unwrap();
    a.replay(S0, &g, 1).unwrap();
    assert_eq!(values_of(&a.read(S0, &y).unwrap()), [6, 7, 8, 9]);
}
