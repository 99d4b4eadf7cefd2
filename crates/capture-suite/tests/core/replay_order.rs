//! Issue 11, item 4: cross-stream order on the device reaches every replay. A graph that
//! reads a buffer another stream writes between replays waits for that write before each
//! launch of the graph: a wait issued once, before `begin`, orders nothing recorded later,
//! and no wait is ever enqueued on a recording stream (the mock refuses one as CUDA
//! refuses a capture waiting on an event recorded outside it).

use capture_core::Arg;

use crate::{S0, S1, add_one, device, filled, kernels, read, suite_lock};

#[test]
fn a_replay_waits_for_another_streams_write_before_every_launch() {
    let _suite = suite_lock();
    let (dev, _world) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1; 4]);
    let y = dev.alloc(S0, 16).unwrap();
    let g = dev.capture(S0, |d| add_one(d, &k, S0, &x, &y)).unwrap();
    for round in 1..=3u32 {
        // Queued on the other pooled stream; nothing runs until someone waits.
        dev.launch(S1, &k.add_scalar, [1, 1, 1], &[Arg::read_write(&x)], &[10])
            .unwrap();
        dev.replay(S0, &g, 1).unwrap();
        assert_eq!(
            read(&dev, S0, &y).unwrap(),
            vec![1 + 10 * round + 1; 4],
            "replay {round} read x before the other stream's write of it"
        );
    }
}

#[test]
fn a_window_opened_over_another_streams_queued_write_records_no_wait() {
    let _suite = suite_lock();
    let (dev, _world) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1; 4]);
    let y = dev.alloc(S0, 16).unwrap();
    dev.launch(S1, &k.add_scalar, [1, 1, 1], &[Arg::read_write(&x)], &[10])
        .unwrap();
    // `begin` settles the other stream's write on the device before the window opens;
    // the recorded launch then needs no wait (one inside the window would doom it).
    let g = dev.capture(S0, |d| add_one(d, &k, S0, &x, &y)).unwrap();
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &y).unwrap(), vec![12; 4]);
}

/// Issue 35: an eager launch that repeats its stream's uses skips the order tracks
/// (`UseMemo`) only while nothing changed them. Once another stream took a fence of the
/// writer's stream to wait on, the writer's next launches of the same buffer are uses
/// after that fence: the other stream's next launch reading it waits for them again,
/// and so does a host read.
#[test]
fn a_launch_repeated_after_another_stream_waited_for_its_stream_is_waited_for_again() {
    let _suite = suite_lock();
    let (dev, _world) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1; 4]);
    let y = dev.alloc(S1, 16).unwrap();
    let mut expect = 1;
    for round in 0..4u32 {
        // The same launch three times: the second and third repeat the first's uses.
        for _ in 0..3 {
            dev.launch(S0, &k.add_scalar, [1, 1, 1], &[Arg::read_write(&x)], &[10])
                .unwrap();
            expect += 10;
        }
        // Read on the device from the other stream: a wait for a fence of S0. Reading
        // y back runs S1's queue alone, so a missing wait reads x before S0's writes.
        add_one(&dev, &k, S1, &x, &y).unwrap();
        assert_eq!(
            read(&dev, S1, &y).unwrap(),
            vec![expect + 1; 4],
            "round {round}: the other stream's launch read x before S0's last writes"
        );
    }
    assert_eq!(read(&dev, S1, &x).unwrap(), vec![expect; 4]);
}
