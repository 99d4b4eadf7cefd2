//! The mock's own behaviour: deferred work and `step`, poisoning, relaxed-mode capture
//! legality per context, the memory-node fault, thread-affine captures, and the fault plan.

use capture_core::backend::{
    Backend, BufferBinding, ComputeStorage, DeviceStream, Fence, GraphDriver, MemoryManagement,
    PageUpdate, StreamSetup,
};
use capture_core::{
    Access, Arg, Builtin, Builtins, Chain, Device, DeviceConfig, MemoryConfig, MemoryKind,
    ServerError, StreamId,
};
use capture_mock::{
    AffineMock, FaultOp, FaultPlan, Faulty, MockBackend, MockStorage, MockStream, POISON,
};
use capture_suite::scenarios::{N, S0, bytes, floats, ramp, splat, suite_lock};

fn text(e: &ServerError) -> String {
    Chain(e).to_string()
}

fn device(backend: MockBackend) -> Device<MockBackend> {
    Device::new(backend, DeviceConfig::new().streams(2).unwrap()).unwrap()
}

fn add(
    dev: &Device<MockBackend>,
    k: &capture_core::KernelHandle,
    x: &capture_core::Buffer,
    y: &capture_core::Buffer,
    a: f32,
) -> Result<(), ServerError> {
    dev.launch(
        S0,
        k,
        [1, 1, 1],
        &[Arg::read(x), Arg::write(y)],
        &Builtin::AddScalar.info(N, a),
    )
}

#[test]
fn nothing_runs_at_enqueue_and_step_runs_queued_work_in_order() {
    let _suite = suite_lock();
    let mock = MockBackend::new();
    let dev = device(mock.clone());
    let k = dev.kernel(MockBackend::builtin(Builtin::AddScalar));
    let x = dev.alloc(S0, N * 4).unwrap();
    let y = dev.alloc(S0, N * 4).unwrap();
    dev.write(S0, &x, 0, bytes(&splat(1.0))).unwrap();
    add(&dev, &k, &x, &y, 1.0).unwrap();
    assert_eq!(
        mock.pending(0),
        3,
        "the input's copy, the info words' upload and the launch wait"
    );
    assert_eq!(mock.step(0, 1), 1);
    assert_eq!(mock.pending(0), 2);
    assert_eq!(mock.step(0, 10), 2);
    assert_eq!(mock.pending(0), 0);
    assert_eq!(floats(&dev.read(S0, &y).unwrap()), splat(2.0));
    assert_eq!(mock.step(7, 1), 0, "no such stream");
}

#[test]
fn a_slice_returned_to_its_pool_is_poisoned_at_once() {
    let storage = MockStorage::standalone();
    let mut m = MemoryManagement::new(storage, MemoryKind::Device, MemoryConfig::unlimited());
    let h = m.reserve(64, StreamId::new(0), PageUpdate::Free).unwrap();
    let key = BufferBinding::whole(&h.binding(), StreamId::new(0), Access::Read).claim_key();
    let resource = m.resource(key).unwrap();
    assert!(
        m.storage()
            .peek(resource)
            .iter()
            .all(|&b| b == capture_mock::FRESH)
    );
    drop(h);
    m.reclaim();
    assert!(m.storage().peek(resource).iter().all(|&b| b == POISON));
}

/// Two streams on one mock context, driven below the core: what relaxed mode lets
/// happen beside a recording on `s0`, and what invalidates it.
fn two_streams(mock: &MockBackend) -> (MockStream, MockStream) {
    let s0 = mock
        .create_stream(&StreamSetup::standalone(0, false))
        .unwrap();
    let s1 = mock
        .create_stream(&StreamSetup::standalone(1, false))
        .unwrap();
    (s0, s1)
}

fn record(stream: &mut MockStream) {
    stream.capturing().prepare(S0).unwrap();
    stream.capturing().begin().unwrap();
    MockBackend::begin(stream).unwrap();
}

fn finish(stream: &mut MockStream) -> Result<(), ServerError> {
    MockBackend::instantiate(stream, None).map(|_| ())
}

