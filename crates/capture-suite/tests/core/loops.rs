//! Rule 30 (issue 46): a loop replay runs the graph up to `max` times on the device and
//! stops after the iteration in which its stop flag was set. One named test per part of
//! the rule; docs/rule-guards.md names the guard each fails without.

use capture_core::{
    Arg, Device, DeviceConfig, DeviceLoops, GraphHandle, KernelSignature, LoopMismatch, Op, Param,
    ServerError, StreamId,
};
use capture_mock::{Faulty, MockBackend, MockKernel, MockWork};

use crate::{Dev, S0, S1, device, filled, read, suite_lock};

fn word(b: &[u8]) -> u32 {
    u32::from_le_bytes(b[..4].try_into().expect("4 bytes"))
}

/// `x[0] += k; done = 1 if x[0] >= limit` (left as it was otherwise, as a sampler sets
/// its end flag). Arguments: x (read-write), done (write), k, limit.
const COUNT: MockKernel = MockKernel {
    name: "count",
    signature: KernelSignature::of(&[
        Param::READ_WRITE,
        Param::WRITE,
        Param::scalar::<u32>(),
        Param::scalar::<u32>(),
    ]),
    f: |b, words| {
        let x = word(&b[0]).wrapping_add(words[0] as u32);
        b[0][..4].copy_from_slice(&x.to_le_bytes());
        if x >= words[1] as u32 {
            b[1][..4].copy_from_slice(&1u32.to_le_bytes());
        }
    },
};

/// Faults when `x[0] == at`. Arguments: x (read), at.
const FAULT_AT: MockKernel = MockKernel {
    name: "fault_at",
    signature: KernelSignature::of(&[Param::READ, Param::scalar::<u32>()]),
    f: |b, words| {
        if word(&b[0]) == words[0] as u32 {
            std::panic::resume_unwind(Box::new("a kernel that faults mid-loop"));
        }
    },
};

fn refusal(result: Result<(), ServerError>) -> LoopMismatch {
    match result {
        Err(ServerError::LoopRefused(r)) => r.mismatch,
        other => panic!("expected a loop refusal, got {other:?}"),
    }
}

/// The counting step over `x` and `done`, `limit` a slot, captured on `S0`: warmup
/// runs it once.
fn counting(dev: &Dev, x: &capture_core::Buffer, done: &capture_core::Buffer) -> GraphHandle {
    let count = dev.kernel(COUNT);
    dev.capture(S0, |d| {
        d.launch(
            S0,
            &count,
            [1, 1, 1],
            &[
                Arg::read_write(x),
                Arg::write(done).stop_flag(),
                Arg::scalar(1u32),
                Arg::scalar(5u32).slot("limit"),
            ],
            &[],
        )
    })
    .expect("capture")
}

#[test]
fn rule_30_a_loop_stops_after_the_iteration_that_set_its_flag() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let (x, done) = (filled(&dev, S0, &[0]), dev.alloc(S0, 4).unwrap());
    let graph = counting(&dev, &x, &done); // warmup: x = 1
    let counter = dev.replay_until(S0, &graph, 100).unwrap();
    // x: 2, 3, 4, 5 — the fourth iteration set the flag, and none ran after it.
    assert_eq!(read(&dev, S0, &counter).unwrap(), [4]);
    assert_eq!(read(&dev, S0, &x).unwrap(), [5]);
    assert_eq!(read(&dev, S0, &done).unwrap(), [1]);
    // The flag is zeroed as each loop starts: the next one runs one iteration (x = 6).
    let again = dev.replay_until(S0, &graph, 100).unwrap();
    assert_eq!(again.id(), counter.id(), "one counter per graph");
    assert_eq!(read(&dev, S0, &counter).unwrap(), [1]);
    assert_eq!(read(&dev, S0, &x).unwrap(), [6]);
    // `max` bounds it: the flag never set, every iteration ran.
    dev.write_values(S0, &x, 0, &[0u32]).unwrap();
    dev.replay_until(S0, &graph, 3).unwrap();
    assert_eq!(read(&dev, S0, &counter).unwrap(), [3]);
    assert_eq!(read(&dev, S0, &x).unwrap(), [3]);
    assert_eq!(read(&dev, S0, &done).unwrap(), [0]);
    // A plain replay of the same graph stays a plain replay.
    dev.replay(S0, &graph, 1).unwrap();
    assert_eq!(read(&dev, S0, &x).unwrap(), [4]);
    let trace = dev.trace().render();
    assert!(trace.contains("loop graph#0 up to x100"), "{trace}");
}

