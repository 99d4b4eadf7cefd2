//! Scenarios of memory honesty: growth refused in a window, intermediates and inputs
//! never aliased, staging kept, drops behind fences, pages held, reports and ledgers.

use capture_core::Arg;
use capture_core::ServerError;

use super::{Harness, N, S0, S1, assert_contains, map, ramp, splat};
use capture_core::{Builtin, Builtins};

/// An allocation that would grow a pool inside the window is refused, naming size, pool
/// and stream, and the window is doomed.
pub(super) fn growing_pool_refused<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.buffer(S0, &splat(1.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    let r = h.dev.capture(S0, |d| {
        h.add(S0, &x, &y, 1.0)?;
        if d.captures().is_any_recording() {
            // An odd size no warmup produced: the pool has to grow.
            d.alloc(S0, 3_145_733)?;
        }
        Ok(())
    });
    let err = r.expect_err("the window must be refused");
    assert_contains(
        &err,
        "allocation of 3145733 bytes in pool device.persistent for stream#0 refused: stream#0 is recording",
    );
    // The doomed window's outputs carry the failure; a host write recovers them.
    h.expect_unreadable(S0, &y, "3145733");
    h.write(S0, &y, &splat(0.0))?;
    h.expect(S0, &y, &splat(0.0));
    Ok(())
}

/// Drop an intermediate after capture, then allocate 8 sentinels of its size from the
/// same (persistent) pool, as a second capture's warmup would: the replay corrupts none
/// of them, and its result is right.
pub(super) fn intermediate_recycling<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.buffer(S0, &ramp(0.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    let g = h.dev.capture(S0, |d| {
        let tmp = d.alloc(S0, N * 4)?;
        h.add(S0, &x, &tmp, 1.0)?;
        h.launch(
            S0,
            Builtin::MulScalar,
            &[Arg::read(&tmp), Arg::write(&y)],
            N,
            2.0,
        )
    })?;
    h.dev.prepare(S0)?;
    let sentinels = (0..8)
        .map(|i| h.buffer(S0, &splat(1000.0 + i as f32)))
        .collect::<Result<Vec<_>, _>>()?;
    h.dev.abort(S0)?;
    h.write(S0, &x, &ramp(10.0))?;
    h.dev.replay(S0, &g, 1)?;
    h.expect(S0, &y, &map(&ramp(10.0), |v| (v + 1.0) * 2.0));
    for (i, s) in sentinels.iter().enumerate() {
        h.expect(S0, s, &splat(1000.0 + i as f32));
    }
    Ok(())
}

/// Drop a graph input after capture, then allocate 8 sentinels: the graph still holds
/// the input's memory, so no sentinel lands on it and the replay corrupts none.
pub(super) fn input_dropped_after_capture<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let y = h.dev.alloc(S0, N * 4)?;
    let x = h.buffer(S0, &ramp(5.0))?;
    let g = h.dev.capture(S0, |_| h.add(S0, &x, &y, 1.0))?;
    drop(x);
    h.dev.prepare(S0)?;
    let sentinels = (0..8)
        .map(|i| h.buffer(S0, &splat(2000.0 + i as f32)))
        .collect::<Result<Vec<_>, _>>()?;
    h.dev.abort(S0)?;
    h.dev.replay(S0, &g, 1)?;
    h.expect(S0, &y, &ramp(6.0));
    for (i, s) in sentinels.iter().enumerate() {
        h.expect(S0, s, &splat(2000.0 + i as f32));
    }
    Ok(())
}

/// Two host writes recorded in the window: the graph keeps their staging after the
/// caller dropped its bytes, and every replay copies those bytes again, even after other
/// writes staged through the same pool.
pub(super) fn host_write_in_window<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.dev.alloc(S0, N * 4)?;
    let w = h.dev.alloc(S0, N * 4)?;
    let y = h.dev.alloc(S0, N * 4)?;
    let g = h.dev.capture(S0, |_| {
        let input = ramp(3.0);
        h.write(S0, &x, &input)?;
        drop(input);
        h.write(S0, &w, &splat(100.0))?;
        h.add(S0, &x, &y, 1.0)?;
        h.launch(
            S0,
            Builtin::Axpy,
            &[Arg::read(&w), Arg::read_write(&y)],
            N,
            1.0,
        )
    })?;
    for i in 0..4 {
        let other = h.buffer(S0, &splat(90.0 + i as f32))?;
        drop(other);
    }
    for b in [&x, &w, &y] {
        h.write(S0, b, &splat(0.0))?;
    }
    h.dev.replay(S0, &g, 1)?;
    h.expect(S0, &x, &ramp(3.0));
    h.expect(S0, &w, &splat(100.0));
    h.expect(S0, &y, &map(&ramp(3.0), |v| v + 1.0 + 100.0));
    // Two recorded copies' staging (64 B each, holding the bytes copied; the caller's
    // own buffers are not kept), plus the 256-byte slot warmup staged the info words
    // through (both launches' words are `[16, 1.0]`: one cache entry): every slot handed
    // out while the pools are armed is pinned, warmup's included.
    let ledger = h.dev.graph(&g).expect("live");
    assert_eq!(ledger.host_bytes, 2 * 64 + 256);
    assert_eq!(ledger.copies, 2);
    assert_eq!(ledger.info_entries, 1);
    Ok(())
}

