//! The fourth pass (issue 45): every rule holds on the sealed graph and at the seams
//! between features, not only while a window records. One named regression test per
//! break; each failed on the main it was written against, and fails again with its fix
//! removed (docs/rule-guards.md names the guard).

use capture_core::{
    Access, Arg, BranchRace, Device, DeviceConfig, KernelSignature, Param, ServerError,
    SlotMismatch, StreamId,
};
use capture_mock::{Faulty, MockBackend, MockKernel};

use crate::{Dev, PANIC, S0, S1, device, device_on, filled, kernels, read, suite_lock};

const S2: StreamId = StreamId::new(2);

/// Four pooled streams, S0..S3 each on its own.
fn four() -> Dev {
    let config = DeviceConfig::new().streams(4).unwrap().trace(true);
    Device::new(Faulty::new(MockBackend::new()), config).unwrap()
}

fn race_of(result: Result<(), ServerError>) -> BranchRace {
    match result {
        Err(ServerError::SlotRefused(r)) => match r.mismatch {
            SlotMismatch::BranchRace(race) => *race,
            other => panic!("refused for another reason: {other:?}"),
        },
        other => panic!("expected a refused update, got {other:?}"),
    }
}

/// A step whose branch `S1` computes `a = x + 1` (its output a slot `"out"`, its input
/// a slot `"in"`) beside the origin's `b = x + 1`, joined, then `c = a + b` on the
/// origin.
fn forked_step(
    dev: &Dev,
    x: &capture_core::Buffer,
    a: &capture_core::Buffer,
    b: &capture_core::Buffer,
    c: &capture_core::Buffer,
) -> capture_core::GraphHandle {
    let k = kernels(dev);
    dev.capture(S0, |d| {
        let side = d.fork(S0, S1)?;
        d.launch(
            S1,
            &k.add_one,
            [1, 1, 1],
            &[Arg::read(x).slot("in"), Arg::write(a).slot("out")],
            &[],
        )?;
        d.launch(
            S0,
            &k.add_one,
            [1, 1, 1],
            &[Arg::read(x), Arg::write(b)],
            &[],
        )?;
        d.join(side)?;
        d.launch(
            S0,
            &k.add,
            [1, 1, 1],
            &[Arg::read(a), Arg::read(b), Arg::write(c)],
            &[],
        )
    })
    .expect("capture")
}

#[test]
fn i45_01_a_rebind_that_makes_two_unjoined_branches_race_is_refused_and_changes_nothing() {
    let _suite = suite_lock();
    let dev = four();
    let x = filled(&dev, S0, &[1; 4]);
    let (a, b, c) = (
        dev.alloc(S0, 16).unwrap(),
        dev.alloc(S0, 16).unwrap(),
        dev.alloc(S0, 16).unwrap(),
    );
    let g = forked_step(&dev, &x, &a, &b, &c);
    // The branch's output onto the bytes the origin writes beside it: write/write.
    let race = race_of(g.rebind("out", &b));
    assert_eq!(race.memory, b.id());
    assert_eq!((race.range.start(), race.range.end()), (0, 16));
    let sides = [&race.first, &race.second];
    assert!(
        sides
            .iter()
            .any(|s| s.stream == S1 && s.access == Access::Write)
    );
    assert!(
        sides
            .iter()
            .any(|s| s.stream == S0 && s.access == Access::Write)
    );
    assert!(
        sides.iter().all(|s| s.op.to_string().contains("add_one")),
        "{race}"
    );
    // The branch's input onto the origin's unjoined output: read/write.
    let race = race_of(g.rebind("in", &b));
    assert!(
        [&race.first, &race.second]
            .iter()
            .any(|s| s.stream == S1 && s.access == Access::Read),
        "{race}"
    );
    // A sub-range of a larger buffer the origin writes part of.
    let big = dev.alloc(S0, 64).unwrap();
    let g2 = {
        let k = kernels(&dev);
        dev.capture(S0, |d| {
            let side = d.fork(S0, S1)?;
            d.launch(
                S1,
                &k.add_one,
                [1, 1, 1],
                &[Arg::read(&x), Arg::write(&a).slot("out")],
                &[],
            )?;
            d.launch(
                S0,
                &k.add_one,
                [1, 1, 1],
                &[Arg::read(&x), Arg::write(&big).range(32, 16)],
                &[],
            )?;
            d.join(side)
        })
        .expect("capture")
    };
    let race = race_of(g2.rebind_to("out", &Arg::write(&big).range(32, 16)));
    assert_eq!((race.range.start(), race.range.end()), (32, 48));
    g2.rebind_to("out", &Arg::write(&big).range(16, 16))
        .expect("bytes the other lane does not use");
    // Nothing refused changed anything: the replay still writes a and b.
    dev.write_values(S0, &x, 0, &[5u32; 4]).unwrap();
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &a).unwrap(), [6; 4]);
    assert_eq!(read(&dev, S0, &b).unwrap(), [6; 4]);
    assert_eq!(read(&dev, S0, &c).unwrap(), [12; 4]);
    // A rebind onto bytes ordered with the branch (the origin's output after the join
    // reads it) is no race.
    let d2 = dev.alloc(S0, 16).unwrap();
    g.rebind("out", &d2).expect("no other lane touches d2");
    let trace = dev.trace().render();
    assert!(
        trace.contains("refuse update"),
        "a refused update is traced:\n{trace}"
    );
}

