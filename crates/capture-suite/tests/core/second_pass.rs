//! The second pass (issue 23): rule breaks an adversarial review found outside the
//! reference model's reach, and the messages a first real program met. Each test is
//! named after its item and failed on the main it was found on.

use capture_core::{Arg, Builtin, Chain, ServerError};
use capture_mock::FaultOp;

use crate::{Dev, S0, S1, add_one, bytes_of, device, filled, kernels, read, suite_lock};

fn text(e: &ServerError) -> String {
    Chain(e).to_string()
}

fn is_unwritten<T: std::fmt::Debug>(r: &Result<T, ServerError>) -> bool {
    matches!(r, Err(ServerError::Unwritten(_)))
}

/// Launches `add_scalar` (`buf += scalar`, the scalar in the info words) on `stream`.
fn add_scalar(dev: &Dev, k: &crate::Kernels, buf: &capture_core::Buffer, scalar: u64) {
    dev.launch(
        S0,
        &k.add_scalar,
        [1, 1, 1],
        &[Arg::read_write(buf)],
        &[scalar],
    )
    .unwrap();
}

/// Item 1: a good fence the host met outside a read or sync of the stream (here,
/// `begin` waiting for the stream's own work) settles what it covers: a later
/// asynchronous error on that stream claims only what it wrote since.
#[test]
fn i23_01_a_good_fence_met_at_begin_settles_what_it_covers() {
    let _suite = suite_lock();
    let (dev, world) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S1, &[1, 2, 3, 4]);
    let a = dev.alloc(S1, 16).unwrap();
    add_one(&dev, &k, S1, &x, &a).unwrap();
    // `begin` waits on the host for S1's queued work: a good fence covering `a`.
    dev.prepare(S1).unwrap();
    let c = dev.alloc(S1, 16).unwrap();
    add_one(&dev, &k, S1, &a, &c).unwrap();
    dev.begin(S1).unwrap();
    add_one(&dev, &k, S1, &a, &c).unwrap();
    let g = dev.end(S1).unwrap();
    world.fail(FaultOp::AsyncAtFence, 1);
    dev.replay(S1, &g, 1).unwrap();
    assert!(dev.sync(S1).is_err());
    assert!(
        is_unwritten(&read(&dev, S1, &c)),
        "the replay wrote c since"
    );
    // Written before the good fence: settled, not claimed.
    assert_eq!(read(&dev, S1, &a).unwrap(), [2, 3, 4, 5]);
    assert_eq!(read(&dev, S1, &x).unwrap(), [1, 2, 3, 4]);
}

/// Item 2: on the mock, a kernel fault reported once does not fail every later
/// cross-stream wait on that stream.
#[test]
fn i23_02_a_fault_reported_once_does_not_poison_later_waits_on_the_stream() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    let boom = dev.kernel(crate::PANIC);
    let x = filled(&dev, S1, &[1, 2, 3, 4]);
    dev.sync(S1).unwrap();
    dev.launch(S1, &boom, [1, 1, 1], &[Arg::read_write(&x)], &[])
        .unwrap();
    // The fault is reported, and claims what S1 wrote.
    assert!(dev.sync(S1).is_err());
    for round in 0..3u32 {
        // The data is rewritten and the stream used again, successfully.
        dev.write(S1, &x, 0, bytes_of(&[round; 4])).unwrap();
        let y = dev.alloc(S1, 16).unwrap();
        add_one(&dev, &k, S1, &x, &y).unwrap();
        dev.sync(S1).unwrap();
        let z = dev.alloc(S1, 16).unwrap();
        add_one(&dev, &k, S1, &y, &z).unwrap();
        // Another stream reads S1's fresh write: its device-side wait on S1 succeeds.
        let w = dev.alloc(S0, 16).unwrap();
        add_one(&dev, &k, S0, &z, &w).unwrap();
        assert_eq!(read(&dev, S0, &w).unwrap(), [round + 3; 4], "round {round}");
    }
}

/// Item 3: an info entry a window cached and that window aborted is uploaded by the next
/// window that uses it, even with no warmup launch of its own.
#[test]
fn i23_03_an_info_entry_of_an_aborted_window_is_uploaded_before_a_graph_uses_it() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1, 2, 3, 4]);
    // A first graph leaves room in the persistent pool (the kernel loads in its warmup),
    // so a later window can cache new words without growing it.
    let g0 = dev.capture(S0, |d| add_scalar_in(d, &k, &x)).unwrap();
    dev.drop_graph(g0).unwrap();
    dev.sync(S0).unwrap();
    // A window records a launch with fresh words (their upload is only recorded), and
    // is aborted.
    dev.prepare(S0).unwrap();
    dev.begin(S0).unwrap();
    add_scalar(&dev, &k, &x, 7);
    dev.abort(S0).unwrap();
    dev.write(S0, &x, 0, bytes_of(&[1, 2, 3, 4])).unwrap();
    // A later window records the same words without a warmup launch.
    dev.prepare(S0).unwrap();
    dev.begin(S0).unwrap();
    add_scalar(&dev, &k, &x, 7);
    let g = dev.end(S0).unwrap();
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &x).unwrap(), [8, 9, 10, 11]);
}

