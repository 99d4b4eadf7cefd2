//! Rule 30 on Vulkan (issue 46, item 4): a loop replay records the step `max` times, the
//! iterations after the flag's discarded by conditional rendering, or on the indirect
//! fallback (forced here with `VulkanOptions::indirect_loops`, as on a device without
//! conditional rendering) emptied by zeroed group counts (`loops.rs` in the crate), on
//! both paths, in both memory modes, under the validation layer. A loop stops after the
//! iteration that set its flag with the right counter and outputs (every dispatch of
//! the later iterations discarded, the whole iteration of the flag run), `max` bounds
//! it, each loop zeroes the flag, a slot update reaches the loops enqueued after it and
//! never a queued one (a grid slot's too), a copy and the user's own work are refused in a window that names
//! a flag (in either order), a loop of loop replays holds a bounded number of descriptor
//! pools, and the cost of an iteration after the flag's is measured and printed (no
//! timing is asserted).

use std::time::{Duration, Instant};

use capture_core::{
    Arg, Buffer, CapturePhase, Device, DeviceConfig, DeviceLoops, Dims, GraphHandle, KernelHandle,
    KernelSignature, LoopMismatch, Op, Param, ServerError, StreamId,
};
use capture_suite::scenarios::suite_lock;
use capture_vulkan::ash::vk;
use capture_vulkan::{
    LoopEmulation, MemoryMode, VulkanBackend, VulkanCall, VulkanKernelSource, VulkanOptions,
    VulkanWork,
};

use crate::support;

const S: StreamId = StreamId::new(0);

type Dev = Device<VulkanBackend>;

/// `x[0] += 1; done[0] = x[0] >= limit`: the step, which sets its stop flag at `limit`.
const COUNT: &str = "
struct Params { limit: u32 }
var<immediate> p: Params;
@group(0) @binding(0) var<storage, read_write> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> done: array<u32>;
@compute @workgroup_size(1)
fn main() {
    let v = x[0] + 1u;
    x[0] = v;
    done[0] = select(0u, 1u, v >= p.limit);
}
";

/// `marks[x[0] % len] += 1`: which iterations ran, after the step in each.
const MARK: &str = "
@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> marks: array<u32>;
@compute @workgroup_size(1)
fn main() {
    let at = x[0] % arrayLength(&marks);
    marks[at] = marks[at] + 1u;
}
";

/// `marks[i] += 1` for each invocation `i` of the grid: which part of a grid ran.
const STAMP: &str = "
@group(0) @binding(0) var<storage, read_write> marks: array<u32>;
@compute @workgroup_size(1)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    marks[id.x] = marks[id.x] + 1u;
}
";

/// Words of the marks buffer.
const MARKS: usize = 64;

/// The two paths a loop replay takes: conditional rendering where the device has it
/// (`false`), and the indirect fallback, forced (`true`).
const PATHS: [bool; 2] = [false, true];

/// Every path in both memory modes.
fn cases() -> impl Iterator<Item = (bool, MemoryMode)> {
    PATHS.into_iter().flat_map(|indirect| {
        [MemoryMode::HostVisible, MemoryMode::ForcedStaging]
            .into_iter()
            .map(move |memory| (indirect, memory))
    })
}

/// The backend in `memory` mode, on the indirect fallback if `indirect`, with validation
/// on, and a device over it; `None` after a `SKIP:` line.
fn open(test: &str, memory: MemoryMode, indirect: bool) -> Option<(VulkanBackend, Dev)> {
    let backend = match support::with(VulkanOptions {
        memory,
        indirect_loops: indirect,
        ..VulkanOptions::from_env()
    }) {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: {test}: {why}");
            return None;
        }
    };
    if !looping(test, &backend, indirect) {
        return None;
    }
    let dev = Device::new(backend.clone(), DeviceConfig::new()).unwrap();
    Some((backend, dev))
}

