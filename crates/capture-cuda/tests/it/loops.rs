//! Rule 30 on CUDA (issue 46, item 3): a loop replay runs the captured step as the body of
//! a WHILE conditional node with the loop setter after it, on a GPU or on the driver
//! model (which runs conditional nodes as cuda.h documents them and the setter itself).
//! A loop stops after the iteration that set its flag with the counter and outputs of
//! the mock's, `max` bounds it, each loop zeroes the flag, a fault ends it, a slot update
//! reaches the loops enqueued after it and never a queued one, the user's own work is
//! refused in a loop window, and a driver before CUDA 12.3 runs no loop.

use capture_core::{
    Arg, Backend, Buffer, Device, DeviceConfig, DeviceLoops, GraphHandle, KernelSignature,
    LoopMismatch, Op, Param, ServerError, StreamId,
};
use capture_cuda::{CudaBackend, CudaKernelSource, CudaWork};

use crate::support;

const S: StreamId = StreamId::new(0);

/// The launch-model tests' kernels (`kernels/user.cu`), NVRTC's PTX: `count_until(x,
/// done, k, limit)` is `x[0] += k; done[0] = x[0] >= limit`, `trap_at(x, at)` traps when
/// `x[0] == at`.
const PTX: &str = include_str!("kernels/user.compute_80.ptx");

type Dev = Device<CudaBackend>;

fn count_until(dev: &Dev) -> capture_core::KernelHandle {
    let signature = KernelSignature::of(&[
        Param::READ_WRITE,
        Param::WRITE,
        Param::scalar::<u32>(),
        Param::scalar::<u32>(),
    ]);
    dev.kernel(
        CudaKernelSource::ptx("count_until", PTX.to_owned(), "count_until", signature)
            .unwrap()
            .with_block([1, 1, 1]),
    )
}

fn trap_at(dev: &Dev) -> capture_core::KernelHandle {
    let signature = KernelSignature::of(&[Param::READ, Param::scalar::<u32>()]);
    dev.kernel(
        CudaKernelSource::ptx("trap_at", PTX.to_owned(), "trap_at", signature)
            .unwrap()
            .with_block([1, 1, 1]),
    )
}

fn word(dev: &Dev, b: &Buffer) -> Result<u32, ServerError> {
    Ok(dev.read_values::<u32>(S, b)?[0])
}

/// A device with loops, or `None` after a `SKIP:` line (no driver, or one that runs no
/// loop: a GPU the setter has no cubin for).
fn looping(test: &str) -> Option<(support::Cuda, Dev)> {
    let cuda = support::open(test)?;
    if let DeviceLoops::Unsupported(why) = cuda.backend.launch_limits().loops() {
        assert!(!support::on_model(&cuda), "the model runs loops: {why}");
        println!("SKIP: {test}: {why}");
        return None;
    }
    let dev = Device::new(cuda.backend.clone(), DeviceConfig::new()).unwrap();
    Some((cuda, dev))
}

