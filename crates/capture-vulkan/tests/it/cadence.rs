//! Submission cadence: eager work is submitted every `submit_every` commands without
//! waiting for a fence, and every replay call ends with exactly one submission, so the
//! device starts before the host waits.

use capture_core::{Arg, Builtin, StreamId};
use capture_suite::scenarios::{Harness, N, map, ramp, suite_lock};
use capture_vulkan::{MemoryMode, VulkanOptions};

use crate::support;

const S: StreamId = StreamId::new(0);
const EVERY: u32 = 8;

#[test]
fn eager_launches_past_the_cadence_are_submitted_before_any_wait() {
    let _suite = suite_lock();
    let backend = match support::with(VulkanOptions {
        memory: MemoryMode::HostVisible,
        submit_every: EVERY,
        ..VulkanOptions::from_env()
    }) {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: cadence: {why}");
            return;
        }
    };
    let keep = backend.clone();
    let h = Harness::new(backend).expect("device");
    let x = h.buffer(S, &ramp(0.0)).expect("x");
    let y = h.dev.alloc(S, N * 4).expect("y");
    h.dev.sync(S).expect("settled");
    let before = keep.submissions();
    for _ in 0..EVERY {
        h.add(S, &x, &y, 1.0).expect("launch");
    }
    let at_cadence = keep.submissions();
    assert!(
        at_cadence > before,
        "{EVERY} eager launches (the cadence) were not submitted before any wait"
    );
    h.add(S, &x, &y, 1.0).expect("launch");
    assert_eq!(
        keep.submissions(),
        at_cadence,
        "one launch past the cadence waits for the next batch"
    );
    h.expect(S, &y, &map(&ramp(0.0), |v| v + 1.0));
    drop(h);
    support::assert_no_validation_messages(&keep);
}

#[test]
fn a_replay_call_is_one_submission() {
    let _suite = suite_lock();
    let backend = match support::backend(MemoryMode::HostVisible) {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: cadence: {why}");
            return;
        }
    };
    let keep = backend.clone();
    let h = Harness::new(backend).expect("device");
    let x = h.buffer(S, &ramp(0.0)).expect("x");
    let y = h.buffer(S, &ramp(0.0)).expect("y");
    let g = h
        .dev
        .capture(S, |d| {
            d.launch(
                S,
                h.kernel(Builtin::Axpy),
                [1, 1, 1],
                &[Arg::read(&x), Arg::read_write(&y)],
                &Builtin::Axpy.info(N, 1.0),
            )
        })
        .expect("graph");
    h.dev.sync(S).expect("settled");
    for times in [1, 5] {
        let before = keep.submissions();
        h.dev.replay(S, &g, times).expect("replay");
        assert_eq!(
            keep.submissions(),
            before + 1,
            "a replay of {times} was not one submission"
        );
    }
    // y started as x; warmup added x once, six replays six times.
    h.expect(S, &y, &map(&ramp(0.0), |v| v * 8.0));
    h.dev.drop_graph(g).expect("drop");
    drop(h);
    support::assert_no_validation_messages(&keep);
}