/// Whether `backend` runs loops (every device does, on one path or the other), on the
/// path asked for: the indirect fallback where `indirect` forced it, conditional
/// rendering on lavapipe otherwise (unless the environment forced the fallback).
fn looping(test: &str, backend: &VulkanBackend, indirect: bool) -> bool {
    use capture_core::backend::Backend;
    if let DeviceLoops::Unsupported(why) = backend.launch_limits().loops() {
        panic!("{test}: every Vulkan device runs loops now, yet: {why}");
    }
    let emulation = backend.loop_emulation();
    println!("{test}: loops by {emulation:?}");
    if indirect {
        assert!(
            matches!(emulation, LoopEmulation::IndirectDispatch(why) if why.contains("indirect_loops")),
            "{emulation:?}"
        );
    } else if backend.device_name().contains("llvmpipe")
        && !VulkanOptions::from_env().indirect_loops
    {
        assert_eq!(
            emulation,
            LoopEmulation::ConditionalRendering,
            "lavapipe has VK_EXT_conditional_rendering"
        );
    }
    true
}

pub(crate) fn count(dev: &Dev) -> KernelHandle {
    let signature = KernelSignature::of(&[Param::READ_WRITE, Param::WRITE, Param::scalar::<u32>()]);
    dev.kernel(VulkanKernelSource::wgsl("count", COUNT, "main", signature).unwrap())
}

fn mark(dev: &Dev) -> KernelHandle {
    let signature = KernelSignature::of(&[Param::READ, Param::READ_WRITE]);
    dev.kernel(VulkanKernelSource::wgsl("mark", MARK, "main", signature).unwrap())
}

pub(crate) fn filled(dev: &Dev, words: &[u32]) -> Buffer {
    let b = dev.alloc(S, 4 * words.len() as u64).unwrap();
    dev.write_values(S, &b, 0, words).unwrap();
    b
}

pub(crate) fn word(dev: &Dev, b: &Buffer) -> u32 {
    dev.read_values::<u32>(S, b).unwrap()[0]
}

/// The step (`limit` a slot, 5) then the marks, captured on `S`: warmup runs it once.
fn step(dev: &Dev, x: &Buffer, done: &Buffer, marks: &Buffer) -> GraphHandle {
    step_with(dev, x, done, marks, 1)
}

/// The step then `k` launches of the marks, captured on `S`.
fn step_with(dev: &Dev, x: &Buffer, done: &Buffer, marks: &Buffer, k: usize) -> GraphHandle {
    let (count, mark) = (count(dev), mark(dev));
    dev.capture(S, |d| {
        d.launch(
            S,
            &count,
            [1, 1, 1],
            &[
                Arg::read_write(x),
                Arg::write(done).stop_flag(),
                Arg::scalar(5u32).slot("limit"),
            ],
            &[],
        )?;
        for _ in 0..k {
            d.launch(
                S,
                &mark,
                [1, 1, 1],
                &[Arg::read(x), Arg::read_write(marks)],
                &[],
            )?;
        }
        Ok::<(), ServerError>(())
    })
    .expect("capture")
}

/// Marks with 1 at each of `ran`, 0 elsewhere.
fn marked(ran: impl IntoIterator<Item = usize>) -> Vec<u32> {
    let mut marks = vec![0u32; MARKS];
    for at in ran {
        marks[at] += 1;
    }
    marks
}

#[test]
fn the_device_runs_loops_and_refuses_copies_and_work_in_their_bodies() {
    let _suite = suite_lock();
    for indirect in PATHS {
        let Some((backend, _dev)) = open("loops: declared", MemoryMode::HostVisible, indirect)
        else {
            return;
        };
        use capture_core::backend::Backend;
        let how = match backend.loop_emulation() {
            LoopEmulation::ConditionalRendering => "conditional rendering",
            LoopEmulation::IndirectDispatch(_) => "zeroing the group counts",
        };
        match backend.launch_limits().loops() {
            DeviceLoops::Supported {
                copies: Some(copies),
                work: Some(work),
            } => {
                assert!(copies.contains(how), "{copies}");
                assert!(work.contains(how), "{work}");
            }
            other => panic!("{}: {other:?}", backend.device_name()),
        }
    }
}