#[test]
fn rule_30_a_stop_flag_is_one_written_u32_named_once_and_a_refused_one_changes_nothing() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let count = dev.kernel(COUNT);
    let x = filled(&dev, S0, &[0]);
    let (done, other, wide) = (
        dev.alloc(S0, 4).unwrap(),
        dev.alloc(S0, 4).unwrap(),
        dev.alloc(S0, 8).unwrap(),
    );
    let launch = |d: &Dev, flag: Arg| {
        d.launch(
            S0,
            &count,
            [1, 1, 1],
            &[
                Arg::read_write(&x),
                flag,
                Arg::scalar(1u32),
                Arg::scalar(5u32),
            ],
            &[],
        )
    };
    let mut seen = Vec::new();
    let graph = dev
        .capture(S0, |d| {
            if d.phase() == capture_core::CapturePhase::Record {
                seen.push(refusal(launch(d, Arg::write(&wide).stop_flag())));
                seen.push(refusal(launch(
                    d,
                    Arg::write(&done).slot("flag").stop_flag(),
                )));
                let work = MockWork::new("setter", |_| Ok(()));
                seen.push(refusal(d.foreign_work(
                    S0,
                    &[Arg::write(&done).stop_flag()],
                    work,
                )));
            }
            launch(d, Arg::write(&done).stop_flag())?;
            if d.phase() == capture_core::CapturePhase::Record {
                seen.push(refusal(launch(d, Arg::write(&other).stop_flag())));
                // The same flag again is the same flag.
                launch(d, Arg::write(&done).stop_flag())?;
            }
            Ok::<(), ServerError>(())
        })
        .expect("refusals changed nothing: the window seals");
    assert!(
        matches!(seen[0], LoopMismatch::Size { bytes: 8 }),
        "{seen:?}"
    );
    assert!(matches!(seen[1], LoopMismatch::Slotted), "{seen:?}");
    assert!(matches!(seen[2], LoopMismatch::Work), "{seen:?}");
    assert!(
        matches!(seen[3], LoopMismatch::Second { memory, .. } if memory == done.id()),
        "{seen:?}"
    );
    assert_eq!(dev.graph(&graph).unwrap().launches, 2);
    // A buffer only read is no flag, in a window or out (nothing is refused outside a
    // window: the name does nothing there, as a slot's).
    let read_only = dev.capture(S0, |d| {
        d.launch(
            S0,
            &dev.kernel(FAULT_AT),
            [1, 1, 1],
            &[Arg::read(&x).stop_flag(), Arg::scalar(u32::MAX)],
            &[],
        )
    });
    assert!(
        matches!(&read_only, Err(ServerError::LoopRefused(r)) if r.mismatch == LoopMismatch::NotWritten),
        "{read_only:?}"
    );
    dev.write_values(S0, &x, 0, &[0u32]).unwrap();
    let counter = dev.replay_until(S0, &graph, 10).unwrap();
    // Two launches an iteration: x 2, 4, 6.
    assert_eq!(read(&dev, S0, &counter).unwrap(), [3]);
    assert_eq!(read(&dev, S0, &x).unwrap(), [6]);
}

