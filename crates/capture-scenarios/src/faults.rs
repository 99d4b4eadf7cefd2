//! Scenarios of faults, injected through [`Faulty`](capture_mock::Faulty) so they run on real
//! drivers too: refusals at begin, instantiate, replay, launch, upload and fences, and
//! how the ledger answers each.

use capture_core::Arg;
use capture_core::ServerError;

use super::{Harness, N, S0, assert_contains, assert_refused, map, ramp, splat};
use capture_core::{Builtin, Builtins};
use capture_mock::FaultOp;

fn arm<B: Builtins>(h: &Harness<B>, op: FaultOp, nth: u32) {
    h.plan.fail(op, nth).expect("a valid fault position");
}

/// The driver refuses `begin`: the stream unwinds to no capture (pools disarmed, cache
/// pins dropped) and prepare → begin works on the second try.
pub(super) fn begin_refused_then_retry<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.buffer(S0, &splat(1.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    arm(h, FaultOp::Begin, 1);
    let err = h
        .dev
        .capture(S0, |_| h.add(S0, &x, &y, 1.0))
        .expect_err("the driver refused begin");
    assert_contains(&err, "injected fault in begin capture");
    assert!(h.dev.captures().recording().is_empty());
    let g = h.dev.capture(S0, |_| h.add(S0, &x, &y, 1.0))?;
    h.write(S0, &x, &splat(2.0))?;
    h.dev.replay(S0, &g, 1)?;
    h.expect(S0, &y, &splat(3.0));
    Ok(())
}

/// The driver refuses to instantiate: no graph; a read of what the window would have
/// written fails naming the cause; a host write recovers it.
pub(super) fn instantiate_refused_taints<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.buffer(S0, &splat(1.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    arm(h, FaultOp::Instantiate, 1);
    let err = h
        .dev
        .capture(S0, |_| h.add(S0, &x, &y, 1.0))
        .expect_err("the driver refused to instantiate");
    assert_contains(
        &err,
        "doomed by instantiate on stream#0 after 1 recorded launches",
    );
    h.expect_unreadable(S0, &y, "injected fault in instantiate");
    h.write(S0, &y, &splat(8.0))?;
    h.expect(S0, &y, &splat(8.0));
    Ok(())
}

/// A replay that fails to enqueue taints what the graph writes; the next successful
/// replay settles it.
pub(super) fn replay_enqueue_failure_then_settle<B: Builtins>(
    h: &Harness<B>,
) -> Result<(), ServerError> {
    let x = h.buffer(S0, &ramp(0.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    let g = h.dev.capture(S0, |_| h.add(S0, &x, &y, 1.0))?;
    arm(h, FaultOp::Replay, 1);
    let err = h.dev.replay(S0, &g, 1).expect_err("the enqueue failed");
    assert_contains(&err, "injected fault in replay");
    h.expect_unreadable(S0, &y, "injected fault in replay");
    h.dev.replay(S0, &g, 1)?;
    h.expect(S0, &y, &ramp(1.0));
    // A replay whose input carries a failure is skipped and passes it on.
    arm(h, FaultOp::Launch, 1);
    h.launch(S0, Builtin::Copy, &[Arg::read(&y), Arg::write(&x)], N, 0.0)
        .expect_err("the launch writing the input failed");
    let err = h.dev.replay(S0, &g, 1).expect_err("skipped");
    assert!(
        matches!(&err, ServerError::Unwritten(u)
            if u.by.as_ref().and_then(|by| by.op.graph()) == Some(g.id())),
        "{err}"
    );
    h.expect_unreadable(S0, &y, &format!("replay {} on stream#0 skipped", g.id()));
    h.write(S0, &x, &ramp(5.0))?;
    h.dev.replay(S0, &g, 1)?;
    h.expect(S0, &y, &ramp(6.0));
    Ok(())
}

/// A tainted input skips a chain of three launches; a read of the last output names the
/// original cause and all three skips in order; rewriting the input recovers the chain.
pub(super) fn tainted_input_skips_chain_of_3<B: Builtins>(
    h: &Harness<B>,
) -> Result<(), ServerError> {
    let src = h.buffer(S0, &splat(1.0))?;
    let a = h.dev.alloc(S0, N * 4)?;
    let b = h.dev.alloc(S0, N * 4)?;
    let c = h.dev.alloc(S0, N * 4)?;
    let d = h.dev.alloc(S0, N * 4)?;
    h.add(S0, &src, &a, 1.0)?;
    arm(h, FaultOp::Launch, 1);
    h.add(S0, &src, &a, 1.0).expect_err("the launch failed");
    for (x, y) in [(&a, &b), (&b, &c), (&c, &d)] {
        let err = h
            .launch(
                S0,
                Builtin::MulScalar,
                &[Arg::read(x), Arg::write(y)],
                N,
                2.0,
            )
            .expect_err("skipped");
        assert!(matches!(err, ServerError::Unwritten(_)));
    }
    let err = h
        .floats(S0, &d)
        .expect_err("the chain's output is unwritten");
    assert_contains(&err, "injected fault in launch");
    assert_contains(&err, "mul_scalar on stream#0 skipped (input buf#");
    let text = capture_core::Chain(&err).to_string();
    assert_eq!(text.matches("skipped").count(), 3, "{text}");
    h.write(S0, &a, &splat(5.0))?;
    for (x, y) in [(&a, &b), (&b, &c), (&c, &d)] {
        h.launch(
            S0,
            Builtin::MulScalar,
            &[Arg::read(x), Arg::write(y)],
            N,
            2.0,
        )?;
    }
    h.expect(S0, &d, &splat(40.0));
    Ok(())
}

/// An asynchronous error reported at a fence taints every range written on that stream
/// since its last good fence; what was settled before stays readable.
pub(super) fn async_error_taints_since_last_good_fence<B: Builtins>(
    h: &Harness<B>,
) -> Result<(), ServerError> {
    let x = h.buffer(S0, &splat(1.0))?;
    let before = h.dev.alloc(S0, N * 4)?;
    h.add(S0, &x, &before, 1.0)?;
    h.dev.sync(S0)?;
    let after = h.dev.alloc(S0, N * 4)?;
    h.add(S0, &x, &after, 2.0)?;
    // The next wait for the stream reports an asynchronous error: the work ran, but
    // nothing written since the last good fence can be trusted.
    arm(h, FaultOp::AsyncAtFence, 1);
    let err = h.dev.sync(S0).expect_err("the wait reports the error");
    assert_contains(&err, "injected fault in asynchronous error at fence");
    h.expect(S0, &before, &splat(2.0));
    h.expect_unreadable(S0, &after, "injected fault in asynchronous error at fence");
    // Rewriting recovers.
    h.add(S0, &x, &after, 2.0)?;
    h.expect(S0, &after, &splat(3.0));
    Ok(())
}

/// A launch that fails inside the window dooms it: no graph, a post-mortem naming the
/// kernel, the stream and the launches recorded before it; written ranges tainted.
pub(super) fn launch_failure_in_window_dooms<B: Builtins>(
    h: &Harness<B>,
) -> Result<(), ServerError> {
    let x = h.buffer(S0, &splat(1.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    let z = h.dev.alloc(S0, N * 4)?;
    h.add(S0, &x, &y, 1.0)?;
    h.launch(S0, Builtin::Copy, &[Arg::read(&y), Arg::write(&z)], N, 0.0)?;
    h.dev.prepare(S0)?;
    h.dev.begin(S0)?;
    h.add(S0, &x, &y, 1.0)?;
    arm(h, FaultOp::Launch, 1);
    h.launch(S0, Builtin::Copy, &[Arg::read(&y), Arg::write(&z)], N, 0.0)
        .expect_err("the launch failed");
    let err = h.dev.end(S0).expect_err("doomed");
    assert_contains(&err, "doomed by copy on stream#0 after 1 recorded launches");
    h.expect_unreadable(S0, &y, "injected fault in launch");
    Ok(())
}

/// An upload failure is only logged: the graph seals and replays.
pub(super) fn upload_failure_only_logged<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.buffer(S0, &ramp(0.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    arm(h, FaultOp::Upload, 1);
    let g = h.dev.capture(S0, |_| h.add(S0, &x, &y, 3.0))?;
    assert!(!h.plan.is_armed(FaultOp::Upload), "the upload was tried");
    h.dev.replay(S0, &g, 2)?;
    h.expect(S0, &y, &map(&ramp(0.0), |v| v + 3.0));
    Ok(())
}

/// A refused fence wait (a submit the device never acknowledged) taints what the stream
/// wrote since its last good fence; the stream recovers at the next good wait.
pub(super) fn submit_failure_taints_then_recovers<B: Builtins>(
    h: &Harness<B>,
) -> Result<(), ServerError> {
    let x = h.buffer(S0, &splat(1.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    h.add(S0, &x, &y, 1.0)?;
    arm(h, FaultOp::Submit, 1);
    let err = h.dev.sync(S0).expect_err("the submit failed");
    assert_contains(&err, "injected fault in submit");
    h.expect_unreadable(S0, &y, "injected fault in submit");
    // Everything written since the last good fence is claimed, the input's upload too.
    h.expect_unreadable(S0, &x, "injected fault in submit");
    h.write(S0, &x, &splat(1.0))?;
    h.add(S0, &x, &y, 1.0)?;
    h.dev.sync(S0)?;
    h.expect(S0, &y, &splat(2.0));
    Ok(())
}

/// Three faults in a row on one stream: a launch failing inside a window dooms it and
/// taints what it would have written; a replay failing to enqueue taints its outputs
/// until the next replay settles them; a failed submit taints what the stream wrote
/// since its last good fence.
pub(super) fn fault_dooms_taints_recovers<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.buffer(S0, &splat(1.0))?;
    let (y, z) = (h.dev.alloc(S0, N * 4)?, h.dev.alloc(S0, N * 4)?);
    h.add(S0, &x, &y, 1.0)?;
    h.copy(S0, &y, &z)?;
    h.dev.sync(S0)?;
    // A launch fails inside the window: doomed, what it would have written tainted.
    h.dev.prepare(S0)?;
    h.dev.begin(S0)?;
    h.add(S0, &x, &y, 1.0)?;
    arm(h, FaultOp::Launch, 1);
    assert_refused(h.copy(S0, &y, &z), "the copy", "injected fault in launch");
    assert_refused(h.dev.end(S0), "the seal", "doomed by copy on stream#0");
    h.expect_unreadable(S0, &y, "injected fault in launch");
    // A replay fails to enqueue: its outputs carry the failure until one succeeds.
    let g = h.dev.capture(S0, |_| h.add(S0, &x, &y, 1.0))?;
    arm(h, FaultOp::Replay, 1);
    assert_refused(
        h.dev.replay(S0, &g, 1),
        "the replay",
        "injected fault in replay",
    );
    h.expect_unreadable(S0, &y, "injected fault in replay");
    h.dev.replay(S0, &g, 1)?;
    h.expect(S0, &y, &splat(2.0));
    // A submit fails: what the stream wrote since its last good fence is tainted.
    h.copy(S0, &y, &z)?;
    arm(h, FaultOp::Submit, 1);
    assert_refused(h.dev.sync(S0), "the sync", "injected fault in submit");
    h.expect_unreadable(S0, &z, "injected fault in submit");
    h.dev.drop_graph(g)
}