/// Item 4: a refused `cleanup` changes nothing, on any stream.
#[test]
fn i23_04_a_cleanup_refused_while_a_stream_is_armed_releases_nothing() {
    let _suite = suite_lock();
    let (dev, _) = device();
    // An empty page on each pooled stream.
    for s in [S0, S1] {
        drop(dev.alloc(s, 64).unwrap());
        dev.sync(s).unwrap();
    }
    let pages = dev.memory_report().pages();
    assert_eq!(pages, 2);
    // S1's window is armed (prepared, not recording).
    dev.prepare(S1).unwrap();
    let err = dev.cleanup().unwrap_err();
    assert!(
        matches!(err, ServerError::GraphState { .. }),
        "{}",
        text(&err)
    );
    assert_eq!(dev.memory_report().pages(), pages, "nothing was released");
    dev.abort(S1).unwrap();
    assert_eq!(dev.cleanup().unwrap().pages_released, 2);
}

/// Item 5: a window's recorded host writes are not launches: not in the ledger, the
/// `Sealed` event or a post-mortem.
#[test]
fn i23_05_recorded_host_writes_are_not_counted_as_launches() {
    let _suite = suite_lock();
    let (dev, world) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1, 2, 3, 4]);
    let y = dev.alloc(S0, 16).unwrap();
    let g = dev
        .capture(S0, |d| {
            d.write(S0, &x, 0, bytes_of(&[5; 4]))?;
            add_one(d, &k, S0, &x, &y)?;
            d.write(S0, &x, 0, bytes_of(&[6; 4]))
        })
        .unwrap();
    let ledger = dev.graph(&g).unwrap();
    assert_eq!((ledger.launches, ledger.copies), (1, 2));
    let sealed = dev.trace().render();
    assert!(
        sealed.contains("end -> graph#0 (1 launches, 2 copies)"),
        "{sealed}"
    );
    // A window doomed after a write and a launch names one launch before it.
    // Calls 1 and 2 are warmup's, 3 and 4 the recording's.
    world.fail(FaultOp::Launch, 4);
    let err = dev
        .capture(S0, |d| {
            d.write(S0, &x, 0, bytes_of(&[5; 4]))?;
            add_one(d, &k, S0, &x, &y)?;
            d.write(S0, &x, 0, bytes_of(&[6; 4]))?;
            add_one(d, &k, S0, &x, &y)
        })
        .unwrap_err();
    assert!(
        text(&err).contains("after 1 recorded launches"),
        "{}",
        text(&err)
    );
}

/// Item 6: a user kernel that resizes a buffer it was given fails that work, as a
/// kernel that panics does: no panic out of `Device::read`.
#[test]
fn i23_06_a_kernel_that_resizes_its_buffer_fails_its_work_without_a_panic() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let resize = dev.kernel(crate::RESIZE);
    let x = filled(&dev, S0, &[1, 2, 3, 4]);
    dev.launch(S0, &resize, [1, 1, 1], &[Arg::read_write(&x)], &[])
        .unwrap();
    let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dev.read(S0, &x)));
    let read = read.expect("no panic out of read");
    assert!(read.is_err(), "{read:?}");
    // The stream goes on.
    dev.write(S0, &x, 0, bytes_of(&[9; 4])).unwrap();
    assert_eq!(crate::read(&dev, S0, &x).unwrap(), [9; 4]);
}

/// Item 7: the largest allocation the API allows is `OutOfMemory` on the mock, not an
/// abort of the process.
#[test]
fn i23_07_the_largest_allocation_is_out_of_memory_on_the_mock() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let err = dev
        .alloc(S0, capture_core::MAX_ALLOCATION_BYTES)
        .unwrap_err();
    assert!(matches!(err, ServerError::OutOfMemory(_)), "{}", text(&err));
    // The device goes on.
    let x = filled(&dev, S0, &[1]);
    assert_eq!(read(&dev, S0, &x).unwrap(), [1]);
}

/// Item 9: a replay count past the bound is refused, naming it; the stream goes on.
#[test]
fn i23_09_a_replay_count_past_the_bound_is_refused() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1]);
    let g = dev.capture(S0, |d| add_scalar_in(d, &k, &x)).unwrap();
    let err = dev.replay(S0, &g, u32::MAX).unwrap_err();
    assert!(
        matches!(err, ServerError::InvalidArgument { .. })
            && text(&err).contains(&capture_core::MAX_REPLAYS_PER_CALL.to_string()),
        "{}",
        text(&err)
    );
    dev.replay(S0, &g, 2).unwrap();
    assert_eq!(read(&dev, S0, &x).unwrap(), [4]);
}

