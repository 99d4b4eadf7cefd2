//! Rules 28 and 29: a window forks branches onto other pooled streams and joins them;
//! an unjoined branch dooms it, a branch belongs to it from fork to end, and two
//! unjoined branches that race are refused when the second is recorded. Each test fails
//! with its guard (named in docs/rule-guards.md) removed.

use capture_core::{
    Arg, BranchReason, BranchRefused, Chain, Device, DeviceConfig, ServerError, StreamId,
};
use capture_mock::{FaultOp, Faulty, MockBackend};

use crate::{Dev, S0, S1, add_one, filled, kernels, read};

/// Pooled streams 0..4: S0..S3 each on its own, S4 beside S0, S5 beside S1.
const S3: StreamId = StreamId::new(3);
const S5: StreamId = StreamId::new(5);
const S2: StreamId = StreamId::new(2);
const S4: StreamId = StreamId::new(4);

fn four() -> Dev {
    let config = DeviceConfig::new().streams(4).unwrap().trace(true);
    Device::new(Faulty::new(MockBackend::new()), config).unwrap()
}

/// Prepares `S0`'s window, loads both kernels in its warmup, and opens it.
fn open(dev: &Dev, k: &crate::Kernels) {
    dev.prepare(S0).unwrap();
    let (t, u) = (dev.alloc(S0, 16).unwrap(), dev.alloc(S0, 16).unwrap());
    dev.write_values(S0, &t, 0, &[0u32; 4]).unwrap();
    add_one(dev, k, S0, &t, &u).unwrap();
    dev.launch(
        S0,
        &k.add,
        [1, 1, 1],
        &[Arg::read(&t), Arg::read(&u), Arg::write(&t)],
        &[],
    )
    .unwrap();
    dev.begin(S0).unwrap();
}

fn text(e: &ServerError) -> String {
    Chain(e).to_string()
}

fn is_graph_state(e: &ServerError) -> bool {
    matches!(e, ServerError::GraphState { .. })
}

fn refused(e: &ServerError) -> &BranchRefused {
    match e.root_cause() {
        ServerError::BranchRefused(r) => r,
        other => panic!("not a refused branch: {other}"),
    }
}

#[test]
fn rule_28_a_forked_branch_records_into_the_window_and_replays_in_its_order() {
    let _suite = crate::suite_lock();
    let dev = four();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1; 16]);
    let (a, b, c) = (
        dev.alloc(S0, 64).unwrap(),
        dev.alloc(S0, 64).unwrap(),
        dev.alloc(S0, 64).unwrap(),
    );
    let graph = dev
        .capture(S0, |d| {
            let side = d.fork(S0, S1)?;
            add_one(d, &k, S1, &x, &a)?; // a = x + 1 on the branch
            add_one(d, &k, S0, &x, &b)?; // b = x + 1 beside it
            d.join(side)?;
            // After the join the origin reads what the branch wrote.
            d.launch(
                S0,
                &k.add,
                [1, 1, 1],
                &[Arg::read(&a), Arg::read(&b), Arg::write(&c)],
                &[],
            )
        })
        .unwrap();
    // Warmup ran the branch eagerly, in program order.
    assert_eq!(read(&dev, S0, &c).unwrap(), vec![4; 16]);
    dev.write_values(S0, &x, 0, &[10u32; 16]).unwrap();
    dev.replay(S0, &graph, 1).unwrap();
    assert_eq!(read(&dev, S0, &a).unwrap(), vec![11; 16]);
    assert_eq!(read(&dev, S0, &c).unwrap(), vec![22; 16]);
    // One graph over the whole window: the branch's buffers are its pins too.
    let ledger = dev.graph(&graph).unwrap();
    assert_eq!(ledger.launches, 3);
    // The branch is back on its own pooled stream, usable as any other.
    let y = dev.alloc(S1, 64).unwrap();
    add_one(&dev, &k, S1, &x, &y).unwrap();
    assert_eq!(read(&dev, S1, &y).unwrap(), vec![11; 16]);
    let trace = dev.trace().render();
    assert!(
        trace.contains("stream#0 fork stream#1 -> lane#1"),
        "{trace}"
    );
    assert!(trace.contains("stream#0 join stream#1 (lane#1)"), "{trace}");
}

