//! Graph updates (rules 26 and 27): a sealed graph changes only through the slots its
//! capture named, each update checked against what was recorded, all or nothing, seen
//! only by replays enqueued after it; and every rule follows a rebound buffer.

use capture_core::{
    Access, Arg, CapturePhase, Dims, KernelSignature, Param, ServerError, SlotKind, SlotMismatch,
    SlotName,
};
use capture_mock::{FaultOp, MockKernel};

use crate::{S0, S1, device, filled, kernels, read, suite_lock};

/// `y = x + k`, elementwise u32, `k` a scalar. Arguments: x, y, k.
const ADD_K: MockKernel = MockKernel {
    name: "add_k",
    signature: KernelSignature::of(&[Param::READ, Param::WRITE, Param::scalar::<u32>()]),
    f: |b, words| {
        let k = words[0] as u32;
        let (x, y) = b.split_at_mut(1);
        for (o, i) in y[0].chunks_exact_mut(4).zip(x[0].chunks_exact(4)) {
            let v = u32::from_le_bytes(i.try_into().expect("4 bytes")).wrapping_add(k);
            o.copy_from_slice(&v.to_le_bytes());
        }
    },
};

/// `y += k` in place, elementwise u32. Arguments: y (read-write), k.
const ACC_K: MockKernel = MockKernel {
    name: "acc_k",
    signature: KernelSignature::of(&[Param::READ_WRITE, Param::scalar::<u32>()]),
    f: |b, words| {
        let k = words[0] as u32;
        for c in b[0].chunks_exact_mut(4) {
            let v = u32::from_le_bytes(c.try_into().expect("4 bytes")).wrapping_add(k);
            c.copy_from_slice(&v.to_le_bytes());
        }
    },
};

fn mismatch(result: Result<(), ServerError>) -> SlotMismatch {
    match result {
        Err(ServerError::SlotRefused(r)) => r.mismatch,
        other => panic!("expected a refused slot, got {other:?}"),
    }
}

#[test]
fn rule_26_a_graph_changes_only_through_its_named_slots_each_update_checked() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let add = dev.kernel(ADD_K);
    let x = filled(&dev, S0, &[1, 2, 3, 4]);
    let x2 = filled(&dev, S0, &[10, 20, 30, 40]);
    let short = filled(&dev, S0, &[1, 2]);
    let y = dev.alloc(S0, 16).expect("alloc");
    let g = dev
        .capture(S0, |d| {
            let args = [
                Arg::read(&x).slot("x"),
                Arg::write(&y),
                Arg::scalar(1u32).slot("k"),
            ];
            d.launch(S0, &add, Dims::grid([4, 1, 1]).slot("grid"), &args, &[])
        })
        .expect("capture");
    let slots = g.slots().expect("slots");
    let kinds: Vec<(&str, SlotKind, Vec<u64>)> = slots
        .iter()
        .map(|s| (s.name.as_str(), s.kind, s.launches.clone()))
        .collect();
    assert_eq!(
        kinds,
        [
            (
                "x",
                SlotKind::Buffer {
                    len: 16,
                    access: Access::Read
                },
                vec![0]
            ),
            (
                "k",
                SlotKind::Scalar {
                    bytes: 4,
                    element: Some(capture_core::ScalarType::U32)
                },
                vec![0]
            ),
            ("grid", SlotKind::Grid { max: [4, 1, 1] }, vec![0]),
        ]
    );
    dev.replay(S0, &g, 1).expect("replay");
    assert_eq!(read(&dev, S0, &y).expect("read"), [2, 3, 4, 5]);

    g.set("k", 5u32).expect("set");
    g.rebind("x", &x2).expect("rebind");
    g.set_grid("grid", [2, 1, 1]).expect("set grid");
    dev.replay(S0, &g, 1).expect("replay");
    assert_eq!(read(&dev, S0, &y).expect("read"), [15, 25, 35, 45]);

    // Every refusal names the slot and what differs, and changes nothing.
    assert_eq!(
        mismatch(g.set("pos", 1u32)),
        SlotMismatch::Unknown {
            slots: ["x", "k", "grid"].map(SlotName::new).to_vec()
        }
    );
    assert_eq!(
        mismatch(g.set("k", 1u64)),
        SlotMismatch::ScalarSize { slot: 4, given: 8 }
    );
    assert!(matches!(
        mismatch(g.set("x", 1u32)),
        SlotMismatch::Kind {
            given: "scalar",
            ..
        }
    ));
    assert!(matches!(
        mismatch(g.rebind("k", &x)),
        SlotMismatch::Kind {
            given: "buffer",
            ..
        }
    ));
    assert_eq!(
        mismatch(g.rebind("x", &short)),
        SlotMismatch::BufferLength { slot: 16, given: 8 }
    );
    assert_eq!(
        mismatch(g.rebind_to("x", &Arg::read_write(&x))),
        SlotMismatch::Access {
            slot: Access::Read,
            given: Access::ReadWrite
        }
    );
    let (other, _) = device();
    let elsewhere = other.alloc(S0, 16).expect("alloc");
    assert_eq!(mismatch(g.rebind("x", &elsewhere)), SlotMismatch::Device);
    assert_eq!(
        mismatch(g.set_grid("grid", [5, 1, 1])),
        SlotMismatch::GridPastMax {
            max: [4, 1, 1],
            given: [5, 1, 1]
        }
    );
    assert_eq!(
        mismatch(g.set_grid("grid", [0, 1, 1])),
        SlotMismatch::GridEmpty { given: [0, 1, 1] }
    );
    let error = g.set("k", 1u64).expect_err("refused");
    assert!(
        error
            .to_string()
            .contains("slot \"k\" of graph#0: the slot is a 4-byte scalar, given 8 bytes"),
        "{error}"
    );
    assert!(matches!(
        error.subject(),
        Some(capture_core::Subject::Graph { .. })
    ));
    dev.replay(S0, &g, 1).expect("replay");
    assert_eq!(
        read(&dev, S0, &y).expect("read"),
        [15, 25, 35, 45],
        "no refused update changed anything"
    );
    // A sub-range of a larger buffer, with the slot's access.
    let big = filled(&dev, S0, &[0, 0, 0, 0, 7, 8, 9, 10]);
    g.rebind_to("x", &Arg::read(&big).range(16, 16))
        .expect("rebind a range");
    dev.replay(S0, &g, 1).expect("replay");
    assert_eq!(read(&dev, S0, &y).expect("read"), [12, 13, 14, 15]);
}