/// Drop a graph right after enqueueing a replay: the drop does not wait, the replay
/// still runs with its executable, staging and slices, and sentinels allocated over
/// released memory are untouched.
pub(super) fn drop_after_enqueued_replay<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.dev.alloc(S0, N * 4)?;
    let y = h.dev.alloc(S0, N * 4)?;
    let g = h.dev.capture(S0, |d| {
        h.write(S0, &x, &ramp(1.0))?;
        let tmp = d.alloc(S0, N * 4)?;
        h.add(S0, &x, &tmp, 1.0)?;
        h.add(S0, &tmp, &y, 1.0)
    })?;
    h.write(S0, &y, &splat(0.0))?;
    h.dev.sync(S0)?;
    h.dev.replay(S0, &g, 1)?;
    h.dev.drop_graph(g)?;
    let other = h.buffer(S0, &splat(77.0))?;
    h.dev.prepare(S0)?;
    let sentinels = (0..8)
        .map(|i| h.buffer(S0, &splat(500.0 + i as f32)))
        .collect::<Result<Vec<_>, _>>()?;
    h.dev.abort(S0)?;
    h.expect(S0, &y, &ramp(3.0));
    h.expect(S0, &x, &ramp(1.0));
    h.expect(S0, &other, &splat(77.0));
    for (i, s) in sentinels.iter().enumerate() {
        h.expect(S0, s, &splat(500.0 + i as f32));
    }
    Ok(())
}

/// While any stream records, no page is released: a cleanup is refused, naming the
/// recording stream, and changes nothing; after the window it releases.
pub(super) fn page_release_refused_while_recording<B: Builtins>(
    h: &Harness<B>,
) -> Result<(), ServerError> {
    let x = h.buffer(S0, &splat(1.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    drop(h.dev.alloc(S1, 2 << 20)?);
    h.add(S0, &x, &y, 1.0)?;
    h.dev.prepare(S0)?;
    h.add(S0, &x, &y, 1.0)?;
    h.dev.begin(S0)?;
    h.add(S0, &x, &y, 1.0)?;
    let before = h.dev.memory_report();
    let err = h
        .dev
        .cleanup()
        .expect_err("no page is released while a stream records");
    assert_contains(&err, "cleanup: stream#0's window is recording");
    assert_eq!(
        err.window(),
        Some(S0),
        "the refusal names the recording window"
    );
    assert_eq!(h.dev.memory_report(), before);
    let g = h.dev.end(S0)?;
    let released = h.dev.cleanup()?;
    assert!(
        released.pages_released >= 1,
        "the empty 2 MiB page goes after the window"
    );
    h.write(S0, &x, &splat(2.0))?;
    h.dev.replay(S0, &g, 1)?;
    h.expect(S0, &y, &splat(3.0));
    Ok(())
}

/// The memory report and the per-graph ledger after capture, and after the graph drops.
pub(super) fn memory_report_and_ledger<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.buffer(S0, &splat(1.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    let g = h.dev.capture(S0, |d| {
        h.write(S0, &x, &splat(2.0))?;
        let tmp = d.alloc(S0, N * 4)?;
        h.add(S0, &x, &tmp, 1.0)?;
        h.add(S0, &tmp, &y, 1.0)
    })?;
    let ledger = h.dev.graph(&g).expect("live graph");
    assert_eq!(
        ledger.launches, 2,
        "two launches (the recorded write is not one)"
    );
    assert_eq!(ledger.info_entries, 1, "both launches share one info entry");
    // x and y are the user's, tmp only the graph's; the entry holds two info words.
    assert_eq!(
        (
            ledger.user_bytes,
            ledger.graph_only_bytes,
            ledger.info_bytes
        ),
        (2 * N * 4, N * 4, 2 * 8),
        "{ledger}"
    );
    assert_eq!(
        ledger.user_bytes + ledger.graph_only_bytes + ledger.info_bytes,
        ledger.device_bytes
    );
    let report = h.dev.memory_report();
    assert_eq!(report.graphs, vec![ledger]);
    h.dev.drop_graph(g)?;
    h.dev.sync(S0)?;
    assert!(h.dev.memory_report().graphs.is_empty());
    Ok(())
}

/// A graph dropped right after its replay (twice, in one submission) was enqueued: the
/// drop waits behind the replay's fence, the replay's result is right, and buffers
/// allocated afterwards hold their own bytes; then a cleanup releases what is free.
pub(super) fn drop_under_replay<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let (x, y) = (h.dev.alloc(S0, N * 4)?, h.dev.alloc(S0, N * 4)?);
    // The intermediate is allocated in the closure: warmup's slice, reused recording.
    let g = h.dev.capture(S0, |d| {
        h.write(S0, &x, &splat(1.0))?;
        let tmp = d.alloc(S0, N * 4)?;
        h.add(S0, &x, &tmp, 1.0)?;
        h.add(S0, &tmp, &y, 1.0)
    })?;
    h.write(S0, &y, &splat(0.0))?;
    h.dev.sync(S0)?;
    h.dev.replay(S0, &g, 2)?;
    // Dropped while its replay is queued: it waits behind the replay's fence.
    h.dev.drop_graph(g)?;
    let other = h.buffer(S0, &splat(77.0))?;
    let later = (0..4)
        .map(|i| h.buffer(S0, &splat(500.0 + i as f32)))
        .collect::<Result<Vec<_>, _>>()?;
    h.expect(S0, &y, &splat(3.0));
    h.expect(S0, &x, &splat(1.0));
    h.expect(S0, &other, &splat(77.0));
    for (i, b) in later.iter().enumerate() {
        h.expect(S0, b, &splat(500.0 + i as f32));
    }
    drop((other, later));
    h.dev.cleanup()?;
    Ok(())
}