#[test]
fn rule_28_an_unjoined_branch_dooms_the_window_naming_it() {
    let _suite = crate::suite_lock();
    let dev = four();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1; 16]);
    let (a, b) = (dev.alloc(S0, 64).unwrap(), dev.alloc(S0, 64).unwrap());
    // Warmup's branch unjoined: `begin` refuses the window, which unwinds.
    let err = dev
        .capture(S0, |d| {
            let _forgotten = d.fork(S0, S1)?;
            add_one(d, &k, S1, &x, &a)
        })
        .unwrap_err();
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
    assert!(text(&err).contains("stream#1 unjoined"), "{err}");
    // By hand: `begin` itself refuses, and the prepared window is gone.
    dev.prepare(S0).unwrap();
    let _forgotten = dev.fork(S0, S1).unwrap();
    let err = dev.begin(S0).unwrap_err();
    assert!(
        matches!(err, ServerError::UnjoinedBranch { branch: S1, .. }),
        "{err}"
    );
    assert!(dev.captures().recording().is_empty());
    assert!(is_graph_state(&dev.end(S0).unwrap_err()), "nothing is open");
    // Joined in warmup, forgotten in the recording: the window is doomed at its end.
    dev.prepare(S0).unwrap();
    let side = dev.fork(S0, S1).unwrap();
    add_one(&dev, &k, S1, &x, &b).unwrap();
    dev.join(side).unwrap();
    dev.begin(S0).unwrap();
    let side = dev.fork(S0, S1).unwrap();
    add_one(&dev, &k, S1, &x, &b).unwrap();
    let err = dev.end(S0).unwrap_err();
    let pm = err.post_mortem().expect("a post-mortem");
    assert_eq!(pm.op, capture_core::Op::Call("end"));
    assert!(
        matches!(pm.cause, ServerError::UnjoinedBranch { branch: S1, .. }),
        "{err}"
    );
    // No graph, and what the branch would have written is claimed.
    assert!(dev.memory_report().graphs.is_empty());
    assert!(
        read(&dev, S0, &b).is_err(),
        "the branch's output is claimed"
    );
    // The token of the ended window is stale; both streams are usable.
    assert_eq!(
        refused(&dev.join(side).unwrap_err()).reason,
        BranchReason::Stale
    );
    let g = dev
        .capture(S0, |d| {
            let side = d.fork(S0, S1)?;
            add_one(d, &k, S1, &x, &b)?;
            d.join(side)
        })
        .unwrap();
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &b).unwrap(), vec![2; 16]);
}

#[test]
fn rule_28_a_branch_belongs_to_the_window_until_it_ends() {
    let _suite = crate::suite_lock();
    let dev = four();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1; 16]);
    let a = dev.alloc(S0, 64).unwrap();
    let elsewhere = dev.alloc(S3, 64).unwrap();
    open(&dev, &k);
    let side = dev.fork(S0, S1).unwrap();
    // S5 shares the branch's pooled stream: a neighbour, refused naming the window.
    let err = add_one(&dev, &k, S5, &x, &a).unwrap_err();
    assert!(
        matches!(
            err,
            ServerError::NeighbourRefused {
                neighbour: S5,
                owner: S0,
                ..
            }
        ),
        "{err}"
    );
    // The window's lifecycle is its origin's.
    for err in [
        dev.prepare(S1).unwrap_err(),
        dev.begin(S1).unwrap_err(),
        dev.end(S1).unwrap_err(),
        dev.abort(S1).unwrap_err(),
    ] {
        assert!(
            matches!(refused(&err).reason, BranchReason::Lifecycle { origin: S0 }),
            "{err}"
        );
    }
    // A host wait on a branch is one on the recording window.
    assert!(matches!(
        dev.sync(S1).unwrap_err(),
        ServerError::GraphState { .. }
    ));
    assert!(read(&dev, S1, &a).is_err());
    // A buffer of another pooled stream cannot be written from inside the window.
    let err = dev
        .write_values(S1, &elsewhere, 0, &[1u32; 16])
        .unwrap_err();
    assert!(is_graph_state(&err), "{err}");
    // A second `begin` is out of order (rule 1) and changes nothing, branch or not.
    assert!(is_graph_state(&dev.begin(S0).unwrap_err()));
    assert_eq!(dev.captures().recording(), vec![S0]);
    // None of that doomed the window, and it is not yet joined.
    add_one(&dev, &k, S1, &x, &a).unwrap();
    dev.join(side).unwrap();
    // Joined, it still belongs to the window: its work is refused, not run outside.
    let err = add_one(&dev, &k, S1, &x, &a).unwrap_err();
    assert_eq!(refused(&err).reason, BranchReason::Joined, "{err}");
    let g = dev.end(S0).unwrap();
    // The window ended: the branch and its neighbour are free.
    let y = dev.alloc(S5, 64).unwrap();
    add_one(&dev, &k, S5, &x, &y).unwrap();
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &a).unwrap(), vec![2; 16]);
    assert_eq!(read(&dev, S5, &y).unwrap(), vec![2; 16]);
    // An allocation on a branch is one in the window (rule 6): a pool that would grow
    // refuses it and the window is doomed.
    open(&dev, &k);
    let side = dev.fork(S0, S1).unwrap();
    let err = dev.alloc(S1, 64 << 20).unwrap_err();
    let pm = err.post_mortem().expect("doomed");
    assert_eq!(pm.stream, S1);
    assert!(
        matches!(pm.cause, ServerError::AllocInWindow { .. }),
        "{err}"
    );
    dev.join(side).unwrap();
    assert!(dev.end(S0).is_err());
}