#[test]
fn rule_26_an_update_is_seen_only_by_replays_enqueued_after_it() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let acc = dev.kernel(ACC_K);
    let y = filled(&dev, S0, &[0; 4]);
    let g = dev
        .capture(S0, |d| {
            d.dispatch(
                S0,
                &acc,
                [1, 1, 1],
                &[Arg::read_write(&y), Arg::scalar(1u32).slot("k")],
            )
        })
        .expect("capture");
    // Warmup added 1. The mock runs nothing until a wait: the first replay is queued
    // with k = 1 when k becomes 10, and must still add 1.
    dev.replay(S0, &g, 1).expect("replay");
    g.set("k", 10u32).expect("set");
    dev.replay(S0, &g, 1).expect("replay");
    assert_eq!(read(&dev, S0, &y).expect("read"), [12; 4]);
}

#[test]
fn rule_26_a_refused_update_changes_nothing_on_any_launch() {
    let _suite = suite_lock();
    let (dev, world) = device();
    let acc = dev.kernel(ACC_K);
    let (a, b) = (filled(&dev, S0, &[0; 4]), filled(&dev, S0, &[0; 4]));
    let g = dev
        .capture(S0, |d| {
            d.dispatch(
                S0,
                &acc,
                [1, 1, 1],
                &[Arg::read_write(&a), Arg::scalar(1u32).slot("k")],
            )?;
            d.dispatch(
                S0,
                &acc,
                [1, 1, 1],
                &[Arg::read_write(&b), Arg::scalar(1u32).slot("k")],
            )
        })
        .expect("capture");
    assert_eq!(g.slots().expect("slots")[0].launches, [0, 1]);
    // The driver refuses the second launch's update: the first is set back.
    world.fail(FaultOp::Update, 2);
    assert!(matches!(
        g.set("k", 100u32),
        Err(ServerError::Driver { .. })
    ));
    dev.replay(S0, &g, 1).expect("replay");
    assert_eq!(read(&dev, S0, &a).expect("read"), [2; 4]);
    assert_eq!(read(&dev, S0, &b).expect("read"), [2; 4]);
    g.set("k", 100u32).expect("set");
    dev.replay(S0, &g, 1).expect("replay");
    assert_eq!(read(&dev, S0, &a).expect("read"), [102; 4]);
    assert_eq!(read(&dev, S0, &b).expect("read"), [102; 4]);
    assert!(
        dev.trace()
            .render()
            .contains("stream#0 update graph#0 slot \"k\" = [64, 00, 00, 00] (2 launches)"),
        "{}",
        dev.trace().render()
    );
}