#[test]
fn relaxed_mode_tolerates_allocation_and_other_streams_waits_from_any_thread() {
    let _suite = suite_lock();
    let mock = MockBackend::new();
    let (mut s0, mut s1) = two_streams(&mock);
    let mut storage = mock.storage(MemoryKind::Device);
    let page = storage.alloc(4096).unwrap();
    record(&mut s0);
    std::thread::scope(|s| {
        s.spawn(|| {
            // From another thread: an allocation, a sync and a fence wait of a stream
            // that does not record. Global mode would invalidate the capture on each.
            let more = storage.alloc(4096).unwrap();
            MockBackend::sync(&mut s1).unwrap();
            MockStream::fence(s1.signal()).wait().unwrap();
            more
        })
        .join()
        .unwrap()
    });
    // Relaxed mode: the capture ends on a thread other than the one that began it.
    let ended = std::thread::scope(|s| s.spawn(|| finish(&mut s0)).join().unwrap());
    ended.unwrap();
    let _ = page;
}

#[rstest::rstest]
#[case::free("a free")]
#[case::module_load("a module load")]
fn a_free_or_a_module_load_on_the_context_invalidates_every_recording(#[case] call: &str) {
    let _suite = suite_lock();
    let mock = MockBackend::new();
    let (mut s0, mut s1) = two_streams(&mock);
    let mut storage = mock.storage(MemoryKind::Device);
    let page = storage.alloc(4096).unwrap();
    record(&mut s0);
    match call {
        "a free" => storage.dealloc(page),
        _ => {
            MockBackend::load(&mut s1, &MockBackend::builtin(Builtin::Fill)).unwrap();
        }
    }
    let err = finish(&mut s0).unwrap_err();
    assert!(
        text(&err).contains(&format!(
            "capture invalidated (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED): {call} during stream capture"
        )),
        "{}",
        text(&err)
    );
}

#[rstest::rstest]
#[case::sync("a sync of a capturing stream")]
#[case::fence("a fence recorded on a capturing stream")]
fn a_call_on_the_capturing_stream_invalidates_its_capture_only(#[case] call: &str) {
    let _suite = suite_lock();
    let mock = MockBackend::new();
    let (mut s0, mut s1) = two_streams(&mock);
    record(&mut s0);
    record(&mut s1);
    match call {
        "a sync of a capturing stream" => MockBackend::sync(&mut s0).unwrap(),
        _ => drop(MockStream::fence(s0.signal())),
    }
    let err = finish(&mut s0).unwrap_err();
    assert!(
        text(&err).contains(&format!("{call} during stream capture")),
        "{}",
        text(&err)
    );
    finish(&mut s1).unwrap();
}

#[test]
fn another_context_touches_nothing_of_a_recording() {
    let _suite = suite_lock();
    let a = device(MockBackend::new());
    let b = device(MockBackend::new());
    let k = a.kernel(MockBackend::builtin(Builtin::AddScalar));
    let x = a.alloc(S0, N * 4).unwrap();
    let y = a.alloc(S0, N * 4).unwrap();
    a.write(S0, &x, 0, bytes(&ramp(0.0))).unwrap();
    add(&a, &k, &x, &y, 1.0).unwrap();
    a.prepare(S0).unwrap();
    add(&a, &k, &x, &y, 1.0).unwrap();
    a.begin(S0).unwrap();
    add(&a, &k, &x, &y, 1.0).unwrap();
    // Another context grows a pool, loads a kernel and releases its pages: nothing of
    // it reaches `a`'s capture (in global mode each would invalidate it).
    let kb = b.kernel(MockBackend::builtin(Builtin::AddScalar));
    let xb = b.alloc(S0, N * 4).unwrap();
    let yb = b.alloc(S0, N * 4).unwrap();
    b.write(S0, &xb, 0, bytes(&splat(1.0))).unwrap();
    add(&b, &kb, &xb, &yb, 1.0).unwrap();
    b.sync(S0).unwrap();
    drop((xb, yb));
    b.cleanup().unwrap();
    let g = a.end(S0).unwrap();
    a.replay(S0, &g, 1).unwrap();
    assert_eq!(floats(&a.read(S0, &y).unwrap()), ramp(1.0));
}

#[test]
fn a_graph_holding_a_memory_node_replays_once() {
    let _suite = suite_lock();
    let mock = MockBackend::new();
    let dev = device(mock.clone());
    let k = dev.kernel(MockBackend::builtin(Builtin::AddScalar));
    let x = dev.alloc(S0, N * 4).unwrap();
    let y = dev.alloc(S0, N * 4).unwrap();
    dev.write(S0, &x, 0, bytes(&ramp(0.0))).unwrap();
    mock.arm_memory_node_fault();
    let g = dev.capture(S0, |d| add(d, &k, &x, &y, 1.0)).unwrap();
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(floats(&dev.read(S0, &y).unwrap()), ramp(1.0));
    let err = dev.replay(S0, &g, 1).unwrap_err();
    assert!(
        text(&err).contains("CUDA_ERROR_INVALID_VALUE"),
        "{}",
        text(&err)
    );
    // The refused replay claims what the graph writes.
    assert!(dev.read(S0, &y).is_err());
}