#[test]
fn rule_28_a_fork_of_a_stream_that_cannot_be_a_branch_is_refused_and_changes_nothing() {
    let _suite = crate::suite_lock();
    let dev = four();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1; 16]);
    let a = dev.alloc(S0, 64).unwrap();
    // S2 records a window of its own.
    dev.prepare(S2).unwrap();
    dev.prepare(S0).unwrap();
    let reason = |parent, branch| {
        refused(&dev.fork(parent, branch).unwrap_err())
            .reason
            .clone()
    };
    assert_eq!(
        reason(S0, S4),
        BranchReason::SamePooledStream { origin: S0 }
    );
    assert_eq!(reason(S0, S2), BranchReason::HasWindow { owner: S2 });
    assert_eq!(
        reason(S0, S0),
        BranchReason::SamePooledStream { origin: S0 }
    );
    let side = dev.fork(S0, S1).unwrap();
    assert_eq!(reason(S0, S1), BranchReason::AlreadyBranch { origin: S0 });
    // Another window may not take it, nor a neighbour of it.
    assert_eq!(reason(S2, S1), BranchReason::Lent { origin: S0 });
    assert_eq!(reason(S2, S5), BranchReason::Lent { origin: S0 });
    // A parent outside the window.
    assert_eq!(
        reason(S3, S1),
        BranchReason::Lent { origin: S0 },
        "a branch of one window is no branch of a fork outside it"
    );
    add_one(&dev, &k, S1, &x, &a).unwrap();
    dev.join(side).unwrap();
    dev.abort(S2).unwrap();
    // Nothing the refusals did stays: the window records and seals.
    dev.begin(S0).unwrap();
    let side = dev.fork(S0, S1).unwrap();
    add_one(&dev, &k, S1, &x, &a).unwrap();
    dev.join(side).unwrap();
    let g = dev.end(S0).unwrap();
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &a).unwrap(), vec![2; 16]);
    // Without a fork, work on another stream inside a closure is refused (rule 22).
    let err = dev.capture(S0, |d| add_one(d, &k, S1, &x, &a)).unwrap_err();
    assert!(
        matches!(err.root_cause(), ServerError::OtherStreamInCapture { .. }),
        "{err}"
    );
    // Outside any window a fork only checks the streams, and the join orders nothing.
    dev.join(dev.fork(S0, S1).unwrap()).unwrap();
    assert_eq!(
        refused(&dev.fork(S0, S4).unwrap_err()).reason,
        BranchReason::SamePooledStream { origin: S0 }
    );
}

#[test]
fn rule_28_a_failure_in_a_branch_dooms_the_whole_window() {
    let _suite = crate::suite_lock();
    let (dev, world) = crate::device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1; 16]);
    let (a, b) = (dev.alloc(S0, 64).unwrap(), dev.alloc(S0, 64).unwrap());
    open(&dev, &k);
    let side = dev.fork(S0, S1).unwrap();
    add_one(&dev, &k, S0, &x, &b).unwrap();
    world.fail(FaultOp::Launch, 1);
    let err = add_one(&dev, &k, S1, &x, &a).unwrap_err();
    let pm = err.post_mortem().expect("doomed");
    assert_eq!((pm.owner, pm.stream), (S0, S1));
    dev.join(side).unwrap();
    let err = dev.end(S0).unwrap_err();
    assert!(err.post_mortem().is_some(), "{err}");
    // Every branch's outputs are claimed with the window's failure.
    assert!(read(&dev, S0, &a).is_err());
    assert!(read(&dev, S0, &b).is_err());
    // A driver that refuses the fork itself dooms the window too.
    open(&dev, &k);
    world.fail(FaultOp::Lane, 1);
    let err = dev.fork(S0, S1).unwrap_err();
    assert!(err.post_mortem().is_some(), "{err}");
    assert!(dev.end(S0).is_err());
}

