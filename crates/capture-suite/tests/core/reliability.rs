//! Issue 10's regression tests: one per numbered behaviour of its "What breaks today"
//! list, each asserting what the "Must exist" section asks for. Cross-stream
//! ordering, lifetime behind fences, foreign pins, exact taint at every fence wait,
//! race-free capture state, and the info cache's uploads.
//!
//! An item with several variants runs each on a device of its own and reports every
//! variant that failed, so one test shows the whole item. Where the point at which the
//! core waits on a fence is a design detail, the fault is armed at the next wait and the
//! assertion is on what a user sees: a call or a later read fails, and no read returns
//! bytes as good that the failed stream wrote since its last good fence.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use capture_core::{
    Arg, Buffer, Chain, GraphHandle, KernelHandle, KernelSignature, ServerError, StreamId,
};
use capture_mock::{FaultOp, MockKernel};

use crate::{
    ADD_ONE, Dev, Kernels, S0, S1, World, add_one, bytes_of, device, filled, kernels, read,
};

// ---------------------------------------------------------------------------------------
// Helpers

/// The error and its sources, as a user's report would show it.
fn text(e: &ServerError) -> String {
    Chain(e).to_string()
}

fn is_unwritten<T>(r: &Result<T, ServerError>) -> bool {
    matches!(r, Err(ServerError::Unwritten(_)))
}

/// Moves an armed fault of `op` out of reach: a test that armed it at a wait the core
/// may or may not make stops it from firing somewhere else later.
fn disarm(world: &World, op: FaultOp) {
    world.fail(op, u32::MAX);
}

fn panic_text(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// Runs every variant of issue 10's `item`, each on its own device, and fails naming
/// each variant that failed and how.
fn variants(item: u32, cases: &[(&str, fn())]) {
    let mut failed = Vec::new();
    for (name, case) in cases {
        if let Err(payload) = catch_unwind(*case) {
            failed.push(format!("  {name}: {}", panic_text(payload.as_ref())));
        }
    }
    assert!(
        failed.is_empty(),
        "issue 10, item {item}: {} of {} variants failed:\n{}",
        failed.len(),
        cases.len(),
        failed.join("\n")
    );
}

/// `buf[..] = info[0]`, elementwise u32. Arguments: buf (written).
const FILL: MockKernel = MockKernel {
    name: "fill_u32",
    signature: KernelSignature::new(1, 1),
    f: |b, info| {
        let v = info.first().copied().unwrap_or(0) as u32;
        for c in b[0].chunks_exact_mut(4) {
            c.copy_from_slice(&v.to_le_bytes());
        }
    },
};

/// Launches `add_scalar` (`buf += k`) on `stream`.
fn add_scalar(
    dev: &Dev,
    k: &Kernels,
    stream: StreamId,
    buf: &Buffer,
    scalar: u64,
) -> Result<(), ServerError> {
    dev.launch(
        stream,
        &k.add_scalar,
        [1, 1, 1],
        &[Arg::read_write(buf)],
        &[scalar],
    )
}

// ---------------------------------------------------------------------------------------
// Item 1: cross-stream ordering

fn item01_a_read_on_the_owner_waits_for_another_streams_launch() {
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1, 2, 3, 4]);
    let y = dev.alloc(S1, 16).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap();
    assert_eq!(
        read(&dev, S1, &y).unwrap(),
        vec![2, 3, 4, 5],
        "read(S1, y) after add_one(S0, x -> y)"
    );
}

fn item01_a_launch_on_its_own_buffers_waits_for_another_streams_write_of_them() {
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1, 2, 3, 4]);
    let y = dev.alloc(S1, 16).unwrap();
    let z = dev.alloc(S1, 16).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap();
    add_one(&dev, &k, S1, &y, &z).unwrap();
    assert_eq!(
        read(&dev, S1, &z).unwrap(),
        vec![3, 4, 5, 6],
        "add_one(S0, x -> y@S1); add_one(S1, y -> z); read(S1, z)"
    );
}

fn item01_a_launch_waits_for_a_recording_streams_warmup_work() {
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S1, &[1, 2, 3, 4]);
    dev.sync(S1).unwrap();
    let y = dev.alloc(S1, 16).unwrap();
    let z = dev.alloc(S0, 16).unwrap();
    dev.prepare(S1).unwrap();
    add_one(&dev, &k, S1, &x, &y).unwrap(); // warmup: queued, not run
    dev.begin(S1).unwrap();
    add_one(&dev, &k, S1, &x, &y).unwrap(); // recorded
    // S0 reads y, which S1's warmup wrote before its window opened.
    add_one(&dev, &k, S0, &y, &z).unwrap();
    assert_eq!(
        read(&dev, S0, &z).unwrap(),
        vec![3, 4, 5, 6],
        "S0's launch must see the value S1's warmup wrote"
    );
    dev.end(S1)
        .expect("S0's work did not invalidate S1's capture");
}