#[test]
fn with_a_thread_affine_mock_a_capture_must_end_on_the_thread_that_began_it() {
    let _suite = suite_lock();
    let mock = AffineMock::new();
    let setup = StreamSetup::standalone(0, true);
    let mut stream = mock.create_stream(&setup).unwrap();
    stream.capturing().prepare(S0).unwrap();
    stream.capturing().begin().unwrap();
    AffineMock::begin(&mut stream).unwrap();
    let err = std::thread::scope(|s| {
        s.spawn(|| AffineMock::instantiate(&mut stream, None).map(|_| ()))
            .join()
            .unwrap()
    })
    .unwrap_err();
    assert!(
        text(&err).contains("must end on the thread that began it"),
        "{}",
        text(&err)
    );
    let _ = stream.signal();
}

#[test]
fn the_fault_plan_fails_exactly_the_nth_call_and_counts_every_call() {
    let _suite = suite_lock();
    let faulty = Faulty::new(MockBackend::new());
    let plan = faulty.plan().clone();
    let dev = Device::new(faulty, DeviceConfig::new().streams(1).unwrap()).unwrap();
    let k = dev.kernel(MockBackend::builtin(Builtin::AddScalar));
    let x = dev.alloc(S0, N * 4).unwrap();
    let y = dev.alloc(S0, N * 4).unwrap();
    dev.write(S0, &x, 0, bytes(&splat(1.0))).unwrap();
    plan.fail(FaultOp::Launch, 3).unwrap();
    let launch = || {
        dev.launch(
            S0,
            &k,
            [1, 1, 1],
            &[Arg::read(&x), Arg::write(&y)],
            &Builtin::AddScalar.info(N, 1.0),
        )
    };
    launch().unwrap();
    launch().unwrap();
    assert!(text(&launch().unwrap_err()).contains("injected fault in launch"));
    launch().unwrap();
    assert_eq!(plan.calls(FaultOp::Launch), 4);
    assert!(plan.calls(FaultOp::Alloc) >= 1);
    assert!(!plan.is_armed(FaultOp::Launch));
}

#[test]
fn a_fault_at_position_zero_is_refused() {
    let plan = FaultPlan::new();
    let err = plan.fail(FaultOp::Begin, 0).unwrap_err();
    assert!(
        text(&err).contains("invalid fault position 0"),
        "{}",
        text(&err)
    );
}

#[test]
fn an_allocation_fault_is_an_out_of_memory_refusal_the_stream_survives() {
    let _suite = suite_lock();
    let faulty = Faulty::new(MockBackend::new());
    let plan = faulty.plan().clone();
    let dev = Device::new(faulty, DeviceConfig::new().streams(1).unwrap()).unwrap();
    plan.fail_with(
        FaultOp::Alloc,
        1,
        ServerError::driver(
            "alloc",
            capture_mock::MockError::new("CUDA_ERROR_OUT_OF_MEMORY"),
        ),
    )
    .unwrap();
    let err = dev.alloc(S0, 64).unwrap_err();
    assert!(
        text(&err).contains("CUDA_ERROR_OUT_OF_MEMORY"),
        "{}",
        text(&err)
    );
    let b = dev.alloc(S0, 64).unwrap();
    dev.write(S0, &b, 0, bytes(&splat(3.0)[..16])).unwrap();
    assert_eq!(
        floats(&dev.read(S0, &b).unwrap()),
        splat(3.0)[..16].to_vec()
    );
}

#[test]
fn every_scenario_has_a_snapshot_and_no_snapshot_lacks_a_scenario() {
    let dir = capture_suite::scenarios::snapshot_dir();
    let dir = std::path::Path::new(&dir);
    let mut on_disk: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_suffix(".snap").map(str::to_owned)
        })
        .collect();
    on_disk.sort();
    let mut names: Vec<String> = capture_suite::scenarios::Scenario::ALL
        .iter()
        .map(|s| s.name().to_owned())
        .collect();
    names.sort();
    assert_eq!(on_disk, names);
    assert!(names.len() >= 30, "the suite has {} scenarios", names.len());
}