#[test]
fn rule_29_a_race_between_unjoined_branches_is_refused_naming_both_and_dooms_the_window() {
    let _suite = crate::suite_lock();
    let dev = four();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1; 16]);
    let (a, b) = (dev.alloc(S0, 64).unwrap(), dev.alloc(S0, 64).unwrap());
    dev.label(&a, "expert out").unwrap();
    open(&dev, &k);
    let side = dev.fork(S0, S1).unwrap();
    add_one(&dev, &k, S1, &x, &a).unwrap();
    // The origin reads a's bytes before the join: unordered with the branch's write.
    let err = add_one(&dev, &k, S0, &a, &b).unwrap_err();
    let ServerError::BranchRace(race) = err.root_cause() else {
        panic!("not a race: {err}");
    };
    assert_eq!(race.window, S0);
    assert_eq!((race.first.stream, race.second.stream), (S1, S0));
    assert_eq!(race.first.op.name(), Some("add_one"));
    assert_eq!(race.first.op.kernel(), Some(k.add_one.id()));
    assert_eq!(race.memory, a.id());
    assert_eq!(race.label.as_deref(), Some("expert out"));
    assert_eq!((race.range.start(), race.range.end()), (0, 64));
    assert!(text(&err).contains("\"expert out\""), "{err}");
    dev.join(side).unwrap();
    assert!(dev.end(S0).unwrap_err().post_mortem().is_some());
}

#[test]
fn rule_29_siblings_race_unless_joined_and_a_nested_branch_sees_its_parents_past() {
    let _suite = crate::suite_lock();
    let dev = four();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1; 16]);
    let bufs: Vec<_> = (0..4).map(|_| dev.alloc(S0, 64).unwrap()).collect();
    let (a, b, c, d4) = (&bufs[0], &bufs[1], &bufs[2], &bufs[3]);
    // Two siblings writing the same bytes race; reading the same bytes does not.
    open(&dev, &k);
    let (s1, s2) = (dev.fork(S0, S1).unwrap(), dev.fork(S0, S2).unwrap());
    add_one(&dev, &k, S1, &x, a).unwrap();
    add_one(&dev, &k, S2, &x, b).unwrap();
    let err = add_one(&dev, &k, S2, &x, a).unwrap_err();
    assert!(
        matches!(err.root_cause(), ServerError::BranchRace(_)),
        "{err}"
    );
    dev.join(s1).unwrap();
    dev.join(s2).unwrap();
    assert!(dev.end(S0).is_err());
    // Nested: S2 forked off S1 after S1 wrote a reads it; S1 reads what S2 wrote once
    // S2 joined into it; the origin reads everything after S1's join. Joins in any
    // order the parents allow.
    let graph = dev
        .capture(S0, |d| {
            let s1 = d.fork(S0, S1)?;
            add_one(d, &k, S1, &x, a)?; // a = 2
            let s2 = d.fork(S1, S2)?;
            add_one(d, &k, S2, a, b)?; // b = 3
            let s3 = d.fork(S0, S3)?;
            add_one(d, &k, S3, &x, d4)?; // d = 2, beside both
            d.join(s2)?;
            add_one(d, &k, S1, b, c)?; // c = 4
            d.join(s1)?;
            d.launch(
                S0,
                &k.add,
                [1, 1, 1],
                &[Arg::read(c), Arg::read(b), Arg::write(a)],
                &[],
            )?; // a = 7
            d.join(s3)
        })
        .unwrap();
    dev.write_values(S0, &x, 0, &[5u32; 16]).unwrap();
    dev.replay(S0, &graph, 1).unwrap();
    assert_eq!(read(&dev, S0, b).unwrap(), vec![7; 16]);
    assert_eq!(read(&dev, S0, c).unwrap(), vec![8; 16]);
    assert_eq!(read(&dev, S0, a).unwrap(), vec![15; 16]);
    assert_eq!(read(&dev, S0, d4).unwrap(), vec![6; 16]);
    // A branch whose parent was joined first can never be joined: refused, doomed.
    open(&dev, &k);
    let s1 = dev.fork(S0, S1).unwrap();
    let s2 = dev.fork(S1, S2).unwrap();
    dev.join(s1).unwrap();
    let err = dev.join(s2).unwrap_err();
    assert!(
        matches!(refused(&err).reason, BranchReason::ParentJoined),
        "{err}"
    );
    assert!(err.post_mortem().is_some());
    assert!(dev.end(S0).is_err());
}