#[test]
fn rule_30_what_the_device_cannot_put_in_a_loop_body_is_refused_when_recorded_in_either_order() {
    let _suite = suite_lock();
    let mock = MockBackend::with_loops(DeviceLoops::Supported {
        copies: Some("no copy is predicated"),
        work: Some("the user's commands are not predicated"),
    });
    let dev: Dev = Device::new(
        Faulty::new(mock),
        DeviceConfig::new().streams(2).unwrap().trace(true),
    )
    .unwrap();
    let count = dev.kernel(COUNT);
    let x = filled(&dev, S0, &[0]);
    let done = dev.alloc(S0, 4).unwrap();
    let step = |d: &Dev| {
        d.launch(
            S0,
            &count,
            [1, 1, 1],
            &[
                Arg::read_write(&x),
                Arg::write(&done).stop_flag(),
                Arg::scalar(1u32),
                Arg::scalar(5u32),
            ],
            &[],
        )
    };
    // The flag first: the copy, then the work, is refused, naming itself.
    let mut seen = Vec::new();
    dev.capture(S0, |d| {
        step(d)?;
        if d.phase() == capture_core::CapturePhase::Record {
            seen.push(refusal(d.write_values(S0, &x, 0, &[0u32])));
            let work = MockWork::new("own", |_| Ok(()));
            seen.push(refusal(d.foreign_work(S0, &[Arg::read(&x)], work)));
        }
        Ok::<(), ServerError>(())
    })
    .expect("the refusals changed nothing");
    assert!(
        matches!(&seen[0], LoopMismatch::Body { op: Op::Call("write"), reason } if reason.contains("copy")),
        "{seen:?}"
    );
    assert!(
        matches!(&seen[1], LoopMismatch::Body { op: Op::Work { name, .. }, .. } if name == "own"),
        "{seen:?}"
    );
    // The copy first: the launch naming the flag is refused, naming the copy.
    let mut later = None;
    let graph = dev
        .capture(S0, |d| {
            d.write_values(S0, &x, 0, &[0u32])?;
            if d.phase() == capture_core::CapturePhase::Record {
                later = Some(refusal(step(d)));
            }
            Ok::<(), ServerError>(())
        })
        .expect("without a flag the copy is a graph's as ever");
    assert!(
        matches!(
            &later,
            Some(LoopMismatch::Body {
                op: Op::Call("write"),
                ..
            })
        ),
        "{later:?}"
    );
    assert!(matches!(
        dev.replay_until(S0, &graph, 4),
        Err(ServerError::LoopRefused(r)) if r.mismatch == LoopMismatch::NoFlag
    ));
    dev.replay(S0, &graph, 1).unwrap();

    // A device that runs no loop refuses the flag when recorded, and the loop.
    let none: Dev = Device::new(
        Faulty::new(MockBackend::with_loops(DeviceLoops::Unsupported(
            "a device without loops",
        ))),
        DeviceConfig::new().streams(2).unwrap(),
    )
    .unwrap();
    let count = none.kernel(COUNT);
    let y = filled(&none, S0, &[0]);
    let flag = none.alloc(S0, 4).unwrap();
    let refused = none.capture(S0, |d| {
        d.launch(
            S0,
            &count,
            [1, 1, 1],
            &[
                Arg::read_write(&y),
                Arg::write(&flag).stop_flag(),
                Arg::scalar(1u32),
                Arg::scalar(5u32),
            ],
            &[],
        )
    });
    assert!(
        matches!(&refused, Err(ServerError::LoopRefused(r)) if matches!(r.mismatch, LoopMismatch::Unsupported(_))),
        "{refused:?}"
    );
}

#[test]
fn rule_30_a_read_on_another_stream_waits_for_the_whole_loop() {
    let _suite = suite_lock();
    let (dev, _) = device();
    // x is S1's: its reads run on S1's own pooled stream.
    let (x, done) = (filled(&dev, S1, &[0]), dev.alloc(S0, 4).unwrap());
    let graph = counting(&dev, &x, &done);
    dev.sync(S0).unwrap();
    dev.sync(S1).unwrap();
    let counter = dev.replay_until(S0, &graph, 100).unwrap();
    // Nothing ran yet on the mock; S1's reads must wait for the loop, all of it.
    assert_eq!(read(&dev, S1, &x).unwrap(), [5]);
    assert_eq!(read(&dev, S1, &counter).unwrap(), [4]);
    // A launch on S1 reading the loop's output follows it on the device.
    let y = dev.alloc(S1, 4).unwrap();
    let k = crate::kernels(&dev);
    crate::add_one(&dev, &k, S1, &x, &y).unwrap();
    dev.replay_until(S0, &graph, 100).unwrap(); // x = 6, queued behind S1's read of x
    assert_eq!(read(&dev, S1, &y).unwrap(), [6]);
    assert_eq!(read(&dev, S1, &x).unwrap(), [6]);
}

#[test]
fn rule_30_a_fault_in_an_iteration_ends_the_loop_and_claims_the_outputs_and_the_counter() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let (count, fault) = (dev.kernel(COUNT), dev.kernel(FAULT_AT));
    let (x, done) = (filled(&dev, S0, &[0]), dev.alloc(S0, 4).unwrap());
    let graph = dev
        .capture(S0, |d| {
            d.launch(
                S0,
                &count,
                [1, 1, 1],
                &[
                    Arg::read_write(&x),
                    Arg::write(&done).stop_flag(),
                    Arg::scalar(1u32),
                    Arg::scalar(100u32),
                ],
                &[],
            )?;
            d.launch(
                S0,
                &fault,
                [1, 1, 1],
                &[Arg::read(&x), Arg::scalar(3u32)],
                &[],
            )
        })
        .expect("capture"); // warmup: x = 1
    let counter = dev.replay_until(S0, &graph, 50).unwrap();
    // Iteration 2 makes x 3 and faults: the loop ends there.
    assert!(dev.sync(S0).is_err(), "the fault is reported");
    for (name, buffer) in [("x", &x), ("done", &done), ("counter", &counter)] {
        assert!(
            matches!(read(&dev, S0, buffer), Err(ServerError::Unwritten(_))),
            "{name} is claimed by the loop's fault"
        );
    }
    // The stream stays usable, and a good loop settles what the fault claimed.
    dev.write_values(S0, &x, 0, &[10u32]).unwrap();
    dev.replay_until(S0, &graph, 5).unwrap();
    assert_eq!(read(&dev, S0, &counter).unwrap(), [5]);
    assert_eq!(read(&dev, S0, &x).unwrap(), [15]);
    assert_eq!(read(&dev, S0, &done).unwrap(), [0]);
}