#[test]
fn i45_02_an_error_met_through_another_streams_wait_claims_the_failing_streams_writes() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    let panic = dev.kernel(PANIC);
    // b lives on S1, written and settled there.
    let b = filled(&dev, S1, &[7; 4]);
    dev.sync(S1).unwrap();
    let x = dev.alloc(S0, 16).unwrap();
    let y = dev.alloc(S1, 16).unwrap();
    // S0: a faulting kernel writes b, then S0 writes x.
    dev.launch(S0, &panic, [1, 1, 1], &[Arg::read_write(&b)], &[])
        .unwrap();
    dev.write_values(S0, &x, 0, &[1u32; 4]).unwrap();
    // S1 reads x: it waits for S0 on the device.
    crate::add_one(&dev, &k, S1, &x, &y).unwrap();
    let err = dev
        .sync(S1)
        .expect_err("the kernel's fault, met through the wait");
    assert!(Capture::is_driver(&err), "{err}");
    // b was written by the failed kernel's stream since its last good fence: claimed.
    let read_b = dev.read_values::<u32>(S1, &b);
    assert!(
        matches!(read_b, Err(ServerError::Unwritten(_))),
        "b's old bytes read as good: {read_b:?}"
    );
    // x too (S0 wrote it after the fault), and S1's own output.
    assert!(dev.read_values::<u32>(S0, &x).is_err());
    assert!(dev.read_values::<u32>(S1, &y).is_err());
    // Both streams stay usable.
    dev.write_values(S0, &x, 0, &[2u32; 4]).unwrap();
    crate::add_one(&dev, &k, S1, &x, &y).unwrap();
    assert_eq!(read(&dev, S1, &y).unwrap(), [3; 4]);
}

struct Capture;
impl Capture {
    fn is_driver(e: &ServerError) -> bool {
        matches!(e.root_cause(), ServerError::Driver { .. })
    }
}