/// Issue 10, item 1: work on one stream is ordered after another stream's writes of its buffers.
#[test]
fn work_on_one_stream_is_ordered_after_another_streams_writes() {
    let _g = crate::suite_lock();
    variants(
        1,
        &[
            (
                "read on the owner after another stream's launch",
                item01_a_read_on_the_owner_waits_for_another_streams_launch,
            ),
            (
                "launch on its own buffers after another stream wrote them",
                item01_a_launch_on_its_own_buffers_waits_for_another_streams_write_of_them,
            ),
            (
                "launch after a recording stream's warmup",
                item01_a_launch_waits_for_a_recording_streams_warmup_work,
            ),
        ],
    );
}

// ---------------------------------------------------------------------------------------
// Item 2: lifetime behind fences

fn item02_same_stream() {
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1; 4]);
    dev.sync(S0).unwrap();
    let y = dev.alloc(S0, 16).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap(); // queued: reads x when it runs
    drop(x);
    let x2 = dev.alloc(S0, 16).unwrap();
    dev.write(S0, &x2, 0, bytes_of(&[100; 4])).unwrap();
    assert_eq!(
        read(&dev, S0, &y).unwrap(),
        vec![2; 4],
        "the launch read x's original bytes"
    );
    assert_eq!(read(&dev, S0, &x2).unwrap(), vec![100; 4]);
}

fn item02_across_streams() {
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S1, &[1; 4]);
    dev.sync(S1).unwrap();
    let y = dev.alloc(S0, 16).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap(); // queued on S0: reads x@S1 when it runs
    drop(x);
    let x2 = dev.alloc(S1, 16).unwrap();
    dev.write(S1, &x2, 0, bytes_of(&[100; 4])).unwrap();
    assert_eq!(
        read(&dev, S0, &y).unwrap(),
        vec![2; 4],
        "the launch read x's original bytes"
    );
    assert_eq!(read(&dev, S1, &x2).unwrap(), vec![100; 4]);
}

fn item02_cleanup_between() {
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1; 4]);
    dev.sync(S0).unwrap();
    let y = dev.alloc(S1, 16).unwrap();
    add_one(&dev, &k, S1, &x, &y).unwrap(); // queued on S1: reads x@S0 when it runs
    drop(x);
    dev.cleanup().expect("cleanup");
    let x2 = dev.alloc(S0, 16).unwrap();
    dev.write(S0, &x2, 0, bytes_of(&[100; 4])).unwrap();
    assert_eq!(
        read(&dev, S1, &y).unwrap(),
        vec![2; 4],
        "the launch read x's original bytes"
    );
}

/// Issue 10, item 2: a buffer dropped under queued work is freed only behind its fences.
#[test]
fn a_buffer_dropped_under_queued_work_is_freed_only_behind_its_fences() {
    let _g = crate::suite_lock();
    variants(
        2,
        &[
            ("same stream", item02_same_stream),
            ("across streams", item02_across_streams),
            ("cleanup in between", item02_cleanup_between),
        ],
    );
}

// ---------------------------------------------------------------------------------------
// Item 3: graphs pin across streams

/// When the sentinel `z@S1` is allocated: inside the window right after the drop (the
/// pool may hand out a free slice while another stream records; it only may not grow),
/// or after the window sealed.
#[derive(Clone, Copy, PartialEq)]
enum Sentinel {
    InWindow,
    AfterEnd,
}

/// Allocates the sentinel where `when` says: inside the window, a refusal (a typed
/// error) is allowed, and the sentinel is then allocated after `end`.
fn sentinel(dev: &Dev, when: Sentinel, now: Sentinel) -> Option<Buffer> {
    (when == now)
        .then(|| dev.alloc(S1, 16))
        .and_then(Result::ok)
}

fn item03_dropped_foreign_output(when: Sentinel) {
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1; 4]);
    dev.sync(S0).unwrap();
    let w = dev.alloc(S1, 16).unwrap();
    dev.prepare(S0).unwrap();
    add_one(&dev, &k, S0, &x, &w).unwrap();
    dev.begin(S0).unwrap();
    add_one(&dev, &k, S0, &x, &w).unwrap();
    drop(w);
    let z = sentinel(&dev, when, Sentinel::InWindow);
    let g = dev.end(S0).expect("seals");
    let z = z.unwrap_or_else(|| dev.alloc(S1, 16).unwrap());
    dev.write(S1, &z, 0, bytes_of(&[7; 4])).unwrap();
    dev.sync(S1).unwrap();
    if let Err(e) = dev.replay(S0, &g, 1) {
        panic!("replay: {}", text(&e));
    }
    dev.sync(S0).unwrap();
    assert_eq!(
        read(&dev, S1, &z).unwrap(),
        vec![7; 4],
        "the replay wrote into memory allocated after the output's handle was dropped"
    );
}

