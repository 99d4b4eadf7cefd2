//! Scenarios of the lifecycle: refusals that change nothing and doom nothing, abandoned
//! windows, neighbours, panics, first loads, aborts, and threads.

use std::panic::{AssertUnwindSafe, catch_unwind};

use capture_core::{Op, ServerError, Subject};

use super::{Harness, N, S0, S1, S2, assert_contains, assert_refused, ramp, splat, two_threads};
use capture_core::Builtins;

/// A host read of the recording stream is refused; the refusal does not doom the
/// capture, which still seals.
pub(super) fn read_refused_while_recording<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.buffer(S0, &splat(1.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    let g = h.dev.capture(S0, |d| {
        h.add(S0, &x, &y, 1.0)?;
        if d.captures().is_any_recording() {
            let err = d.read(S0, &y).expect_err("a host read inside the window");
            assert_contains(
                &err,
                "stream#0: its window is recording: a host wait would break the capture",
            );
            assert_eq!(
                err.window(),
                Some(S0),
                "the refusal names the recording window"
            );
        }
        Ok::<(), ServerError>(())
    })?;
    h.write(S0, &x, &splat(4.0))?;
    h.dev.replay(S0, &g, 1)?;
    h.expect(S0, &y, &splat(5.0));
    Ok(())
}

/// A foreign `end` abandons the window: no graph, an error naming both streams, and the
/// owner's later `end` hears of it.
pub(super) fn foreign_end_abandons<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.buffer(S0, &splat(1.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    h.add(S0, &x, &y, 1.0)?;
    h.dev.prepare(S0)?;
    h.add(S0, &x, &y, 1.0)?;
    h.dev.begin(S0)?;
    h.add(S0, &x, &y, 1.0)?;
    let err = h.dev.end(S2).expect_err("a foreign end seals nothing");
    assert_contains(
        &err,
        "capture window of stream#0 abandoned: ended by stream#2",
    );
    match h.dev.end(S0) {
        Err(ServerError::Abandoned { owner, by }) => assert_eq!((owner, by), (S0, S2)),
        other => panic!("the owner's end: {other:?}"),
    }
    // The recorded write never ran.
    h.expect_unreadable(S0, &y, "abandoned");
    h.dev.prepare(S0)?;
    h.dev.abort(S0)?;
    Ok(())
}

/// While a window is active (prepared or recording), a neighbour sharing the pooled
/// stream is refused, naming both streams; the window is not doomed.
pub(super) fn neighbour_refused<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.buffer(S0, &splat(1.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    let n = h.buffer(S2, &splat(9.0))?;
    h.add(S0, &x, &y, 1.0)?;
    h.dev.prepare(S0)?;
    let refused = |r: Result<(), ServerError>| match r {
        Err(ServerError::NeighbourRefused {
            neighbour, owner, ..
        }) => assert_eq!((neighbour, owner), (S2, S0)),
        other => panic!("the neighbour: {other:?}"),
    };
    refused(h.add(S2, &n, &n, 1.0));
    h.add(S0, &x, &y, 1.0)?;
    h.dev.begin(S0)?;
    refused(h.add(S2, &n, &n, 1.0));
    refused(h.dev.read(S2, &n).map(|_| ()));
    refused(h.dev.alloc(S2, 64).map(|_| ()));
    refused(h.dev.prepare(S2));
    h.add(S0, &x, &y, 1.0)?;
    let g = h.dev.end(S0)?;
    h.write(S0, &x, &splat(3.0))?;
    h.dev.replay(S0, &g, 1)?;
    h.expect(S0, &y, &splat(4.0));
    h.expect(S2, &n, &splat(9.0));
    Ok(())
}

/// A panic inside the capture closure aborts the window, taints what it wrote, and the
/// panic continues; the stream captures again afterwards.
pub(super) fn panic_in_capture_closure<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.buffer(S0, &splat(1.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        h.dev.capture(S0, |d| {
            h.add(S0, &x, &y, 1.0)?;
            if d.captures().is_any_recording() {
                std::panic::resume_unwind(Box::new("the user's code panicked"));
            }
            Ok::<(), ServerError>(())
        })
    }));
    assert!(outcome.is_err(), "the panic continues");
    assert!(h.dev.captures().recording().is_empty());
    h.expect_unreadable(S0, &y, "the window was aborted");
    let g = h.dev.capture(S0, |_| h.add(S0, &x, &y, 2.0))?;
    h.dev.replay(S0, &g, 1)?;
    h.expect(S0, &y, &splat(3.0));
    Ok(())
}

/// A kernel first loaded inside the window dooms it, naming the kernel; nothing was
/// loaded inside the capture.
pub(super) fn kernel_first_loaded_in_window<B: Builtins>(
    h: &Harness<B>,
) -> Result<(), ServerError> {
    let x = h.buffer(S0, &splat(1.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    h.dev.prepare(S0)?;
    h.dev.begin(S0)?;
    let err = h
        .add(S0, &x, &y, 1.0)
        .expect_err("a first load in the window");
    assert_contains(&err, "kernel add_scalar (kernel#");
    assert_contains(&err, "first loaded inside the window");
    // The kernel is a field of the refusal, and the post-mortem's operation its load.
    assert!(
        matches!(err.root_cause().subject(), Some(Subject::Kernel { name, .. }) if name == "add_scalar"),
        "{err}"
    );
    assert!(
        matches!(err.post_mortem().map(|pm| &pm.op), Some(Op::Load { name, .. }) if name == "add_scalar"),
        "{err}"
    );
    let end = h.dev.end(S0).expect_err("a doomed window seals nothing");
    assert_contains(
        &end,
        "doomed by load add_scalar on stream#0 after 0 recorded launches",
    );
    assert_eq!(h.plan.calls(capture_mock::FaultOp::Load), 0);
    Ok(())
}

/// A replay inside a window is refused; the window still seals.
pub(super) fn replay_inside_window_refused<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.buffer(S0, &splat(1.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    let g = h.dev.capture(S0, |_| h.add(S0, &x, &y, 1.0))?;
    let g2 = h.dev.capture(S0, |d| {
        if d.captures().is_any_recording() {
            let err = d.replay(S0, &g, 1).expect_err("a replay in the window");
            assert_contains(&err, "a replay inside it is refused");
        }
        h.add(S0, &y, &x, 1.0)
    })?;
    h.write(S0, &x, &splat(1.0))?;
    h.dev.replay(S0, &g, 1)?;
    h.dev.replay(S0, &g2, 1)?;
    h.expect(S0, &x, &splat(3.0));
    Ok(())
}

/// `abort` from capture closes the driver capture, drops the recording, taints what it
/// wrote and disarms.
pub(super) fn abort_from_capture<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.buffer(S0, &splat(1.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    h.dev.prepare(S0)?;
    h.add(S0, &x, &y, 1.0)?;
    h.dev.begin(S0)?;
    h.add(S0, &x, &y, 1.0)?;
    h.dev.abort(S0)?;
    assert!(h.dev.captures().recording().is_empty());
    h.expect_unreadable(S0, &y, "the window was aborted");
    let g = h.dev.capture(S0, |_| h.add(S0, &x, &y, 1.0))?;
    h.dev.replay(S0, &g, 1)?;
    h.expect(S0, &y, &splat(2.0));
    Ok(())
}

/// `abort` from prepare disarms: warmup's results stay readable, and the pools route
/// allocations to the dynamic pool again.
pub(super) fn abort_from_prepare<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.buffer(S0, &splat(1.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    h.dev.prepare(S0)?;
    h.add(S0, &x, &y, 1.0)?;
    h.dev.abort(S0)?;
    h.expect(S0, &y, &splat(2.0));
    let _after = h.dev.alloc(S0, N * 4)?;
    h.dev.abort(S0)?;
    Ok(())
}

/// Out-of-order lifecycle calls are refused and change nothing: begin without prepare,
/// a second prepare, a second begin, end with nothing open.
pub(super) fn out_of_order_lifecycle_refused<B: Builtins>(
    h: &Harness<B>,
) -> Result<(), ServerError> {
    let x = h.buffer(S0, &splat(1.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    h.add(S0, &x, &y, 1.0)?;
    let report = h.dev.memory_report();
    assert_contains(
        &h.dev.begin(S0).expect_err("begin"),
        "no capture is prepared",
    );
    assert_contains(&h.dev.end(S0).expect_err("end"), "nothing is recording");
    assert_eq!(h.dev.memory_report(), report);
    h.dev.prepare(S0)?;
    let err = h.dev.prepare(S0).expect_err("prepare");
    assert_contains(&err, "is prepared on this stream");
    assert_eq!(
        err.window(),
        Some(S0),
        "the refusal names the window in the way"
    );
    h.add(S0, &x, &y, 1.0)?;
    h.dev.begin(S0)?;
    let err = h.dev.begin(S0).expect_err("begin");
    assert_contains(&err, "already recording");
    assert_eq!(
        err.window(),
        Some(S0),
        "the refusal names the window in the way"
    );
    h.add(S0, &x, &y, 1.0)?;
    let g = h.dev.end(S0)?;
    h.write(S0, &x, &splat(5.0))?;
    h.dev.replay(S0, &g, 1)?;
    h.expect(S0, &y, &splat(6.0));
    Ok(())
}

/// `end` on a window still in prepare disarms it and seals nothing; prepare works again.
pub(super) fn end_in_prepare_disarms<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.buffer(S0, &ramp(0.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    h.dev.prepare(S0)?;
    h.add(S0, &x, &y, 1.0)?;
    let err = h.dev.end(S0).expect_err("end in prepare");
    assert_contains(&err, "never opened; disarmed");
    assert_eq!(
        err.window(),
        Some(S0),
        "the refusal names the disarmed window"
    );
    h.expect(S0, &y, &ramp(1.0));
    let g = h.dev.capture(S0, |_| h.add(S0, &x, &y, 2.0))?;
    h.dev.replay(S0, &g, 1)?;
    h.expect(S0, &y, &ramp(2.0));
    Ok(())
}

/// A capture begun on one user thread ends from another: legal in CUDA's relaxed mode
/// (and Vulkan), and on a thread-affine backend the core opens and closes the capture
/// on the stream's worker.
pub(super) fn capture_ended_from_another_thread<B: Builtins>(
    h: &Harness<B>,
) -> Result<(), ServerError> {
    let x = h.buffer(S0, &splat(1.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    std::thread::scope(|scope| -> Result<(), ServerError> {
        scope
            .spawn(|| -> Result<(), ServerError> {
                h.dev.prepare(S0)?;
                h.add(S0, &x, &y, 1.0)?;
                h.dev.begin(S0)?;
                h.add(S0, &x, &y, 1.0)
            })
            .join()
            .expect("the opening thread")?;
        let g = scope
            .spawn(|| h.dev.end(S0))
            .join()
            .expect("the closing thread")?;
        h.write(S0, &x, &splat(6.0))?;
        h.dev.replay(S0, &g, 1)?;
        h.expect(S0, &y, &splat(7.0));
        Ok(())
    })?;
    Ok(())
}

/// Two threads capture on two pooled streams at once: the main thread opens a window on
/// stream 0 by hand and hands over; the worker is refused on stream 2 (a neighbour of
/// that window) and captures stream 1 whole while the window is open; each graph
/// replays on its own stream, and both are dropped.
pub(super) fn two_streams_capture_at_once<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let (x0, y0) = (h.buffer(S0, &splat(1.0))?, h.dev.alloc(S0, N * 4)?);
    let (x1, y1) = (h.buffer(S1, &splat(10.0))?, h.dev.alloc(S1, N * 4)?);
    let n = h.buffer(S2, &splat(5.0))?;
    // Each stream loads its kernel and warms its info entry before any window opens.
    h.add(S0, &x0, &y0, 1.0)?;
    h.add(S1, &x1, &y1, 2.0)?;
    two_threads(
        |turn| {
            h.dev.prepare(S0)?;
            h.add(S0, &x0, &y0, 1.0)?;
            h.dev.begin(S0)?;
            h.add(S0, &x0, &y0, 1.0)?;
            // The worker is refused on stream 2 and captures on stream 1 meanwhile.
            turn.hand_over();
            let g0 = h.dev.end(S0)?;
            h.write(S0, &x0, &splat(3.0))?;
            h.dev.replay(S0, &g0, 1)?;
            h.expect(S0, &y0, &splat(4.0));
            turn.hand_over();
            h.dev.drop_graph(g0)
        },
        |turn| {
            assert_refused(
                h.add(S2, &n, &n, 1.0),
                "a launch on stream#2",
                "stream#0 holds a capture window",
            );
            let g1 = h.dev.capture(S1, |_| h.add(S1, &x1, &y1, 2.0))?;
            turn.hand_over();
            h.write(S1, &x1, &splat(20.0))?;
            h.dev.replay(S1, &g1, 2)?;
            h.expect(S1, &y1, &splat(22.0));
            h.dev.drop_graph(g1)
        },
    )?;
    h.expect(S2, &n, &splat(5.0));
    h.dev.sync(S1)?;
    h.dev.cleanup()?;
    Ok(())
}

/// Another thread ends the window from a neighbour stream: the window is abandoned and
/// what it wrote tainted; the owner's own `end` is told who ended it, and the stream
/// captures again.
pub(super) fn foreign_end_from_another_thread<B: Builtins>(
    h: &Harness<B>,
) -> Result<(), ServerError> {
    let (x, y) = (h.buffer(S0, &splat(1.0))?, h.dev.alloc(S0, N * 4)?);
    h.add(S0, &x, &y, 1.0)?;
    two_threads(
        |turn| {
            h.dev.prepare(S0)?;
            h.add(S0, &x, &y, 1.0)?;
            h.dev.begin(S0)?;
            h.add(S0, &x, &y, 1.0)?;
            // The worker ends the window from stream 2.
            turn.hand_over();
            match h.dev.end(S0) {
                Err(ServerError::Abandoned { owner, by }) => assert_eq!((owner, by), (S0, S2)),
                other => panic!("the owner's end: {other:?}; expected abandoned by stream#2"),
            }
            Ok(())
        },
        |_| {
            assert_refused(
                h.dev.end(S2),
                "the foreign end",
                "capture window of stream#0 abandoned: ended by stream#2",
            );
            Ok(())
        },
    )?;
    h.expect_unreadable(S0, &y, "abandoned");
    let g = h.dev.capture(S0, |_| h.add(S0, &x, &y, 1.0))?;
    h.write(S0, &x, &splat(5.0))?;
    h.dev.replay(S0, &g, 1)?;
    h.expect(S0, &y, &splat(6.0));
    h.dev.drop_graph(g)
}