#[test]
fn a_loop_stops_after_the_iteration_that_set_its_flag_and_max_bounds_it() {
    let _suite = suite_lock();
    for (indirect, memory) in cases() {
        let Some((backend, dev)) = open("loops: stop", memory, indirect) else {
            return;
        };
        let (x, done, marks) = (
            filled(&dev, &[0]),
            filled(&dev, &[0]),
            filled(&dev, &[0; MARKS]),
        );
        let graph = step(&dev, &x, &done, &marks); // warmup: x = 1, marks[1]
        let counter = dev.replay_until(S, &graph, 100).unwrap();
        // x: 2, 3, 4, 5 — the fourth iteration set the flag, and ran whole (its marks);
        // no dispatch of the 96 after it ran.
        assert_eq!(word(&dev, &counter), 4, "{memory:?}, indirect {indirect}");
        assert_eq!(word(&dev, &x), 5);
        assert_eq!(word(&dev, &done), 1);
        assert_eq!(dev.read_values::<u32>(S, &marks).unwrap(), marked(1..=5));
        // The flag is zeroed as each loop starts: the next one runs one iteration.
        let again = dev.replay_until(S, &graph, 100).unwrap();
        assert_eq!(again.id(), counter.id(), "one counter per graph");
        assert_eq!(word(&dev, &counter), 1);
        assert_eq!(word(&dev, &x), 6);
        // `max` bounds it: the flag never set, every iteration ran.
        dev.write_values(S, &x, 0, &[0u32]).unwrap();
        dev.write_values(S, &marks, 0, &[0u32; MARKS]).unwrap();
        dev.replay_until(S, &graph, 3).unwrap();
        assert_eq!(word(&dev, &counter), 3);
        assert_eq!(word(&dev, &x), 3);
        assert_eq!(word(&dev, &done), 0);
        assert_eq!(dev.read_values::<u32>(S, &marks).unwrap(), marked(1..=3));
        // Two loops queued back to back, then read: the second's counter, x 1, then 2, 3.
        dev.write_values(S, &x, 0, &[0u32]).unwrap();
        dev.replay_until(S, &graph, 1).unwrap();
        dev.replay_until(S, &graph, 2).unwrap();
        assert_eq!(word(&dev, &counter), 2);
        assert_eq!(word(&dev, &x), 3);
        // A plain replay of the same graph stays a plain replay (its secondaries run
        // outside conditional rendering too).
        dev.replay(S, &graph, 2).unwrap();
        assert_eq!(word(&dev, &x), 5);
        assert_eq!(word(&dev, &done), 1);
        dev.sync(S).unwrap();
        drop((x, done, marks, counter, again, graph, dev));
        support::assert_no_validation_messages(&backend);
    }
}

#[test]
fn a_slot_update_reaches_the_loops_enqueued_after_it_never_a_queued_one() {
    let _suite = suite_lock();
    for (indirect, memory) in cases() {
        let Some((backend, dev)) = open("loops: update", memory, indirect) else {
            return;
        };
        let (x, done, marks) = (
            filled(&dev, &[0]),
            filled(&dev, &[0]),
            filled(&dev, &[0; MARKS]),
        );
        let graph = step(&dev, &x, &done, &marks); // warmup: x = 1
        graph.set("limit", 3u32).unwrap();
        let counter = dev.replay_until(S, &graph, 100).unwrap(); // 2, 3
        assert_eq!(word(&dev, &counter), 2, "{memory:?}, indirect {indirect}");
        // Set while a loop is queued (nothing waits in between): that loop keeps limit 8
        // (4..8), the next runs to 11 (9, 10, 11).
        graph.set("limit", 8u32).unwrap();
        let queued = dev.replay_until(S, &graph, 100).unwrap();
        graph.set("limit", 11u32).unwrap();
        dev.replay_until(S, &graph, 100).unwrap();
        assert_eq!(queued.id(), counter.id());
        assert_eq!(word(&dev, &counter), 3);
        assert_eq!(word(&dev, &x), 11);
        assert_eq!(dev.read_values::<u32>(S, &marks).unwrap(), marked(1..=11));
        // A plain replay sees the update too.
        graph.set("limit", 12u32).unwrap();
        dev.replay(S, &graph, 1).unwrap();
        assert_eq!(word(&dev, &done), 1);
        assert_eq!(word(&dev, &x), 12);
        dev.sync(S).unwrap();
        drop((x, done, marks, counter, queued, graph, dev));
        support::assert_no_validation_messages(&backend);
    }
}