fn item03_dropped_foreign_input(when: Sentinel) {
    let (dev, _) = device();
    let k = kernels(&dev);
    let w = filled(&dev, S1, &[3; 4]);
    dev.sync(S1).unwrap();
    let y = dev.alloc(S0, 16).unwrap();
    dev.prepare(S0).unwrap();
    add_one(&dev, &k, S0, &w, &y).unwrap();
    dev.begin(S0).unwrap();
    add_one(&dev, &k, S0, &w, &y).unwrap();
    drop(w);
    let z = sentinel(&dev, when, Sentinel::InWindow);
    let g = dev.end(S0).expect("seals");
    let z = z.unwrap_or_else(|| dev.alloc(S1, 16).unwrap());
    dev.write(S1, &z, 0, bytes_of(&[9; 4])).unwrap();
    dev.sync(S1).unwrap();
    for i in 0..3 {
        if let Err(e) = dev.replay(S0, &g, 1) {
            panic!(
                "replay {i} after the input handle was dropped: {}",
                text(&e)
            );
        }
    }
    assert_eq!(read(&dev, S0, &y).unwrap(), vec![4; 4], "y = w + 1");
    assert_eq!(
        read(&dev, S1, &z).unwrap(),
        vec![9; 4],
        "z is its own memory"
    );
}

fn item03_output_sentinel_in_window() {
    item03_dropped_foreign_output(Sentinel::InWindow);
}

fn item03_output_sentinel_after_end() {
    item03_dropped_foreign_output(Sentinel::AfterEnd);
}

fn item03_input_sentinel_in_window() {
    item03_dropped_foreign_input(Sentinel::InWindow);
}

fn item03_input_sentinel_after_end() {
    item03_dropped_foreign_input(Sentinel::AfterEnd);
}

/// Issue 10, item 3: a graph pins another stream's buffer dropped inside its window.
#[test]
fn a_graph_pins_another_streams_buffer_dropped_inside_its_window() {
    let _g = crate::suite_lock();
    variants(
        3,
        &[
            (
                "dropped foreign output, sentinel allocated in the window",
                item03_output_sentinel_in_window,
            ),
            (
                "dropped foreign output, sentinel allocated after end",
                item03_output_sentinel_after_end,
            ),
            (
                "dropped foreign input, sentinel allocated in the window",
                item03_input_sentinel_in_window,
            ),
            (
                "dropped foreign input, sentinel allocated after end",
                item03_input_sentinel_after_end,
            ),
        ],
    );
}

// ---------------------------------------------------------------------------------------
// Item 4: exact taint at every fence-wait site

/// What a site's operation gets: `b` a settled buffer of S1, `y` a fresh buffer of S0.
struct Site<'a> {
    dev: &'a Dev,
    k: &'a Kernels,
    b: &'a Buffer,
    y: &'a Buffer,
}

