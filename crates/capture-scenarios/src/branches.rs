//! Scenarios of a window forked over two streams (rules 28 and 29): two halves of a
//! step on two streams joined into one graph, a race between them refused when
//! recorded, a branch left unjoined.

use capture_core::{Arg, Builtin, Builtins, ServerError};

use super::{Harness, N, S0, S1, bytes, map, ramp, splat};

/// The two halves of a small MoE layer's step: each "expert" a chain of three launches
/// over its own buffers (`e = ((x + a) * b) + c`), one on the window's stream, the other
/// on a branch (or, unforked, on the window's stream too), then a combine of both after
/// the join into `bufs[4]`.
fn experts<B: Builtins>(
    h: &Harness<B>,
    x: &capture_core::Buffer,
    bufs: &[capture_core::Buffer; 6],
    forked: bool,
) -> Result<(), ServerError> {
    let [a1, a2, b1, b2, out, spare] = bufs;
    let _ = spare;
    let side = if forked {
        Some(h.dev.fork(S0, S1)?)
    } else {
        None
    };
    let on = if forked { S1 } else { S0 };
    let expert = |s, t: &capture_core::Buffer, u: &capture_core::Buffer, k: f32| {
        h.add(s, x, t, k)?;
        h.launch(
            s,
            Builtin::MulScalar,
            &[Arg::read(t), Arg::write(u)],
            N,
            k + 1.0,
        )?;
        h.launch(s, Builtin::AddScalar, &[Arg::read(u), Arg::write(t)], N, k)
    };
    // Expert B on the branch, expert A beside it on the window's stream.
    expert(on, b1, b2, 2.0)?;
    expert(S0, a1, a2, 1.0)?;
    if let Some(side) = side {
        h.dev.join(side)?;
    }
    // The combine reads both experts: after the join, ordered.
    h.copy(S0, a1, out)?;
    h.launch(
        S0,
        Builtin::Axpy,
        &[Arg::read(b1), Arg::read_write(out)],
        N,
        1.0,
    )
}

/// Two experts forked onto two streams and joined, captured as one graph: its replays
/// give, bit for bit, what the same work eager on one stream gives, and what a graph of
/// it on one stream gives.
pub(super) fn forked_experts<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.buffer(S0, &ramp(1.0))?;
    let alloc = || h.dev.alloc(S0, N * 4);
    let bufs = [alloc()?, alloc()?, alloc()?, alloc()?, alloc()?, alloc()?];
    // Eager, on one stream.
    experts(h, &x, &bufs, false)?;
    let eager = h.dev.read(S0, &bufs[4])?;
    let want = map(&ramp(1.0), |v| {
        ((v + 1.0) * 2.0 + 1.0) + ((v + 2.0) * 3.0 + 2.0)
    });
    h.expect(S0, &bufs[4], &want);
    let forked = h.dev.capture(S0, |_| experts(h, &x, &bufs, true))?;
    let single = h.dev.capture(S0, |_| experts(h, &x, &bufs, false))?;
    for graph in [&forked, &single, &forked] {
        h.write(S0, &bufs[4], &splat(0.0))?;
        h.dev.replay(S0, graph, 1)?;
        assert_eq!(
            h.dev.read(S0, &bufs[4])?,
            eager,
            "a replay gives the eager bytes"
        );
    }
    // A new input reaches both halves.
    h.write(S0, &x, &ramp(10.0))?;
    h.dev.replay(S0, &forked, 2)?;
    h.expect(
        S0,
        &bufs[4],
        &map(&ramp(10.0), |v| {
            ((v + 1.0) * 2.0 + 1.0) + ((v + 2.0) * 3.0 + 2.0)
        }),
    );
    Ok(())
}

/// The window's stream reads what its unjoined branch writes: refused when recorded,
/// naming both launches and the bytes; the window is doomed, the stream captures again.
pub(super) fn branch_race_refused<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.buffer(S0, &ramp(1.0))?;
    let (t, y) = (h.dev.alloc(S0, N * 4)?, h.dev.alloc(S0, N * 4)?);
    h.dev.label(&t, "branch out")?;
    let err = h
        .dev
        .capture(S0, |_| {
            let side = h.dev.fork(S0, S1)?;
            h.add(S1, &x, &t, 1.0)?;
            // Not joined yet: this read races the branch's write.
            let raced = h.add(S0, &t, &y, 1.0);
            h.dev.join(side)?;
            raced
        })
        .expect_err("a race between unjoined branches is refused");
    match err.root_cause() {
        ServerError::BranchRace(race) => {
            assert_eq!((race.first.stream, race.second.stream), (S1, S0));
            assert_eq!(race.memory, t.id());
        }
        other => panic!("not a race: {other}"),
    }
    super::assert_contains(&err, "\"branch out\"");
    // Joined first, the same read is ordered.
    let g = h.dev.capture(S0, |_| {
        let side = h.dev.fork(S0, S1)?;
        h.add(S1, &x, &t, 1.0)?;
        h.dev.join(side)?;
        h.add(S0, &t, &y, 1.0)
    })?;
    h.dev.replay(S0, &g, 1)?;
    h.expect(S0, &y, &ramp(3.0));
    Ok(())
}

/// A branch never joined: the window is doomed naming it, no graph comes out, what the
/// branch wrote is claimed, and the branch's stream is free once the window ended.
pub(super) fn unjoined_branch_dooms<B: Builtins>(h: &Harness<B>) -> Result<(), ServerError> {
    let x = h.buffer(S0, &ramp(1.0))?;
    let y = h.dev.alloc(S0, N * 4)?;
    let mut calls = 0;
    let err: ServerError = h
        .dev
        .capture(S0, |_| {
            calls += 1;
            let side = h.dev.fork(S0, S1)?;
            h.add(S1, &x, &y, 1.0)?;
            // Warmup joins; the recording forgets to.
            if calls == 1 {
                h.dev.join(side)?;
            }
            Ok(())
        })
        .expect_err("an unjoined branch dooms the window");
    assert!(
        matches!(
            err.root_cause(),
            ServerError::UnjoinedBranch {
                window: S0,
                branch: S1
            }
        ),
        "{err}"
    );
    h.expect_unreadable(S0, &y, "unjoined");
    let z = h.buffer(S1, &splat(1.0))?;
    h.add(S1, &z, &z, 1.0)?;
    h.expect(S1, &z, &splat(2.0));
    // The branch's stream forks again into a window that joins it, and its graph runs:
    // the doomed window left nothing of it in a capture (on CUDA its branch stream is
    // joined back before the origin's end, never left to an undocumented release).
    let w = h.dev.alloc(S0, N * 4)?;
    let g = h.dev.capture(S0, |_| {
        let side = h.dev.fork(S0, S1)?;
        h.add(S1, &x, &w, 2.0)?;
        h.dev.join(side)
    })?;
    h.dev.write(S0, &w, 0, bytes(&splat(0.0)))?;
    h.dev.replay(S0, &g, 1)?;
    h.expect(S0, &w, &ramp(3.0));
    h.dev.drop_graph(g)
}