/// A step of more dispatches than one chunk of group counts holds (128 slots, the
/// loop's own among them, on the indirect fallback): every chunk is zeroed after the
/// flag's iteration and restored after the loop, so a plain replay runs whole.
#[test]
fn a_loop_over_a_long_step_stops_and_a_replay_after_it_runs_whole() {
    const K: usize = 300;
    let _suite = suite_lock();
    for indirect in PATHS {
        let Some((backend, dev)) = open("loops: long step", MemoryMode::HostVisible, indirect)
        else {
            return;
        };
        let (x, done, marks) = (
            filled(&dev, &[0]),
            filled(&dev, &[0]),
            filled(&dev, &[0; MARKS]),
        );
        let graph = step_with(&dev, &x, &done, &marks, K); // warmup: x = 1
        let counter = dev.replay_until(S, &graph, 8).unwrap(); // 2, 3, 4, 5
        assert_eq!(word(&dev, &counter), 4, "indirect {indirect}");
        let mut expected = vec![0u32; MARKS];
        expected[1..=5].fill(K as u32);
        assert_eq!(dev.read_values::<u32>(S, &marks).unwrap(), expected);
        dev.replay(S, &graph, 1).unwrap(); // 6
        expected[6] = K as u32;
        assert_eq!(dev.read_values::<u32>(S, &marks).unwrap(), expected);
        dev.sync(S).unwrap();
        drop((x, done, marks, counter, graph, dev));
        support::assert_no_validation_messages(&backend);
    }
}

/// A grid slot (rule 26) reaches every iteration of the loops enqueued after its update
/// and never a queued one, and a plain replay after them: on the indirect fallback the
/// dispatch's group counts are rewritten in queue order, and a loop's zeroing never
/// outlives it.
#[test]
fn a_grid_slot_update_reaches_the_loops_enqueued_after_it_never_a_queued_one() {
    let _suite = suite_lock();
    for (indirect, memory) in cases() {
        let Some((backend, dev)) = open("loops: grid", memory, indirect) else {
            return;
        };
        let (x, done, marks) = (
            filled(&dev, &[0]),
            filled(&dev, &[0]),
            filled(&dev, &[0; MARKS]),
        );
        let (count, stamp) = (count(&dev), stamp(&dev));
        let graph = dev
            .capture(S, |d| {
                d.launch(
                    S,
                    &count,
                    [1, 1, 1],
                    &[
                        Arg::read_write(&x),
                        Arg::write(&done).stop_flag(),
                        Arg::scalar(5u32),
                    ],
                    &[],
                )?;
                d.launch(
                    S,
                    &stamp,
                    Dims::grid([2, 1, 1]).up_to([8, 1, 1]).slot("g"),
                    &[Arg::read_write(&marks)],
                    &[],
                )
            })
            .expect("capture"); // warmup: x = 1, marks 0..2 once
        // x 2..5 at grid 2, queued; then the grid is 4 for the next loop: x >= 5 already,
        // so one iteration; then 3 for a plain replay.
        let counter = dev.replay_until(S, &graph, 100).unwrap();
        graph.set_grid("g", [4, 1, 1]).unwrap();
        dev.replay_until(S, &graph, 100).unwrap();
        assert_eq!(word(&dev, &counter), 1, "{memory:?}, indirect {indirect}");
        let mut expected = vec![0u32; MARKS];
        expected[..2].fill(1 + 4 + 1);
        expected[2..4].fill(1);
        assert_eq!(dev.read_values::<u32>(S, &marks).unwrap(), expected);
        graph.set_grid("g", [3, 1, 1]).unwrap();
        dev.replay(S, &graph, 2).unwrap();
        expected[..3].iter_mut().for_each(|m| *m += 2);
        assert_eq!(dev.read_values::<u32>(S, &marks).unwrap(), expected);
        // A loop after the flag: the whole iteration at grid 3, none after it.
        dev.write_values(S, &x, 0, &[3u32]).unwrap();
        dev.replay_until(S, &graph, 50).unwrap(); // x = 4, 5
        assert_eq!(word(&dev, &counter), 2);
        expected[..3].iter_mut().for_each(|m| *m += 2);
        assert_eq!(dev.read_values::<u32>(S, &marks).unwrap(), expected);
        dev.sync(S).unwrap();
        drop((x, done, marks, counter, graph, dev));
        support::assert_no_validation_messages(&backend);
    }
}