#[test]
fn rule_30_an_update_applies_to_the_loops_enqueued_after_it_never_to_a_queued_one() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let (x, done) = (filled(&dev, S0, &[0]), dev.alloc(S0, 4).unwrap());
    let graph = counting(&dev, &x, &done);
    dev.sync(S0).unwrap();
    let counter = dev.replay_until(S0, &graph, 100).unwrap(); // to 5, queued
    graph.set("limit", 9u32).unwrap();
    dev.replay_until(S0, &graph, 100).unwrap(); // 6, 7, 8, 9
    assert_eq!(read(&dev, S0, &x).unwrap(), [9]);
    assert_eq!(read(&dev, S0, &counter).unwrap(), [4]);
}

#[test]
fn rule_30_a_loop_replay_is_refused_without_a_flag_for_a_bad_max_and_inside_a_window() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let (x, done) = (filled(&dev, S0, &[0]), dev.alloc(S0, 4).unwrap());
    let graph = counting(&dev, &x, &done);
    for max in [0, capture_core::MAX_REPLAYS_PER_CALL + 1] {
        assert!(matches!(
            dev.replay_until(S0, &graph, max),
            Err(ServerError::LoopRefused(r)) if matches!(r.mismatch, LoopMismatch::Max { .. })
        ));
    }
    let k = crate::kernels(&dev);
    let y = dev.alloc(S0, 4).unwrap();
    let plain = dev
        .capture(S0, |d| crate::add_one(d, &k, S0, &x, &y))
        .unwrap();
    let refused = dev.replay_until(S0, &plain, 3).unwrap_err();
    assert!(
        refused.to_string().contains("named no stop flag"),
        "{refused}"
    );
    let inside = dev.capture(S0, |d| {
        if d.phase() == capture_core::CapturePhase::Record {
            d.replay_until(S0, &graph, 3)?;
        }
        Ok::<(), ServerError>(())
    });
    assert!(
        matches!(inside, Err(ServerError::GraphState { .. })),
        "{inside:?}"
    );
    // Nothing ran: x holds the warmups' results.
    assert_eq!(read(&dev, S0, &x).unwrap(), [1]);
}

#[test]
fn rule_30_a_claimed_input_skips_the_loop_and_claims_its_counter() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let count = dev.kernel(COUNT);
    let (x, done, start) = (
        dev.alloc(S0, 4).unwrap(),
        dev.alloc(S0, 4).unwrap(),
        filled(&dev, S0, &[0]),
    );
    let k = crate::kernels(&dev);
    // x = start + 1, then counted: `start` is the graph's input.
    let graph = dev
        .capture(S0, |d| {
            crate::add_one(d, &k, S0, &start, &x)?;
            d.launch(
                S0,
                &count,
                [1, 1, 1],
                &[
                    Arg::read_write(&x),
                    Arg::write(&done).stop_flag(),
                    Arg::scalar(1u32),
                    Arg::scalar(100u32),
                ],
                &[],
            )
        })
        .unwrap();
    let counter = dev.replay_until(S0, &graph, 3).unwrap();
    assert_eq!(read(&dev, S0, &counter).unwrap(), [3]);
    // A kernel that faults claims `start`; the next loop is skipped and passes it on.
    dev.launch(
        S0,
        &dev.kernel(crate::PANIC),
        [1, 1, 1],
        &[Arg::read_write(&start)],
        &[],
    )
    .unwrap();
    assert!(dev.sync(S0).is_err());
    assert!(matches!(
        dev.replay_until(S0, &graph, 3),
        Err(ServerError::Unwritten(_))
    ));
    assert!(matches!(
        read(&dev, S0, &counter),
        Err(ServerError::Unwritten(_))
    ));
    assert!(matches!(read(&dev, S0, &x), Err(ServerError::Unwritten(_))));
}

#[test]
fn rule_30_a_graph_dropped_under_its_queued_loop_lives_until_the_loop_ran() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let (x, done) = (filled(&dev, S0, &[0]), dev.alloc(S0, 4).unwrap());
    let graph = counting(&dev, &x, &done);
    dev.sync(S0).unwrap();
    let counter = dev.replay_until(S0, &graph, 100).unwrap();
    drop(graph);
    assert_eq!(read(&dev, S0, &x).unwrap(), [5]);
    // The counter handle outlives its graph as any buffer handle does.
    assert_eq!(read(&dev, S0, &counter).unwrap(), [4]);
    let _unused: StreamId = S1;
}