/// `x[0] += 1; done = x[0] >= limit` captured on `S`, `limit` a slot (5): warmup runs it
/// once.
fn counting(dev: &Dev, x: &Buffer, done: &Buffer) -> GraphHandle {
    let count = count_until(dev);
    dev.capture(S, |d| {
        d.launch(
            S,
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

fn filled(dev: &Dev, value: u32) -> Buffer {
    let b = dev.alloc(S, 4).unwrap();
    dev.write_values(S, &b, 0, &[value]).unwrap();
    b
}

#[test]
fn a_loop_stops_after_the_iteration_that_set_its_flag_and_max_bounds_it() {
    let Some((_cuda, dev)) = looping("loops: stop") else {
        return;
    };
    let (x, done) = (filled(&dev, 0), dev.alloc(S, 4).unwrap());
    let graph = counting(&dev, &x, &done); // warmup: x = 1
    let counter = dev.replay_until(S, &graph, 100).unwrap();
    // x: 2, 3, 4, 5 — the fourth iteration set the flag, and none ran after it.
    assert_eq!(word(&dev, &counter).unwrap(), 4);
    assert_eq!(word(&dev, &x).unwrap(), 5);
    assert_eq!(word(&dev, &done).unwrap(), 1);
    // The flag is zeroed as each loop starts: the next one runs one iteration (x = 6).
    let again = dev.replay_until(S, &graph, 100).unwrap();
    assert_eq!(again.id(), counter.id(), "one counter per graph");
    assert_eq!(word(&dev, &counter).unwrap(), 1);
    assert_eq!(word(&dev, &x).unwrap(), 6);
    // `max` bounds it: the flag never set, every iteration ran; a later, larger `max`
    // is the next loop's (the loop graph's own `max` set again).
    dev.write_values(S, &x, 0, &[0u32]).unwrap();
    dev.replay_until(S, &graph, 3).unwrap();
    assert_eq!(word(&dev, &counter).unwrap(), 3);
    assert_eq!(word(&dev, &x).unwrap(), 3);
    assert_eq!(word(&dev, &done).unwrap(), 0);
    dev.write_values(S, &x, 0, &[0u32]).unwrap();
    dev.replay_until(S, &graph, 1).unwrap();
    dev.replay_until(S, &graph, 2).unwrap(); // queued behind the first: x 1, then 2, 3
    assert_eq!(word(&dev, &counter).unwrap(), 2);
    assert_eq!(word(&dev, &x).unwrap(), 3);
    // A plain replay of the same graph stays a plain replay.
    dev.replay(S, &graph, 1).unwrap();
    assert_eq!(word(&dev, &x).unwrap(), 4);
}

#[test]
fn a_slot_update_reaches_the_loops_enqueued_after_it_never_a_queued_one() {
    let Some((_cuda, dev)) = looping("loops: update") else {
        return;
    };
    let (x, done) = (filled(&dev, 0), dev.alloc(S, 4).unwrap());
    let graph = counting(&dev, &x, &done); // warmup: x = 1
    // Set before the first loop: the loop graph is built from the graph as it is now.
    graph.set("limit", 3u32).unwrap();
    let counter = dev.replay_until(S, &graph, 100).unwrap(); // 2, 3
    assert_eq!(word(&dev, &counter).unwrap(), 2);
    // Set while a loop is queued (the model runs nothing before the host waits): that
    // loop keeps limit 8 (4..8), the next runs to 11 (9, 10, 11).
    graph.set("limit", 8u32).unwrap();
    dev.replay_until(S, &graph, 100).unwrap();
    graph.set("limit", 11u32).unwrap();
    let last = dev.replay_until(S, &graph, 100).unwrap();
    assert_eq!(word(&dev, &last).unwrap(), 3);
    assert_eq!(word(&dev, &x).unwrap(), 11);
    // A plain replay sees the update too.
    graph.set("limit", 12u32).unwrap();
    dev.replay(S, &graph, 1).unwrap();
    assert_eq!(word(&dev, &done).unwrap(), 1);
    assert_eq!(word(&dev, &x).unwrap(), 12);
}

#[test]
fn copies_are_in_a_loop_body_and_the_users_work_is_refused() {
    let Some((_cuda, dev)) = looping("loops: body") else {
        return;
    };
    let count = count_until(&dev);
    let (x, done, y) = (filled(&dev, 0), dev.alloc(S, 4).unwrap(), filled(&dev, 0));
    let mut refused = None;
    let graph = dev
        .capture(S, |d| {
            // A recorded copy runs in every iteration: y = 7 each time, x counts.
            d.write_values(S, &y, 0, &[7u32])?;
            d.launch(
                S,
                &count,
                [1, 1, 1],
                &[
                    Arg::read_write(&x),
                    Arg::write(&done).stop_flag(),
                    Arg::scalar(1u32),
                    Arg::scalar(4u32),
                ],
                &[],
            )?;
            if d.phase() == capture_core::CapturePhase::Record {
                // SAFETY: the work touches nothing (it is refused before it runs).
                let work = unsafe { CudaWork::new("own", |_| Ok(())) };
                refused = Some(d.foreign_work(S, &[Arg::read(&x)], work));
            }
            Ok::<(), ServerError>(())
        })
        .expect("the refusal changed nothing");
    match refused {
        Some(Err(ServerError::LoopRefused(r))) => assert!(
            matches!(&r.mismatch, LoopMismatch::Body { op: Op::Work { name, .. }, reason }
                if name == "own" && reason.contains("conditional body")),
            "{r}"
        ),
        other => panic!("the work was not refused: {other:?}"),
    }
    let counter = dev.replay_until(S, &graph, 10).unwrap(); // x: 2, 3, 4
    assert_eq!(word(&dev, &counter).unwrap(), 3);
    assert_eq!(word(&dev, &y).unwrap(), 7);
}

/// Runs test `name` again in a process of its own with `CHILD` set and `env`, and checks
/// it passed: a fault leaves the context faulted for good, and the model reads its
/// version once.
pub(crate) fn in_child(name: &str, child: &str, env: &[(&str, &str)]) {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", name, "--nocapture"])
        .env(child, "1");
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A fault in an iteration ends the loop on the device: the next iterations never run,
/// the error is reported at the next wait, and the loop's outputs and counter are
/// claimed. On the model alone, in a process of its own (the context stays faulted).
#[test]
fn a_fault_in_an_iteration_ends_the_loop() {
    const CHILD: &str = "CAPTURE_TEST_CHILD_LOOP_FAULT";
    if std::env::var(CHILD).is_ok() {
        let (_cuda, dev) = looping("loops: fault").expect("the model");
        let (count, trap) = (count_until(&dev), trap_at(&dev));
        let (x, done) = (filled(&dev, 0), dev.alloc(S, 4).unwrap());
        let graph = dev
            .capture(S, |d| {
                d.launch(
                    S,
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
                    S,
                    &trap,
                    [1, 1, 1],
                    &[Arg::read(&x), Arg::scalar(3u32)],
                    &[],
                )
            })
            .expect("capture"); // warmup: x = 1
        let counter = dev.replay_until(S, &graph, 50).unwrap();
        // Iteration 2 makes x 3 and traps: the loop ends there.
        let e = dev.sync(S).unwrap_err();
        assert!(
            format!("{e:?}").contains("CUDA_ERROR_ILLEGAL_ADDRESS"),
            "{e:?}"
        );
        for (name, buffer) in [("x", &x), ("done", &done), ("counter", &counter)] {
            assert!(
                matches!(word(&dev, buffer), Err(ServerError::Unwritten(_))),
                "{name} is claimed by the loop's fault"
            );
        }
        return;
    }
    let Some(cuda) = support::open("loops: fault") else {
        return;
    };
    if !support::on_model(&cuda) {
        println!("SKIP: loops: fault: a fault would leave the GPU's context faulted");
        return;
    }
    drop(cuda);
    in_child("loops::a_fault_in_an_iteration_ends_the_loop", CHILD, &[]);
}

/// Under a driver older than CUDA 12.3 (the model claiming 12.2, in a process of its
/// own) the device runs no loop: a stop flag is refused when recorded, naming the
/// driver, and the step records without it.
#[test]
fn a_driver_before_cuda_12_3_runs_no_loop() {
    const CHILD: &str = "CAPTURE_TEST_CHILD_LOOP_12_2";
    if std::env::var(CHILD).is_ok() {
        let cuda = support::open("loops: a driver before 12.3").expect("the model");
        assert_eq!(cuda.driver_version(), "12.2");
        let DeviceLoops::Unsupported(why) = cuda.backend.launch_limits().loops() else {
            panic!("a CUDA 12.2 driver runs loops");
        };
        assert!(why.contains("CUDA 12.3"), "{why}");
        let dev = Device::new(cuda.backend.clone(), DeviceConfig::new()).unwrap();
        // A builtin (its cubin loads where the user PTX's ISA is too new): done = x + 1.
        let add = dev.builtin(capture_core::Builtin::AddScalar);
        let info = capture_core::Builtin::AddScalar.info(1, 1.0);
        let (x, done) = (dev.alloc(S, 4).unwrap(), dev.alloc(S, 4).unwrap());
        dev.write_values(S, &x, 0, &[2.0f32]).unwrap();
        let step = |d: &Dev, flag: Arg| d.launch(S, &add, [1, 1, 1], &[Arg::read(&x), flag], &info);
        let refused = dev.capture(S, |d| step(d, Arg::write(&done).stop_flag()));
        assert!(
            matches!(&refused, Err(ServerError::LoopRefused(r))
                if matches!(r.mismatch, LoopMismatch::Unsupported(w) if w.contains("CUDA 12.3"))),
            "{refused:?}"
        );
        let graph = dev
            .capture(S, |d| step(d, Arg::write(&done)))
            .expect("without the flag");
        dev.replay(S, &graph, 2).unwrap();
        assert!(matches!(
            dev.replay_until(S, &graph, 4),
            Err(ServerError::LoopRefused(_))
        ));
        assert_eq!(dev.read_values::<f32>(S, &done).unwrap(), [3.0]);
        return;
    }
    let Some(cuda) = support::open("loops: a driver before 12.3") else {
        return;
    };
    if !support::on_model(&cuda) {
        println!("SKIP: loops: a driver before 12.3: the model claims the version");
        return;
    }
    drop(cuda);
    in_child(
        "loops::a_driver_before_cuda_12_3_runs_no_loop",
        CHILD,
        &[("CAPTURE_CUDA_MODEL_VERSION", "12020")],
    );
}