fn stamp(dev: &Dev) -> KernelHandle {
    let signature = KernelSignature::of(&[Param::READ_WRITE]);
    dev.kernel(VulkanKernelSource::wgsl("stamp", STAMP, "main", signature).unwrap())
}

/// A loop whose submission fails (the backend's fault hook at `vkQueueSubmit`): the call
/// is accepted, the next sync reports the failure, and what the loop writes (the
/// counter too) is claimed (rule 15). The loop never ran, so its word still lets every
/// dispatch through: a plain replay and the next loop give the right bytes.
#[test]
fn a_loop_whose_submission_fails_claims_what_it_writes_and_the_graph_goes_on() {
    let _suite = suite_lock();
    for (indirect, memory) in cases() {
        let Some((backend, dev)) = open("loops: failed submission", memory, indirect) else {
            return;
        };
        let (x, done, marks) = (
            filled(&dev, &[0]),
            filled(&dev, &[0]),
            filled(&dev, &[0; MARKS]),
        );
        let graph = step(&dev, &x, &done, &marks); // warmup: x = 1
        dev.sync(S).unwrap();
        backend.fail_call(
            VulkanCall::QueueSubmit,
            0,
            vk::Result::ERROR_OUT_OF_HOST_MEMORY,
        );
        let counter = dev.replay_until(S, &graph, 100).expect("accepted");
        let error = dev.sync(S).unwrap_err();
        assert!(error.to_string().contains("vkQueueSubmit"), "{error}");
        for (name, b) in [
            ("x", &x),
            ("done", &done),
            ("marks", &marks),
            ("counter", &counter),
        ] {
            assert!(
                matches!(dev.read_values::<u32>(S, b), Err(ServerError::Unwritten(_))),
                "{name} is not claimed by the failed loop ({memory:?}, indirect {indirect})"
            );
        }
        dev.write_values(S, &x, 0, &[0u32]).unwrap();
        dev.write_values(S, &marks, 0, &[0u32; MARKS]).unwrap();
        dev.replay(S, &graph, 1).unwrap(); // x = 1
        let again = dev.replay_until(S, &graph, 100).unwrap(); // 2, 3, 4, 5
        assert_eq!(again.id(), counter.id());
        assert_eq!(word(&dev, &counter), 4);
        assert_eq!(word(&dev, &x), 5);
        assert_eq!(dev.read_values::<u32>(S, &marks).unwrap(), marked(1..=5));
        dev.sync(S).unwrap();
        drop((x, done, marks, counter, again, graph, dev));
        support::assert_no_validation_messages(&backend);
    }
}