#[test]
fn rule_26_a_slot_is_checked_as_it_is_recorded_and_a_refused_use_records_nothing() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let acc = dev.kernel(ACC_K);
    let k = kernels(&dev);
    let y = filled(&dev, S0, &[0; 4]);
    let z = filled(&dev, S0, &[0; 4]);
    let mut refusals = Vec::new();
    let g = dev
        .capture(S0, |d| {
            let use_k = |v: u32| [Arg::read_write(&y), Arg::scalar(v).slot("k")];
            d.dispatch(S0, &acc, [1, 1, 1], &use_k(1))?;
            // Checked as recorded: warmup runs what it is given.
            if d.phase() == CapturePhase::Record {
                // One slot, one value: another value is refused, the window lives on.
                refusals.push(mismatch(d.dispatch(S0, &acc, [1, 1, 1], &use_k(2))));
                // Another kind under the same name.
                refusals.push(mismatch(d.dispatch(
                    S0,
                    &acc,
                    [1, 1, 1],
                    &[Arg::read_write(&z).slot("k"), Arg::scalar(0u32)],
                )));
                // A bounded grid that is no slot, and a grid past its bound.
                let unnamed = d.launch(
                    S0,
                    &k.add_scalar,
                    Dims::grid_up_to([4, 1, 1]),
                    &[Arg::read_write(&z)],
                    &[1],
                );
                assert!(matches!(
                    unnamed,
                    Err(ServerError::InvalidArgument {
                        what: "grid bound",
                        ..
                    })
                ));
                let past = d.launch(
                    S0,
                    &k.add_scalar,
                    Dims::grid([5, 1, 1]).up_to([4, 1, 1]).slot("g"),
                    &[Arg::read_write(&z)],
                    &[1],
                );
                assert!(matches!(
                    past,
                    Err(ServerError::InvalidArgument { what: "grid", .. })
                ));
            }
            d.dispatch(S0, &acc, [1, 1, 1], &use_k(1))
        })
        .expect("the refused uses doomed nothing");
    assert!(matches!(refusals[0], SlotMismatch::Conflicting { .. }));
    assert!(matches!(
        refusals[1],
        SlotMismatch::Kind {
            given: "buffer",
            ..
        }
    ));
    assert_eq!(g.slots().expect("slots")[0].launches, [0, 1]);
    dev.replay(S0, &g, 1).expect("replay");
    // Warmup ran every launch that was not refused: y += 1 twice, then the replay's
    // two; z never changed.
    assert_eq!(read(&dev, S0, &y).expect("read"), [4; 4]);
    assert_eq!(read(&dev, S0, &z).expect("read"), [0; 4]);

    // The user's own work has no slots, in any mode.
    let work = capture_mock::MockWork::new("noop", |_| Ok(()));
    assert!(matches!(
        mismatch(dev.foreign_work(S0, &[Arg::read(&y).slot("y")], work)),
        SlotMismatch::Work
    ));
    // Outside a window a slot's name does nothing.
    dev.dispatch(
        S0,
        &acc,
        [1, 1, 1],
        &[Arg::read_write(&y), Arg::scalar(1u32).slot("k")],
    )
    .expect("eager");
    assert_eq!(read(&dev, S0, &y).expect("read"), [5; 4]);
}

#[test]
fn rule_27_every_rule_follows_a_rebound_buffer() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    let a = filled(&dev, S0, &[1; 4]);
    let y = dev.alloc(S0, 16).expect("alloc");
    let g = dev
        .capture(S0, |d| {
            d.launch(
                S0,
                &k.add_one,
                [1, 1, 1],
                &[Arg::read(&a).slot("x"), Arg::write(&y)],
                &[],
            )
        })
        .expect("capture");
    let a_id = a.id();
    // Rule 14: the new buffer is the graph's input; unwritten, the replay is refused.
    let b = dev.alloc(S0, 16).expect("alloc");
    g.rebind("x", &b).expect("rebind");
    assert!(matches!(
        dev.replay(S0, &g, 1),
        Err(ServerError::Unwritten(_))
    ));
    dev.write_values(S0, &b, 0, &[7u32; 4]).expect("write");
    dev.replay(S0, &g, 1).expect("replay");
    assert_eq!(read(&dev, S0, &y).expect("read"), [8; 4]);
    // Rules 7 and 19: the graph pins the new buffer, even with its handle gone, and
    // released the old one's pin.
    let b_id = b.id();
    drop(b);
    let trace = dev.trace().render();
    let pins = trace
        .lines()
        .rev()
        .find(|l| l.contains("graph#0 pins"))
        .expect("the rebind's pins");
    let pinned: Vec<&str> = pins.split([' ', ';']).collect();
    assert!(pinned.contains(&b_id.to_string().as_str()), "{pins}");
    assert!(!pinned.contains(&a_id.to_string().as_str()), "{pins}");
    dev.replay(S0, &g, 1).expect("replay after the handle went");
    assert_eq!(read(&dev, S0, &y).expect("read"), [8; 4]);
    // Rule 18: a buffer of another pooled stream, written there, is ordered before
    // the replay (the mock runs each stream's queue on its own).
    let c = dev.alloc(S1, 16).expect("alloc");
    dev.write_values(S1, &c, 0, &[40u32; 4]).expect("write");
    let acc = dev.kernel(ACC_K);
    dev.dispatch(
        S1,
        &acc,
        [1, 1, 1],
        &[Arg::read_write(&c), Arg::scalar(2u32)],
    )
    .expect("launch on S1");
    g.rebind("x", &c)
        .expect("rebind to another pooled stream's buffer");
    dev.replay(S0, &g, 1).expect("replay");
    assert_eq!(read(&dev, S0, &y).expect("read"), [43; 4]);
    drop(c);
    dev.replay(S0, &g, 1)
        .expect("the graph pins the other stream's buffer");
    assert_eq!(read(&dev, S0, &y).expect("read"), [43; 4]);
}