fn add_scalar_in(
    dev: &Dev,
    k: &crate::Kernels,
    x: &capture_core::Buffer,
) -> Result<(), ServerError> {
    dev.launch(S0, &k.add_scalar, [1, 1, 1], &[Arg::read_write(x)], &[1])
}

/// Item 9: `row_bias` with info words whose product overflows does not panic.
#[test]
fn i23_09_row_bias_with_overflowing_words_does_not_panic() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let rb = dev.builtin(Builtin::RowBias);
    let x = dev.alloc(S0, 16).unwrap();
    dev.write(S0, &x, 0, vec![0u8; 16]).unwrap();
    let y = dev.alloc(S0, 16).unwrap();
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        dev.launch(
            S0,
            &rb,
            [1, 1, 1],
            &[Arg::read(&x), Arg::write(&y)],
            &[u64::MAX, 3],
        )
        .and_then(|()| dev.read(S0, &y))
    }));
    assert!(run.is_ok(), "no panic");
    let host = std::panic::catch_unwind(|| {
        let mut bufs = vec![vec![0.0f32; 4], vec![0.0f32; 4]];
        Builtin::RowBias.model(&mut bufs, &[u64::MAX, 3]);
        bufs
    });
    assert!(host.is_ok(), "the host model does not panic either");
}

/// Item 9: `sync` reports the asynchronous error its wait met. A sync (and a read) waits
/// once: its own wait covers everything the stream enqueued, so the drop queue retires
/// behind it with no fence of its own (issue 35: no fresh event, record and blocking wait
/// after a stream already synchronised).
#[test]
fn i23_09_sync_reports_the_error_its_wait_met_and_waits_once() {
    let _suite = suite_lock();
    let (dev, world) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1, 2, 3, 4]);
    let y = dev.alloc(S0, 16).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap();
    let before = world.calls(FaultOp::AsyncAtFence);
    world.fail(FaultOp::AsyncAtFence, 1);
    let synced = dev.sync(S0);
    assert_eq!(
        world.calls(FaultOp::AsyncAtFence) - before,
        1,
        "a sync waits once"
    );
    assert!(synced.is_err(), "the wait's error is the sync's");
    assert!(is_unwritten(&read(&dev, S0, &y)));
    // A read after good work waits once too, and frees what the work held (the fault
    // claimed x as well: everything written since the last good fence, rule 15).
    dev.write_values(S0, &x, 0, &[1u32, 2, 3, 4]).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap();
    let before = world.calls(FaultOp::AsyncAtFence);
    assert_eq!(read(&dev, S0, &y).unwrap(), [2, 3, 4, 5]);
    assert_eq!(
        world.calls(FaultOp::AsyncAtFence) - before,
        1,
        "a read waits once"
    );
    assert_eq!(dev.memory_report().streams[0].pending_drops, 0);
}

/// Item 12: an eager launch over a never-written input names the launch and its kernel.
#[test]
fn i23_12_a_launch_over_an_unwritten_input_names_the_launch_and_the_kernel() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = dev.alloc(S0, 16).unwrap();
    let y = dev.alloc(S0, 16).unwrap();
    let err = add_one(&dev, &k, S0, &x, &y).unwrap_err();
    let t = text(&err);
    assert!(t.contains("launch of add_one"), "{t}");
    assert!(t.contains("never written"), "{t}");
}

/// Item 12: a second `prepare` says what to do, without repeating the stream.
#[test]
fn i23_12_a_second_prepare_says_to_end_or_abort_first() {
    let _suite = suite_lock();
    let (dev, _) = device();
    dev.prepare(S0).unwrap();
    let err = dev.prepare(S0).unwrap_err();
    let t = text(&err);
    assert!(!t.contains("stream#0: stream#0"), "{t}");
    assert_eq!(err.window(), Some(S0), "{t}");
    assert!(t.contains("abort"), "{t}");
    dev.abort(S0).unwrap();
}

/// Item 12: an allocation refused inside a window says to allocate in warmup.
#[test]
fn i23_12_an_allocation_in_the_window_says_to_allocate_in_warmup() {
    let _suite = suite_lock();
    let (dev, _) = device();
    dev.prepare(S0).unwrap();
    dev.begin(S0).unwrap();
    let t = text(&dev.alloc(S0, 1 << 22).unwrap_err());
    assert!(t.contains("warmup"), "{t}");
    dev.abort(S0).unwrap();
}