/// The mismatch of a refused loop.
fn refusal(result: Result<(), ServerError>) -> LoopMismatch {
    match result {
        Err(ServerError::LoopRefused(r)) => r.mismatch,
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn a_copy_and_the_users_work_are_refused_in_a_window_naming_a_flag_in_either_order() {
    let _suite = suite_lock();
    for indirect in PATHS {
        refused_in_body(indirect);
    }
}

fn refused_in_body(indirect: bool) {
    let Some((backend, dev)) = open("loops: body", MemoryMode::HostVisible, indirect) else {
        return;
    };
    let count = count(&dev);
    let (x, done, y) = (filled(&dev, &[0]), filled(&dev, &[0]), filled(&dev, &[0]));
    let launch = |d: &Dev| {
        d.launch(
            S,
            &count,
            [1, 1, 1],
            &[
                Arg::read_write(&x),
                Arg::write(&done).stop_flag(),
                Arg::scalar(4u32),
            ],
            &[],
        )
    };
    // SAFETY: the work records nothing (and is refused before it is recorded).
    let work = || unsafe { VulkanWork::new("own", |_| Ok(())) };
    // The flag first: the copy, then the work, is refused, naming itself.
    let mut seen = Vec::new();
    let graph = dev
        .capture(S, |d| {
            launch(d)?;
            if d.phase() == CapturePhase::Record {
                seen.push(refusal(d.write_values(S, &y, 0, &[7u32])));
                seen.push(refusal(d.foreign_work(S, &[Arg::read(&x)], work())));
            }
            Ok::<(), ServerError>(())
        })
        .expect("the refusals changed nothing");
    assert!(
        matches!(&seen[0], LoopMismatch::Body { op: Op::Call("write"), reason }
            if reason.contains("a recorded copy would run in every iteration")),
        "{seen:?}"
    );
    assert!(
        matches!(&seen[1], LoopMismatch::Body { op: Op::Work { name, .. }, reason }
            if name == "own" && reason.contains("would run in every iteration")),
        "{seen:?}"
    );
    let counter = dev.replay_until(S, &graph, 10).unwrap(); // x: 2, 3, 4
    assert_eq!(word(&dev, &counter), 3);
    assert_eq!(word(&dev, &y), 0, "the refused copy was never recorded");
    // The copy (then the work) first: the launch naming the flag is refused, naming it.
    for with_work in [false, true] {
        let mut later = None;
        let graph = dev
            .capture(S, |d| {
                if with_work {
                    d.foreign_work(S, &[Arg::read(&x)], work())?;
                } else {
                    d.write_values(S, &y, 0, &[7u32])?;
                }
                if d.phase() == CapturePhase::Record {
                    later = Some(refusal(launch(d)));
                }
                Ok::<(), ServerError>(())
            })
            .expect("without a flag the copy or work is a graph's as ever");
        match (&later, with_work) {
            (
                Some(LoopMismatch::Body {
                    op: Op::Call("write"),
                    ..
                }),
                false,
            ) => {}
            (
                Some(LoopMismatch::Body {
                    op: Op::Work { name, .. },
                    ..
                }),
                true,
            ) if name == "own" => {}
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            dev.replay_until(S, &graph, 4),
            Err(ServerError::LoopRefused(r)) if r.mismatch == LoopMismatch::NoFlag
        ));
        dev.replay(S, &graph, 1).unwrap();
    }
    assert_eq!(word(&dev, &y), 7);
    dev.sync(S).unwrap();
    drop((x, done, y, counter, graph, dev));
    support::assert_no_validation_messages(&backend);
}

/// The setter's descriptor sets come from the stream's batches, whose pools are reset
/// and reused once a batch has run: 200 loop replays at 2 sets a pool hold at most a
/// pool per batch the device may lag behind (16 pending, and the one being filled), not
/// a set per loop (100 pools).
#[test]
fn a_loop_of_loop_replays_holds_a_bounded_number_of_descriptor_pools() {
    let _suite = suite_lock();
    for indirect in PATHS {
        pools_bounded(indirect);
    }
}

/// As [`a_loop_of_loop_replays_holds_a_bounded_number_of_descriptor_pools`], on one path
/// (the fallback's loop takes two sets: its stepper's and its one chunk's zeroer's).
fn pools_bounded(indirect: bool) {
    const BOUND: u64 = 16 + 2;
    let backend = match support::with(VulkanOptions {
        sets_per_pool: 2,
        indirect_loops: indirect,
        ..VulkanOptions::from_env()
    }) {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: loops: pools: {why}");
            return;
        }
    };
    if !looping("loops: pools", &backend, indirect) {
        return;
    }
    let dev = Device::new(backend.clone(), DeviceConfig::new()).unwrap();
    let (x, done, marks) = (
        filled(&dev, &[0]),
        filled(&dev, &[0]),
        filled(&dev, &[0; MARKS]),
    );
    let graph = step(&dev, &x, &done, &marks);
    dev.replay_until(S, &graph, 4).unwrap();
    dev.sync(S).unwrap();
    let before = backend.descriptor_pools_created();
    for _ in 0..200 {
        dev.write_values(S, &x, 0, &[0u32]).unwrap();
        dev.replay_until(S, &graph, 8).unwrap();
    }
    let counter = dev.replay_until(S, &graph, 8).unwrap();
    dev.sync(S).unwrap();
    let made = backend.descriptor_pools_created() - before;
    assert!(
        made <= BOUND,
        "200 loop replays made {made} descriptor pools (at most {BOUND}): the setter's sets \
         are not reused"
    );
    assert_eq!(word(&dev, &counter), 1, "x was 5 already: one iteration");
    drop((x, done, marks, counter, graph, dev));
    support::assert_no_validation_messages(&backend);
}