/// Both streams hold a write since their last good fence (`a` on S0, `c` on S1). `op`
/// runs with an asynchronous error armed at the next fence wait, wherever it comes (in
/// `op`, or at the reads after it). Whichever stream's fence reported it, that stream's
/// write must read back as `Unwritten` from then on; no read may return other bytes
/// than were written.
fn async_error_at(op: fn(&Site<'_>)) {
    let (dev, world) = device();
    let k = kernels(&dev);
    let b = filled(&dev, S1, &[5; 4]);
    let y = dev.alloc(S0, 16).unwrap();
    let a = dev.alloc(S0, 16).unwrap();
    let c = dev.alloc(S1, 16).unwrap();
    dev.sync(S0).unwrap();
    dev.sync(S1).unwrap();
    dev.write(S0, &a, 0, bytes_of(&[1; 4])).unwrap();
    dev.write(S1, &c, 0, bytes_of(&[2; 4])).unwrap();
    let waits = world.calls(FaultOp::AsyncAtFence);
    world.fail(FaultOp::AsyncAtFence, 1);
    op(&Site {
        dev: &dev,
        k: &k,
        b: &b,
        y: &y,
    });
    let first = [read(&dev, S1, &c), read(&dev, S0, &a)];
    let second = [read(&dev, S1, &c), read(&dev, S0, &a)];
    assert!(
        world.calls(FaultOp::AsyncAtFence) > waits,
        "no fence was waited on: the armed asynchronous error never fired"
    );
    for (r, want) in first.iter().chain(&second).zip([2, 1, 2, 1]) {
        if let Ok(v) = r {
            assert_eq!(v, &vec![want; 4], "a read returned bytes nothing wrote");
        }
    }
    assert!(
        is_unwritten(&second[0]) || is_unwritten(&second[1]),
        "a fence reported an asynchronous error, yet both streams' writes since their last \
         good fence read back as good: c@S1 {:?}, a@S0 {:?}",
        second[0].as_ref().map_err(text),
        second[1].as_ref().map_err(text),
    );
}

fn item04_write_hand_over() {
    async_error_at(|s| {
        let _ = s.dev.write(S0, s.b, 0, bytes_of(&[9; 4]));
    });
}

fn item04_read_hand_over() {
    async_error_at(|s| {
        let _ = s.dev.read(S0, s.b);
    });
}

fn item04_cross_stream_launch() {
    async_error_at(|s| {
        let _ = add_one(s.dev, s.k, S0, s.b, s.y);
    });
}

fn item04_begin_wait() {
    async_error_at(|s| {
        s.dev.prepare(S0).unwrap();
        let _ = s.dev.begin(S0);
        s.dev.abort(S0).unwrap();
    });
}

/// Issue 10, item 4: an asynchronous error at any fence wait claims what that stream wrote.
#[test]
fn an_asynchronous_error_at_any_fence_wait_claims_what_that_stream_wrote() {
    let _g = crate::suite_lock();
    variants(
        4,
        &[
            ("write hand-over", item04_write_hand_over),
            ("read hand-over", item04_read_hand_over),
            ("cross-stream launch", item04_cross_stream_launch),
            ("begin's wait for the other stream", item04_begin_wait),
        ],
    );
}

// ---------------------------------------------------------------------------------------
// Item 5

/// Issue 10, item 5: a freed range does not cancel an asynchronous error's other claims.
#[test]
fn an_asynchronous_error_still_claims_the_other_ranges_when_one_was_freed() {
    let _g = crate::suite_lock();
    let (dev, world) = device();
    let a = dev.alloc(S0, 16).unwrap();
    let c = dev.alloc(S0, 16).unwrap();
    dev.sync(S0).unwrap();
    dev.write(S0, &a, 0, bytes_of(&[1; 4])).unwrap();
    dev.write(S0, &c, 0, bytes_of(&[2; 4])).unwrap();
    drop(c);
    // Another allocation: the pool takes c back and the ledger forgets it.
    let _other = dev.alloc(S0, 64).unwrap();
    world.fail(FaultOp::AsyncAtFence, 1);
    let err = dev.sync(S0).unwrap_err();
    assert!(
        text(&err).contains("injected fault in asynchronous error at fence"),
        "{err}"
    );
    let r = read(&dev, S0, &a);
    assert!(
        is_unwritten(&r),
        "a was written since the last good fence, yet reads {:?}",
        r.map_err(|e| text(&e))
    );
}

// ---------------------------------------------------------------------------------------
// Item 6: partly claimed inputs

fn fill_half(dev: &Dev, fill: &KernelHandle, x: &Buffer) -> Result<(), ServerError> {
    dev.launch(S0, fill, [1, 1, 1], &[Arg::write(x).range(0, 32)], &[5])
}

fn item06_replay() {
    let (dev, world) = device();
    let k = kernels(&dev);
    let fill = dev.kernel(FILL);
    let x = filled(&dev, S0, &[1; 16]);
    let y = dev.alloc(S0, 64).unwrap();
    let g = dev
        .capture(S0, |d| {
            fill_half(d, &fill, &x)?;
            add_one(d, &k, S0, &x, &y)
        })
        .unwrap();
    assert_eq!(
        read(&dev, S0, &y).unwrap(),
        [[6; 8], [2; 8]].concat(),
        "warmup's result"
    );
    // Claim x[32..64): a host write of it that fails.
    world.fail(FaultOp::Copy, 1);
    dev.write(S0, &x, 32, bytes_of(&[9; 8])).unwrap_err();
    let replay = dev.replay(S0, &g, 1);
    assert!(
        is_unwritten(&replay),
        "the replay reads the claimed half of x, yet returned {:?}",
        replay.map_err(|e| text(&e))
    );
    let r = read(&dev, S0, &y);
    assert!(
        is_unwritten(&r),
        "y was computed from claimed bytes, yet reads {:?}",
        r.map_err(|e| text(&e))
    );
}

fn item06_in_window() {
    let (dev, world) = device();
    let k = kernels(&dev);
    let fill = dev.kernel(FILL);
    let x = filled(&dev, S0, &[1; 16]);
    let y = dev.alloc(S0, 64).unwrap();
    dev.prepare(S0).unwrap();
    fill_half(&dev, &fill, &x).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap();
    // Claim x[32..64) before the window opens.
    world.fail(FaultOp::Copy, 1);
    dev.write(S0, &x, 32, bytes_of(&[9; 8])).unwrap_err();
    dev.begin(S0).unwrap();
    fill_half(&dev, &fill, &x).unwrap();
    let _ = add_one(&dev, &k, S0, &x, &y);
    let end = dev.end(S0);
    assert!(
        end.is_err(),
        "the window recorded a launch over a claimed input, yet sealed"
    );
}

/// Issue 10, item 6: a replay or recorded launch over a partly claimed input is skipped.
#[test]
fn a_replay_or_recorded_launch_over_a_partly_claimed_input_is_skipped() {
    let _g = crate::suite_lock();
    variants(
        6,
        &[
            ("replay", item06_replay),
            ("recorded launch", item06_in_window),
        ],
    );
}

// ---------------------------------------------------------------------------------------
// Item 7

/// A launch using S1's `x` fails inside S0's window with `fault`. Today the fence wait
/// for S1 happens in the launch itself; were it moved to the device, the launch would
/// succeed and there would be nothing to doom, so the assertions are on the failing case.
fn item07_with(fault: FaultOp) {
    let (dev, world) = device();
    let k = kernels(&dev);
    let x = dev.alloc(S1, 16).unwrap();
    dev.write(S1, &x, 0, bytes_of(&[1; 4])).unwrap();
    let y = dev.alloc(S0, 16).unwrap();
    let z = dev.alloc(S0, 16).unwrap();
    dev.prepare(S0).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap();
    add_one(&dev, &k, S0, &x, &z).unwrap();
    dev.begin(S0).unwrap();
    // The window records a write of y, then a launch using S1's x fails.
    add_one(&dev, &k, S0, &x, &y).unwrap();
    world.fail(fault, 1);
    let launch = add_one(&dev, &k, S0, &x, &z);
    disarm(&world, fault);
    let end = dev.end(S0);
    if let Err(e) = &launch {
        assert!(
            end.is_err(),
            "a launch failed inside the window ({}), yet end sealed a graph",
            text(e)
        );
        let r = read(&dev, S0, &y);
        assert!(
            r.is_err(),
            "the doomed window's written range y reads as good: {:?}",
            r.map_err(|e| text(&e))
        );
    }
}

fn item07_fence_wait() {
    item07_with(FaultOp::FenceWait);
}

fn item07_launch() {
    item07_with(FaultOp::Launch);
}

/// Issue 10, item 7: a launch that fails inside a window dooms it and claims its writes.
#[test]
fn a_launch_that_fails_inside_a_window_dooms_it_and_claims_what_it_wrote() {
    let _g = crate::suite_lock();
    variants(
        7,
        &[
            ("cross-stream fence wait fails", item07_fence_wait),
            ("cross-stream launch refused", item07_launch),
        ],
    );
}

// ---------------------------------------------------------------------------------------
// Item 8: race-free capture state

/// Captures on S0 against another thread's work on S1.
const RACE_ROUNDS: usize = 8;

/// Reads eight buffers and computes nothing: a launch that binds as much as one can.
const SINK: MockKernel = MockKernel {
    name: "sink8",
    signature: KernelSignature::new(8, 0),
    f: |_, _| {},
};

/// Captures on S0 `rounds` times while `other` runs on another thread with two buffers
/// of S1 (allocated before either starts), until told it is `done`. Returns the
/// captures' errors. Each capture binds a thousand distinct ranges, so closing its
/// window takes longer than a scheduler's time slice: a decision on another stream that
/// races the close lands inside it nearly every time, even on one busy core, and a dozen
/// rounds show the race where a hundred quick ones might not.
fn captures_on_s0_while(
    other: impl Fn(&Dev, &Buffer, &Buffer, &AtomicBool) + Sync,
    rounds: usize,
) -> Vec<String> {
    const LAUNCHES: usize = 128;
    let (dev, _) = device();
    let sink = dev.kernel(SINK);
    let big = filled(&dev, S0, &vec![1; LAUNCHES * 8 * 4]);
    let args: Vec<Vec<Arg>> = (0..LAUNCHES)
        .map(|l| {
            (0..8)
                .map(|i| Arg::read(&big).range(((l * 8 + i) * 16) as u64, 16))
                .collect()
        })
        .collect();
    let run = |d: &Dev| {
        args.iter()
            .try_for_each(|a| d.launch(S0, &sink, [1, 1, 1], a, &[]))
    };
    run(&dev).unwrap();
    let x1 = filled(&dev, S1, &[1; 4]);
    let y1 = dev.alloc(S1, 16).unwrap();
    dev.sync(S0).unwrap();
    dev.sync(S1).unwrap();
    let done = AtomicBool::new(false);
    let mut failures = Vec::new();
    std::thread::scope(|s| {
        s.spawn(|| other(&dev, &x1, &y1, &done));
        for _ in 0..rounds {
            match dev.capture(S0, |d| run(d)) {
                Ok(g) => dev.drop_graph(g).unwrap(),
                Err(e) => failures.push(text(&e)),
            }
        }
        done.store(true, Ordering::SeqCst);
    });
    failures
}

fn item08_kernel_loads() {
    let failures = captures_on_s0_while(
        |dev, x, y, done| {
            let mut i = 0u32;
            while !done.load(Ordering::SeqCst) {
                // A fresh registration: its first launch loads it.
                let fresh = dev.kernel(ADD_ONE);
                let _ = dev.launch(S1, &fresh, [1, 1, 1], &[Arg::read(x), Arg::write(y)], &[]);
                i += 1;
                if i.is_multiple_of(16) {
                    let _ = dev.sync(S1);
                }
            }
        },
        RACE_ROUNDS,
    );
    let invalidated: Vec<_> = failures
        .iter()
        .filter(|t| t.contains("invalidated"))
        .collect();
    assert!(
        invalidated.is_empty(),
        "{} of {RACE_ROUNDS} captures on S0 were invalidated by kernel loads on S1, e.g. {}",
        invalidated.len(),
        invalidated[0]
    );
}

fn item08_pool_growth() {
    const MIB: u64 = 1 << 20;
    let failures = captures_on_s0_while(
        |dev, _, _, done| {
            let mut held = Vec::new();
            while !done.load(Ordering::SeqCst) {
                if dev.captures().recording().is_empty() {
                    std::thread::yield_now();
                    continue;
                }
                // S0 records: allocations are refused until its window closes, so the
                // first that succeeds grows S1's pool right after (every slice is held:
                // each allocation needs a page of its own).
                while !done.load(Ordering::SeqCst) {
                    if let Ok(b) = dev.alloc(S1, MIB) {
                        held.push(b);
                        break;
                    }
                }
                if held.len() >= 8 {
                    // Give the pages back (cleanup is refused while S0 records), so the
                    // next allocations must grow the pool again.
                    held.clear();
                    while !done.load(Ordering::SeqCst) && dev.cleanup().is_err() {
                        std::thread::yield_now();
                    }
                }
            }
        },
        RACE_ROUNDS,
    );
    assert!(
        failures.is_empty(),
        "{} of {RACE_ROUNDS} captures on S0 failed while S1's pool grew, e.g. {}",
        failures.len(),
        failures[0]
    );
}

fn item08_two_captures() {
    // Each thread's captures: today one in twenty to one in fifteen fails (on one core or
    // two), so six hundred make a pass by luck vanishingly unlikely.
    const ROUNDS: usize = 300;
    let (dev, _) = device();
    let k = kernels(&dev);
    let bufs: Vec<_> = [S0, S1]
        .into_iter()
        .map(|s| {
            let x = filled(&dev, s, &[1; 4]);
            let y = dev.alloc(s, 16).unwrap();
            add_one(&dev, &k, s, &x, &y).unwrap();
            dev.sync(s).unwrap();
            (s, x, y)
        })
        .collect();
    let failures: Vec<String> = std::thread::scope(|sc| {
        let handles: Vec<_> = bufs
            .iter()
            .map(|(s, x, y)| {
                let (dev, k) = (&dev, &k);
                sc.spawn(move || {
                    let mut failures = Vec::new();
                    for _ in 0..ROUNDS {
                        match dev.capture(*s, |d| add_one(d, k, *s, x, y)) {
                            Ok(g) => dev.drop_graph(g).unwrap(),
                            Err(e) => failures.push(format!("{s}: {}", text(&e))),
                        }
                    }
                    failures
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert!(
        failures.is_empty(),
        "{} of {} concurrent captures failed, e.g. {}",
        failures.len(),
        2 * ROUNDS,
        failures[0]
    );
}

/// Issue 10, item 8: captures survive loads, growth and captures on another pooled stream.
#[test]
fn captures_survive_loads_growth_and_captures_on_another_pooled_stream() {
    let _g = crate::suite_lock();
    variants(
        8,
        &[
            ("fresh kernels loaded on S1", item08_kernel_loads),
            ("S1's pool grown", item08_pool_growth),
            ("two threads capturing at once", item08_two_captures),
        ],
    );
}

// ---------------------------------------------------------------------------------------
// Item 9

/// `begin` on S0 with `fault` armed at its next call: today the fence wait for S1's
/// queued work (FenceWait) or the driver's begin (Begin). Should a redesign not wait at
/// `begin`, the begin succeeds and only the full capture after it is checked.
fn item09_with(fault: FaultOp) {
    let (dev, world) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1; 4]);
    let y = dev.alloc(S0, 16).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap();
    dev.sync(S0).unwrap();
    // S1 has queued work: begin on S0 has something to wait for.
    let b = dev.alloc(S1, 16).unwrap();
    dev.write(S1, &b, 0, bytes_of(&[3; 4])).unwrap();
    dev.prepare(S0).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap();
    world.fail(fault, 1);
    let begin = dev.begin(S0);
    disarm(&world, fault);
    match begin {
        Err(e) => {
            assert!(
                dev.captures().recording().is_empty(),
                "a failed begin left S0 recording"
            );
            if let Err(again) = dev.prepare(S0) {
                panic!(
                    "begin failed ({}) and prepare is refused: {}",
                    text(&e),
                    text(&again)
                );
            }
            add_one(&dev, &k, S0, &x, &y).unwrap();
            dev.begin(S0).expect("begin again");
            add_one(&dev, &k, S0, &x, &y).unwrap();
            dev.end(S0).expect("seals");
        }
        Ok(()) => dev.abort(S0).unwrap(),
    }
    let g = dev
        .capture(S0, |d| add_one(d, &k, S0, &x, &y))
        .expect("a full capture after the failed begin");
    dev.write(S0, &x, 0, bytes_of(&[10; 4])).unwrap();
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &y).unwrap(), vec![11; 4]);
}

fn item09_fence_wait() {
    item09_with(FaultOp::FenceWait);
}

fn item09_begin_fault() {
    item09_with(FaultOp::Begin);
}

/// Issue 10, item 9: a begin that fails in its wait for another stream unwinds to no capture.
#[test]
fn a_begin_that_fails_waiting_for_another_stream_unwinds_so_prepare_works_again() {
    let _g = crate::suite_lock();
    variants(
        9,
        &[
            ("fence wait for the other stream", item09_fence_wait),
            ("driver refuses begin", item09_begin_fault),
        ],
    );
}

// ---------------------------------------------------------------------------------------
// Item 10

/// Issue 10, item 10: a mock kernel that panics leaves its output unreadable, read after read.
#[test]
fn a_kernel_that_panics_leaves_its_output_unreadable() {
    let _g = crate::suite_lock();
    const BOOM: MockKernel = MockKernel {
        name: "boom",
        signature: KernelSignature::new(2, 0),
        f: |_, _| std::panic::resume_unwind(Box::new("a kernel panicked")),
    };
    let (dev, _) = device();
    let boom = dev.kernel(BOOM);
    let x = filled(&dev, S0, &[1; 4]);
    let y = dev.alloc(S0, 16).unwrap();
    dev.launch(S0, &boom, [1, 1, 1], &[Arg::read(&x), Arg::write(&y)], &[])
        .unwrap();
    let first = catch_unwind(AssertUnwindSafe(|| read(&dev, S0, &y)));
    if let Ok(Ok(v)) = &first {
        panic!("the first read of a panicked kernel's output returned {v:?}");
    }
    let second = catch_unwind(AssertUnwindSafe(|| read(&dev, S0, &y)));
    match second {
        Err(p) => panic!("the second read panicked: {}", panic_text(p.as_ref())),
        Ok(r) => assert!(
            is_unwritten(&r),
            "the second read of a panicked kernel's output returned {:?}",
            r.map_err(|e| text(&e))
        ),
    }
}

// ---------------------------------------------------------------------------------------
// Item 11

static BLOCK_STARTED: AtomicBool = AtomicBool::new(false);
static BLOCK_RELEASE: AtomicBool = AtomicBool::new(false);
static BLOCK_TIMED_OUT: AtomicBool = AtomicBool::new(false);

/// Runs until the test releases it (or two seconds pass): a fence wait that runs it
/// stays inside the driver's work for as long as the test wants.
const BLOCK: MockKernel = MockKernel {
    name: "block",
    signature: KernelSignature::new(1, 0),
    f: |_, _| {
        BLOCK_STARTED.store(true, Ordering::SeqCst);
        let start = Instant::now();
        while !BLOCK_RELEASE.load(Ordering::SeqCst) {
            if start.elapsed() > Duration::from_secs(2) {
                BLOCK_TIMED_OUT.store(true, Ordering::SeqCst);
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    },
};

/// Issue 10, item 11: end holds no graph registry across the driver's instantiate and waits.
#[test]
fn ending_a_capture_does_not_hold_the_graph_registry_across_the_drivers_work() {
    let _g = crate::suite_lock();
    BLOCK_STARTED.store(false, Ordering::SeqCst);
    BLOCK_RELEASE.store(false, Ordering::SeqCst);
    BLOCK_TIMED_OUT.store(false, Ordering::SeqCst);
    let (dev, _) = device();
    let dev = Arc::new(dev);
    let k = kernels(&dev);
    let block = dev.kernel(BLOCK);
    let x0 = filled(&dev, S0, &[1; 4]);
    let y0 = dev.alloc(S0, 16).unwrap();
    let t0 = filled(&dev, S0, &[0; 4]);
    let x1 = filled(&dev, S1, &[1; 4]);
    let y1 = dev.alloc(S1, 16).unwrap();
    let old = dev.capture(S0, |d| add_one(d, &k, S0, &x0, &y0)).unwrap();
    let g1 = dev.capture(S1, |d| add_one(d, &k, S1, &x1, &y1)).unwrap();
    let spare1 = dev.capture(S1, |d| add_one(d, &k, S1, &x1, &y1)).unwrap();
    dev.sync(S0).unwrap();
    dev.sync(S1).unwrap();

    // Phase 1, deterministic: the window's close on S0 waits on a fence that runs
    // `block`, which returns only once another thread's replay, ledger query and graph
    // drop on S1 went through (or two seconds passed). `block` is queued before the
    // window with S0's drop queue empty, so today it runs in end's drain; wherever a
    // redesign runs it, those calls must not wait for it.
    let main_done = AtomicBool::new(false);
    let other = std::thread::scope(|s| {
        let other = s.spawn(|| {
            let start = Instant::now();
            while !BLOCK_STARTED.load(Ordering::SeqCst)
                && !main_done.load(Ordering::SeqCst)
                && start.elapsed() < Duration::from_secs(3)
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            let replay = dev.replay(S1, &g1, 1);
            let ledger = dev.graph(&g1);
            let dropped = dev.drop_graph(spare1);
            BLOCK_RELEASE.store(true, Ordering::SeqCst);
            (replay, ledger.is_some(), dropped)
        });
        dev.launch(S0, &block, [1, 1, 1], &[Arg::read_write(&t0)], &[])
            .unwrap();
        dev.prepare(S0).unwrap();
        add_one(&dev, &k, S0, &x0, &y0).unwrap();
        dev.begin(S0).unwrap();
        add_one(&dev, &k, S0, &x0, &y0).unwrap();
        // Something for end's drain to wait for.
        dev.drop_graph(old).unwrap();
        let end = dev.end(S0);
        main_done.store(true, Ordering::SeqCst);
        assert!(end.is_ok(), "{:?}", end.map_err(|e| text(&e)));
        other.join().unwrap()
    });
    assert!(other.0.is_ok(), "replay on S1: {:?}", other.0);
    assert!(other.1, "g1 is live");
    assert!(other.2.is_ok(), "drop_graph on S1: {:?}", other.2);
    assert!(
        !BLOCK_TIMED_OUT.load(Ordering::SeqCst),
        "a replay, ledger query and graph drop on S1 stalled until S0's end finished its \
         fence wait: end holds the graph registry across the driver's work"
    );

    // Phase 2, liveness: ends on S0 in a loop against replays, drops and reports on S1.
    let (tx, rx) = mpsc::channel();
    let worker = {
        let dev = Arc::clone(&dev);
        let (x0, y0) = (x0.clone(), y0.clone());
        let k = Kernels {
            add_one: k.add_one,
            add_scalar: k.add_scalar,
            add: k.add,
        };
        std::thread::spawn(move || {
            let done = AtomicBool::new(false);
            let (graphs_tx, graphs_rx) = mpsc::channel::<GraphHandle>();
            std::thread::scope(|s| {
                s.spawn(|| {
                    let graphs_rx = graphs_rx; // moved in: a receiver is not shared
                    while !done.load(Ordering::SeqCst) {
                        dev.replay(S1, &g1, 1).unwrap();
                        dev.sync(S1).unwrap();
                        let _ = dev.memory_report();
                        let _ = dev.graph(&g1);
                        while let Ok(g) = graphs_rx.try_recv() {
                            dev.drop_graph(g).unwrap();
                        }
                    }
                });
                for _ in 0..50 {
                    if let Ok(g) = dev.capture(S0, |d| add_one(d, &k, S0, &x0, &y0)) {
                        graphs_tx.send(g).unwrap();
                    }
                }
                done.store(true, Ordering::SeqCst);
            });
            let _ = tx.send(());
        })
    };
    assert!(
        rx.recv_timeout(Duration::from_secs(10)).is_ok(),
        "captures on S0 against replays, drops and reports on S1 did not finish in 10 s"
    );
    worker.join().unwrap();
}

// ---------------------------------------------------------------------------------------
// Item 12

/// Records a launch with info words the window is the first to use, then `close`s the
/// window; an eager launch with the same words must then compute with them.
fn item12_with(close: fn(&Dev) -> Option<GraphHandle>) {
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1; 4]);
    add_scalar(&dev, &k, S0, &x, 5).unwrap();
    dev.sync(S0).unwrap();
    dev.prepare(S0).unwrap();
    // Warmup: a write and an allocation, so both persistent pools have room for the
    // window's new info entry and its staging.
    dev.write(S0, &x, 0, bytes_of(&[1; 4])).unwrap();
    let _scratch = dev.alloc(S0, 64).unwrap();
    add_scalar(&dev, &k, S0, &x, 5).unwrap();
    dev.begin(S0).unwrap();
    add_scalar(&dev, &k, S0, &x, 77).unwrap(); // new words: recorded with their upload
    let graph = close(&dev);
    let y = filled(&dev, S0, &[1; 4]);
    add_scalar(&dev, &k, S0, &y, 77).unwrap();
    assert_eq!(
        read(&dev, S0, &y).unwrap(),
        vec![78; 4],
        "the eager launch was served an info entry whose upload never ran"
    );
    if let Some(g) = graph {
        dev.replay(S0, &g, 1).unwrap();
        dev.write(S0, &y, 0, bytes_of(&[1; 4])).unwrap();
        add_scalar(&dev, &k, S0, &y, 77).unwrap();
        assert_eq!(read(&dev, S0, &y).unwrap(), vec![78; 4], "after a replay");
    }
}

fn item12_abort() {
    item12_with(|dev| {
        dev.abort(S0).unwrap();
        None
    });
}

fn item12_never_replayed() {
    item12_with(|dev| Some(dev.end(S0).expect("seals")));
}

/// Issue 10, item 12: an info entry a window created is never served before its upload ran.
#[test]
fn an_info_entry_created_in_a_window_is_not_served_before_its_upload_ran() {
    let _g = crate::suite_lock();
    variants(
        12,
        &[
            ("window aborted", item12_abort),
            ("graph sealed, never replayed", item12_never_replayed),
        ],
    );
}