/// `y[i] = x[i] + pos`, elementwise u32, `pos` a `u32` scalar. Arguments: x, y, pos.
const ADD_POS: MockKernel = MockKernel {
    name: "add_pos",
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

#[test]
fn i45_03_a_scalar_of_the_right_size_and_the_wrong_type_is_refused_at_launch_and_at_set() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let add = dev.kernel(ADD_POS);
    let x = filled(&dev, S0, &[1; 4]);
    let y = dev.alloc(S0, 16).unwrap();
    let err = dev
        .launch(
            S0,
            &add,
            [1, 1, 1],
            &[Arg::read(&x), Arg::write(&y), Arg::scalar(0.0f32)],
            &[],
        )
        .expect_err("an f32 where a u32 goes");
    assert!(
        matches!(
            &err,
            ServerError::InvalidArgument {
                what: "scalar type",
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("f32") && err.to_string().contains("u32"),
        "{err}"
    );
    let g = dev
        .capture(S0, |d| {
            d.launch(
                S0,
                &add,
                [1, 1, 1],
                &[Arg::read(&x), Arg::write(&y), Arg::scalar(1u32).slot("pos")],
                &[],
            )
        })
        .unwrap();
    for refused in [g.set("pos", -1i32), g.set("pos", 2.0f32)] {
        match refused {
            Err(ServerError::SlotRefused(r)) => assert!(
                matches!(r.mismatch, SlotMismatch::ScalarType { .. }),
                "{:?}",
                r.mismatch
            ),
            other => panic!("accepted a scalar of another type: {other:?}"),
        }
    }
    g.set("pos", 3u32).unwrap();
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &y).unwrap(), [4; 4]);
}

#[test]
fn i45_04_the_same_memory_imported_twice_is_refused_naming_the_first_import() {
    let _suite = suite_lock();
    let mock = MockBackend::new();
    let (dev, _) = device_on(mock.clone());
    let memory = mock.external_memory(64);
    let first = dev.import(S0, memory.external()).unwrap();
    for again in [
        dev.import(S1, memory.external()),
        dev.import(S0, memory.external_range(16, 16)),
    ] {
        let err = again.expect_err("a second live import of the same bytes");
        assert!(
            err.subject().and_then(|s| s.memory()) == Some(first.id()),
            "names the first import: {err}"
        );
    }
    // Bytes of the memory the first import does not cover are another matter only
    // once the first is gone: dropped and cleaned up, the memory imports again.
    drop(first);
    dev.cleanup().unwrap();
    let again = dev.import(S1, memory.external_range(16, 16)).unwrap();
    dev.assume_written(S1, &again).unwrap();
    assert_eq!(dev.read(S1, &again).unwrap().len(), 16);
}

#[test]
fn i45_05_one_buffer_passed_twice_is_one_read_write_access_and_two_writes_are_refused() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    // In place: `t = t + u` reads and writes t in one launch, for every rule.
    let t = dev.alloc(S0, 16).unwrap();
    let u = filled(&dev, S0, &[2; 4]);
    let err = dev
        .launch(
            S0,
            &k.add,
            [1, 1, 1],
            &[Arg::read(&t), Arg::read(&u), Arg::write(&t)],
            &[],
        )
        .expect_err("t is read before anything wrote it");
    assert!(matches!(err, ServerError::Unwritten(_)), "{err}");
    dev.write_values(S0, &t, 0, &[1u32; 4]).unwrap();
    dev.launch(
        S0,
        &k.add,
        [1, 1, 1],
        &[Arg::read(&t), Arg::read(&u), Arg::write(&t)],
        &[],
    )
    .unwrap();
    assert_eq!(read(&dev, S0, &t).unwrap(), [3; 4]);
    // Another stream reading t after it waits for the in-place write.
    let v = dev.alloc(S1, 16).unwrap();
    crate::add_one(&dev, &k, S1, &t, &v).unwrap();
    assert_eq!(read(&dev, S1, &v).unwrap(), [4; 4]);
    // Two arguments writing overlapping bytes: the device runs them in no order.
    let err = dev
        .launch(
            S0,
            &k.add,
            [1, 1, 1],
            &[Arg::read(&u), Arg::write(&t).range(0, 16), Arg::write(&t)],
            &[],
        )
        .expect_err("two writes of the same bytes");
    assert!(
        matches!(
            &err,
            ServerError::InvalidArgument {
                what: "aliased arguments",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(read(&dev, S0, &t).unwrap(), [3; 4], "nothing ran");
    let _ = S2;
}

#[test]
fn i45_05_a_rebind_that_makes_one_launch_write_common_bytes_twice_is_refused() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    let u = filled(&dev, S0, &[2; 4]);
    let (t, w) = (dev.alloc(S0, 16).unwrap(), dev.alloc(S0, 16).unwrap());
    let g = dev
        .capture(S0, |d| {
            d.launch(
                S0,
                &k.add,
                [1, 1, 1],
                &[Arg::read(&u), Arg::write(&t).slot("t"), Arg::write(&w)],
                &[],
            )
        })
        .unwrap();
    match g.rebind("t", &w) {
        Err(ServerError::SlotRefused(r)) => match r.mismatch {
            SlotMismatch::Aliased { args, memory, .. } => {
                assert_eq!((args, memory), ([1, 2], w.id()));
            }
            other => panic!("refused for another reason: {other:?}"),
        },
        other => panic!("a rebind onto the launch's other output was accepted: {other:?}"),
    }
    // Onto the launch's input: in place, one read-write access.
    g.rebind("t", &u)
        .expect("a read beside a write is in place");
}

#[test]
fn i45_02_failing_work_met_through_a_captures_begin_claims_its_outputs() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    let panic = dev.kernel(PANIC);
    let b = filled(&dev, S1, &[7; 4]);
    dev.sync(S1).unwrap();
    let x = filled(&dev, S0, &[1; 4]);
    // S0's kernel faults writing b; S1's capture reads x, which S0 wrote: `begin`
    // settles the window's inputs from other streams, and meets the fault there.
    dev.launch(S0, &panic, [1, 1, 1], &[Arg::read_write(&b)], &[])
        .unwrap();
    dev.write_values(S0, &x, 0, &[3u32; 4]).unwrap();
    let y = dev.alloc(S1, 16).unwrap();
    let result = dev.capture(S1, |d| crate::add_one(d, &k, S1, &x, &y));
    if let Ok(graph) = &result {
        dev.replay(S1, graph, 1).ok();
    }
    let _ = dev.sync(S1);
    assert!(
        matches!(
            dev.read_values::<u32>(S1, &b),
            Err(ServerError::Unwritten(_))
        ),
        "b's old bytes read as good"
    );
}

