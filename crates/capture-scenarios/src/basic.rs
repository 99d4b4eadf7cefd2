//! Scenarios of plain capture and replay: results, rewritten inputs, metadata, other
//! streams, shared info entries, K replays in one submission.

use capture_core::Arg;
use capture_core::ServerError;

use super::{Harness, N, S0, S1, bytes, map, ramp, splat};
use capture_core::{Builtin, Builtins};

/// A graph of one `+1` launch, replayed twice: each replay leaves `input + 1`.
pub(super) fn capture_replay<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.buffer(S0, &ramp(1.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    let g = h.dev.capture(S0, |_| h.add(S0, &x, &y, 1.0))?;
    h.expect(S0, &y, &ramp(2.0));
    for _ in 0..2 {
        h.write(S0, &y, &splat(0.0))?;
        h.dev.replay(S0, &g, 1)?;
        h.expect(S0, &y, &ramp(2.0));
    }
    Ok(())
}

/// Inputs written in place between replays: each replay sees the new bytes.
pub(super) fn input_rewrite<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.buffer(S0, &splat(1.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    let g = h.dev.capture(S0, |_| {
        h.add(S0, &x, &y, 1.0)?;
        h.launch(
            S0,
            Builtin::MulScalar,
            &[Arg::read(&y), Arg::write(&y)],
            N,
            3.0,
        )
    })?;
    for step in 0..3 {
        let input = ramp(step as f32 * 10.0);
        h.write(S0, &x, &input)?;
        h.dev.replay(S0, &g, 1)?;
        h.expect(S0, &y, &map(&input, |v| (v + 1.0) * 3.0));
    }
    Ok(())
}

/// 150 ping-pong launches whose info words (a shape, or a scalar) differ, so warmup
/// uploads 79 info buffers (past the drop queue's 64-item flush threshold) and the
/// window finds every one warm; two replays match a host model.
pub(super) fn many_launches_metadata<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    const LAUNCHES: usize = 150;
    let cols = 4u64;
    // Even launches add each element's row (the shape, 1 to 4 rows of 4, from the info
    // words); odd launches add a scalar no other launch uses.
    let launch = |i: usize| -> (Builtin, [u64; 2]) {
        if i.is_multiple_of(2) {
            (Builtin::RowBias, [1 + (i as u64 / 2) % 4, cols])
        } else {
            (Builtin::AddScalar, Builtin::AddScalar.info(N, i as f32))
        }
    };
    let a = h.buffer(S0, &ramp(0.0))?;
    let b = h.buffer(S0, &splat(0.0))?;
    let chain = || -> Result<(), ServerError> {
        for i in 0..LAUNCHES {
            let (x, y) = if i.is_multiple_of(2) {
                (&a, &b)
            } else {
                (&b, &a)
            };
            let (kernel, info) = launch(i);
            h.dev.launch(
                S0,
                h.kernel(kernel),
                [1, 1, 1],
                &[Arg::read(x), Arg::write(y)],
                &info,
            )?;
        }
        Ok(())
    };
    let model = |start: &[f32]| {
        let mut bufs = [start.to_vec(), splat(0.0)];
        for i in 0..LAUNCHES {
            let (kernel, info) = launch(i);
            let (x, y) = if i.is_multiple_of(2) { (0, 1) } else { (1, 0) };
            let mut args = vec![bufs[x].clone(), bufs[y].clone()];
            kernel.model(&mut args, &info);
            bufs[y] = args.pop().expect("two buffers");
        }
        bufs
    };
    let g = h.dev.capture(S0, |_| chain())?;
    let expected = model(&ramp(0.0));
    h.expect(S0, &a, &expected[0]);
    h.expect(S0, &b, &expected[1]);
    for start in [ramp(100.0), ramp(-7.0)] {
        h.write(S0, &a, &start)?;
        h.write(S0, &b, &splat(0.0))?;
        h.dev.replay(S0, &g, 1)?;
        let expected = model(&start);
        h.expect(S0, &a, &expected[0]);
        h.expect(S0, &b, &expected[1]);
    }
    let ledger = h.dev.graph(&g).expect("live graph");
    assert_eq!(ledger.launches, LAUNCHES as u64);
    assert_eq!(
        ledger.info_entries,
        4 + 75,
        "four shapes and 75 scalars, each pinned once"
    );
    Ok(())
}

/// A capture on one pooled stream while another stream works eagerly on its own memory:
/// neither sees the other's work.
pub(super) fn isolation_from_other_stream<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.buffer(S0, &splat(1.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    let p = h.buffer(S1, &splat(5.0))?;
    let q = h.dev.alloc(S1, N * 4)?;
    h.add(S1, &p, &q, 1.0)?;
    h.add(S0, &x, &y, 1.0)?;
    h.dev.prepare(S0)?;
    h.add(S0, &x, &y, 1.0)?;
    h.dev.begin(S0)?;
    h.add(S0, &x, &y, 1.0)?;
    // S1 keeps working on its own memory: launches that need no new page are fine.
    h.add(S1, &p, &q, 2.0)?;
    h.expect(S1, &q, &splat(7.0));
    let g = h.dev.end(S0)?;
    h.write(S0, &x, &splat(10.0))?;
    h.dev.replay(S0, &g, 1)?;
    h.expect(S0, &y, &splat(11.0));
    h.expect(S1, &q, &splat(7.0));
    Ok(())
}

/// Two graphs built from launches with the same info words share one info-cache entry;
/// it stays pinned until both graphs are dropped.
pub(super) fn shared_info_entry_two_graphs<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.buffer(S0, &splat(1.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    let z = h.dev.alloc(S0, N * 4)?;
    let g1 = h.dev.capture(S0, |_| h.add(S0, &x, &y, 4.0))?;
    let g2 = h.dev.capture(S0, |_| h.add(S0, &x, &z, 4.0))?;
    assert_eq!(h.dev.graph(&g1).expect("live").info_entries, 1);
    assert_eq!(h.dev.graph(&g2).expect("live").info_entries, 1);
    h.dev.drop_graph(g1)?;
    h.write(S0, &x, &splat(2.0))?;
    h.dev.replay(S0, &g2, 1)?;
    h.expect(S0, &z, &splat(6.0));
    h.dev.drop_graph(g2)?;
    h.dev.cleanup()?;
    Ok(())
}

/// K replays in one submission run the graph K times.
pub(super) fn replay_k_times_in_one_submission<B: Builtins>(
    h: &Harness<B>,
) -> Result<(), ServerError> {
    let acc = h.buffer(S0, &splat(0.0))?;
    let one = h.buffer(S0, &splat(1.0))?;
    let g = h.dev.capture(S0, |_| {
        h.launch(
            S0,
            Builtin::Axpy,
            &[Arg::read(&one), Arg::read_write(&acc)],
            N,
            2.0,
        )
    })?;
    h.expect(S0, &acc, &splat(2.0));
    h.dev.replay(S0, &g, 5)?;
    h.expect(S0, &acc, &splat(12.0));
    Ok(())
}

/// A launch reading what another stream wrote waits for that stream first, eagerly and
/// in a graph; the graph pins the other stream's buffer, so dropping it and allocating
/// over its pool corrupts nothing.
pub(super) fn cross_stream_input_ordered<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.buffer(S1, &splat(0.0))?;
    h.dev.sync(S1)?;
    let y = h.dev.alloc(S0, N * 4)?;
    h.dev.write(S1, &x, 0, bytes(&ramp(10.0)))?;
    h.add(S0, &x, &y, 1.0)?;
    h.expect(S0, &y, &ramp(11.0));
    let g = h.dev.capture(S0, |_| h.add(S0, &x, &y, 1.0))?;
    h.dev.write(S1, &x, 0, bytes(&ramp(40.0)))?;
    h.dev.sync(S1)?;
    drop(x);
    let sentinels = (0..8)
        .map(|i| h.buffer(S1, &splat(300.0 + i as f32)))
        .collect::<Result<Vec<_>, _>>()?;
    h.dev.replay(S0, &g, 1)?;
    h.expect(S0, &y, &ramp(41.0));
    for (i, s) in sentinels.iter().enumerate() {
        h.expect(S1, s, &splat(300.0 + i as f32));
    }
    Ok(())
}