/// An engine's own error: what its step can fail with besides the device.
#[derive(Debug)]
enum EngineError {
    Device(ServerError),
    Sampler(&'static str),
}

impl From<ServerError> for EngineError {
    fn from(e: ServerError) -> Self {
        Self::Device(e)
    }
}

/// Item 11: the capture closure fails with the caller's own error type; `?` on a device
/// call converts, and warmup, record and abort behave as with `ServerError`.
#[test]
fn i23_11_the_capture_closure_fails_with_the_callers_error_type() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1, 2]);
    let y = dev.alloc(S0, 8).unwrap();
    // The engine's own failure in the record pass: the window is aborted, what it would
    // have written is claimed, and the error comes back as the engine's.
    let mut calls = 0;
    let err = dev
        .capture(S0, |d| {
            calls += 1;
            add_one(d, &k, S0, &x, &y)?;
            if d.phase() == capture_core::CapturePhase::Record {
                return Err(EngineError::Sampler("no token left"));
            }
            Ok(())
        })
        .unwrap_err();
    assert!(
        matches!(err, EngineError::Sampler("no token left")),
        "{err:?}"
    );
    assert_eq!(calls, 2, "warmup, then record");
    assert!(dev.captures().active().is_empty(), "the window was aborted");
    assert!(
        is_unwritten(&dev.read(S0, &y)),
        "the aborted window's output is claimed"
    );
    // A device error inside the closure converts through `?` into the engine's type.
    let unwritten = dev.alloc(S0, 8).unwrap();
    let err = dev
        .capture(S0, |d| -> Result<(), EngineError> {
            add_one(d, &k, S0, &unwritten, &y)?;
            Ok(())
        })
        .unwrap_err();
    assert!(
        matches!(err, EngineError::Device(ServerError::Unwritten(_))),
        "{err:?}"
    );
    // A lifecycle refusal comes back converted too, and the stream goes on.
    dev.prepare(S0).unwrap();
    let err = dev
        .capture(S0, |d| -> Result<(), EngineError> {
            Ok(add_one(d, &k, S0, &x, &y)?)
        })
        .unwrap_err();
    assert!(
        matches!(err, EngineError::Device(ServerError::GraphState { .. })),
        "{err:?}"
    );
    dev.abort(S0).unwrap();
    let g = dev
        .capture(S0, |d| -> Result<(), EngineError> {
            Ok(add_one(d, &k, S0, &x, &y)?)
        })
        .unwrap();
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &y).unwrap(), [2, 3]);
}

/// Item 13, the guide's `Abandoned` claim: an `end` from a stream on *another* pooled
/// stream finds no window there and is refused; the owner's window goes on and seals.
/// (A stream folded onto the same pooled stream abandons it: `foreign_end_abandons`.)
#[test]
fn i23_13_an_end_from_another_pooled_stream_is_refused_and_the_window_goes_on() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1, 2]);
    let y = dev.alloc(S0, 8).unwrap();
    dev.prepare(S0).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap();
    dev.begin(S0).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap();
    let err = dev.end(S1).unwrap_err();
    assert!(matches!(err, ServerError::GraphState { .. }), "{err:?}");
    assert_eq!(dev.captures().recording(), [S0], "the owner still records");
    let g = dev.end(S0).unwrap();
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &y).unwrap(), [2, 3]);
}

/// Found by the widened model: a cleanup refused because a window of *another* device
/// on the same driver context records had already drained the drop queues (freeing
/// what they held); a refused cleanup changes nothing.
#[test]
fn i23_04_a_cleanup_refused_for_another_devices_window_changes_nothing() {
    let _suite = suite_lock();
    let mock = capture_mock::MockBackend::new();
    let config = || capture_core::DeviceConfig::new().streams(2).unwrap();
    let a = capture_core::Device::new(mock.clone(), config()).unwrap();
    let b = capture_core::Device::new(mock, config()).unwrap();
    let x = b.alloc(S1, 64).unwrap();
    b.write_values(S1, &x, 0, &[1u32; 16]).unwrap();
    let before = b.memory_report();
    assert!(
        before.pending_drops() > 0,
        "the write's staging waits in the drop queue"
    );
    a.prepare(S0).unwrap();
    a.begin(S0).unwrap();
    let err = b.cleanup().unwrap_err();
    assert!(
        text(&err).contains("on another device of the same driver context is recording"),
        "{}",
        text(&err)
    );
    assert_eq!(
        err.window(),
        Some(S0),
        "the refusal names `a`'s window by id"
    );
    assert_eq!(b.memory_report(), before, "nothing changed");
    a.abort(S0).unwrap();
    b.cleanup().unwrap();
    assert_eq!(b.read_values::<u32>(S1, &x).unwrap(), [1; 16]);
}