#[test]
fn i45_09_slot_handles_set_several_slots_at_once_all_or_nothing_and_check_them_together() {
    let _suite = suite_lock();
    let dev = four();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1; 4]);
    let (a, b, c) = (
        dev.alloc(S0, 16).unwrap(),
        dev.alloc(S0, 16).unwrap(),
        dev.alloc(S0, 16).unwrap(),
    );
    let g = dev
        .capture(S0, |d| {
            let side = d.fork(S0, S1)?;
            d.launch(
                S1,
                &k.add_one,
                [1, 1, 1],
                &[Arg::read(&x), Arg::write(&a).slot("a")],
                &[],
            )?;
            d.launch(
                S0,
                &k.add_one,
                [1, 1, 1],
                &[Arg::read(&x), Arg::write(&b).slot("b")],
                &[],
            )?;
            d.join(side)
        })
        .unwrap();
    let (slot_a, slot_b) = (g.buffer_slot("a").unwrap(), g.buffer_slot("b").unwrap());
    // Either rebind onto c alone is no race; both at once make the two lanes write c.
    let race = match g.update([slot_a.to(&c), slot_b.to(&c)]) {
        Err(ServerError::SlotRefused(r)) => match r.mismatch {
            SlotMismatch::BranchRace(race) => race,
            other => panic!("refused for another reason: {other:?}"),
        },
        other => panic!("two rebinds racing together were accepted: {other:?}"),
    };
    assert_eq!(race.memory, c.id());
    // Nothing changed: a and b are still the graph's outputs.
    dev.write_values(S0, &x, 0, &[4u32; 4]).unwrap();
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &a).unwrap(), [5; 4]);
    assert_eq!(read(&dev, S0, &b).unwrap(), [5; 4]);
    // A slot named twice is refused; a handle's type is checked when it is taken.
    assert!(g.update([slot_a.to(&c), slot_a.to(&b)]).is_err());
    assert!(g.slot::<u32>("a").is_err(), "a buffer slot is no scalar");
    // Each alone is accepted, and a later replay writes c.
    g.update([slot_a.to(&c)]).unwrap();
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &c).unwrap(), [5; 4]);
}