/// What an iteration after the flag's costs, on this device: for a step of 2 and of 16
/// dispatches, loops of `N` iterations whose flag is set in the first (against a loop of
/// 1), whose flag is never set, and `replay(g, N)`, each timed from the call to the end
/// of a sync (and the call alone: the host's recording and submission), the median of
/// several runs; printed, never asserted (lavapipe's timings say nothing about a GPU's).
/// The validation layer is off here, as it would time itself (the other tests run the
/// same paths under it); the results are checked.
#[test]
fn the_cost_of_an_iteration_after_the_flag_is_measured() {
    let _suite = suite_lock();
    for indirect in PATHS {
        cost(indirect);
    }
}

/// As [`the_cost_of_an_iteration_after_the_flag_is_measured`], on one path.
fn cost(indirect: bool) {
    const N: u32 = 256;
    const RUNS: usize = 9;
    let backend = match VulkanBackend::new(VulkanOptions {
        memory: MemoryMode::HostVisible,
        indirect_loops: indirect,
        ..VulkanOptions::from_env()
    }) {
        Ok(b) => b,
        Err(e) if support::required() => panic!("CAPTURE_REQUIRE_VULKAN is set and {e}"),
        Err(e) => {
            println!("SKIP: loops: cost: {e}");
            return;
        }
    };
    if !looping("loops: cost", &backend, indirect) {
        return;
    }
    let dev = Device::new(backend.clone(), DeviceConfig::new()).unwrap();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "loop cost on {} by {:?} ({} build, N = {N}, medians of {RUNS}; µs; total = call + \
         sync, call = the host's recording and submission)",
        backend.device_name(),
        backend.loop_emulation(),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    );
    for marks_per_step in [1, 15] {
        let (x, done, marks) = (
            filled(&dev, &[0]),
            filled(&dev, &[0]),
            filled(&dev, &[0; MARKS]),
        );
        let graph = step_with(&dev, &x, &done, &marks, marks_per_step);
        // Each run: x = 0, then the loop (or replay) timed to the end of a sync.
        let run = |limit: u32, max: Option<u32>| {
            graph.set("limit", limit).unwrap();
            let mut counter = None;
            let (mut calls, mut totals) = (Vec::new(), Vec::new());
            for _ in 0..RUNS {
                dev.write_values(S, &x, 0, &[0u32]).unwrap();
                dev.sync(S).unwrap();
                let at = Instant::now();
                match max {
                    Some(max) => counter = Some(dev.replay_until(S, &graph, max).unwrap()),
                    None => dev.replay(S, &graph, N).unwrap(),
                }
                calls.push(at.elapsed());
                dev.sync(S).unwrap();
                totals.push(at.elapsed());
            }
            calls.sort();
            totals.sort();
            let ran = counter.map(|c| word(&dev, &c));
            (us(calls[RUNS / 2]), us(totals[RUNS / 2]), ran)
        };
        let once = run(1, Some(1));
        let stops_at_once = run(1, Some(N));
        let never_stops = run(u32::MAX, Some(N));
        let replayed = run(u32::MAX, None);
        assert_eq!(once.2, Some(1));
        assert_eq!(stops_at_once.2, Some(1));
        assert_eq!(never_stops.2, Some(N));
        assert_eq!(word(&dev, &x), N);
        let n = f64::from(N);
        let off = |a: f64, b: f64| (a - b) / (n - 1.0);
        println!(
            "  {} dispatches an iteration:\n    \
             loop of 1, flag set:            total {:>8.0}, call {:>8.0}\n    \
             loop of N, flag set in the 1st: total {:>8.0}, call {:>8.0}; \
             per iteration after the flag's: total {:.2}, call {:.2}\n    \
             loop of N, flag never set:      total {:>8.0}, call {:>8.0}; \
             per iteration: total {:.2}, call {:.2}\n    \
             replay(g, N):                   total {:>8.0}, call {:>8.0}; \
             per replay: total {:.2}, call {:.2}",
            marks_per_step + 1,
            once.1,
            once.0,
            stops_at_once.1,
            stops_at_once.0,
            off(stops_at_once.1, once.1),
            off(stops_at_once.0, once.0),
            never_stops.1,
            never_stops.0,
            never_stops.1 / n,
            never_stops.0 / n,
            replayed.1,
            replayed.0,
            replayed.1 / n,
            replayed.0 / n,
        );
    }
}
