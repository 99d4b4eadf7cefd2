//! One test (or more) per rule of `docs/rules.md`, named after the rule. Each fails when the
//! rule's guard (named in docs/rule-guards.md) is removed.

use capture_core::{Arg, Chain, DeviceConfig, FlushingPolicy, MemoryConfig, ServerError, Subject};
use capture_mock::FaultOp;

use crate::{S0, S1, S2, add_one, bytes_of, device, device_with, filled, kernels, read};

const MIB: u64 = 1 << 20;

/// The error and its sources, as a user's report would show it.
fn text(e: &ServerError) -> String {
    Chain(e).to_string()
}

fn is_graph_state(e: &ServerError) -> bool {
    matches!(e, ServerError::GraphState { .. })
}

#[test]
fn rule_01_out_of_order_lifecycle_calls_are_refused_and_change_nothing() {
    let _suite = crate::suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1, 2]);
    let y = dev.alloc(S0, 8).unwrap();
    let before = dev.memory_report();
    // begin without prepare, end with nothing open
    assert!(is_graph_state(&dev.begin(S0).unwrap_err()));
    assert!(is_graph_state(&dev.end(S0).unwrap_err()));
    assert!(dev.captures().recording().is_empty());
    assert_eq!(dev.memory_report(), before, "pools untouched");
    // a second prepare
    dev.prepare(S0).unwrap();
    assert!(is_graph_state(&dev.prepare(S0).unwrap_err()));
    // a second begin
    dev.begin(S0).unwrap();
    assert!(is_graph_state(&dev.begin(S0).unwrap_err()));
    // the refused calls left the window as it was: it records and seals.
    assert_eq!(dev.captures().recording(), vec![S0]);
    add_one(&dev, &k, S0, &x, &y).unwrap_err(); // add_one was never loaded: rule 10 dooms this window
    assert!(dev.end(S0).is_err());
    let trace = dev.trace().render();
    assert!(
        trace.contains("stream#0 refuse begin: no capture is prepared"),
        "{trace}"
    );
    assert!(trace.contains("stream#0 refuse prepare"), "{trace}");
}

#[test]
fn rule_02_no_path_leaves_a_stream_wedged() {
    let _suite = crate::suite_lock();
    let (dev, world) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1, 2]);
    let y = dev.alloc(S0, 8).unwrap();
    let launch = |dev: &crate::Dev| add_one(dev, &k, S0, &x, &y);
    launch(&dev).unwrap();
    // end on a stream still in Prepare disarms it.
    dev.prepare(S0).unwrap();
    assert!(is_graph_state(&dev.end(S0).unwrap_err()));
    dev.prepare(S0).expect("disarmed: prepare works again");
    // abort from Prepare disarms.
    dev.abort(S0).unwrap();
    // abort from Capture closes the driver capture, drops the recording, taints.
    dev.prepare(S0).unwrap();
    dev.begin(S0).unwrap();
    launch(&dev).unwrap();
    dev.abort(S0).unwrap();
    assert!(dev.captures().recording().is_empty());
    assert_eq!(
        world.calls(FaultOp::Instantiate),
        0,
        "the aborted recording was never instantiated"
    );
    let err = read(&dev, S0, &y).unwrap_err();
    assert!(text(&err).contains("the window was aborted"), "{err}");
    // abort otherwise does nothing.
    dev.abort(S0).unwrap();
    // A doomed end leaves no capture either: a full capture works afterwards.
    dev.write(S0, &y, 0, bytes_of(&[0, 0])).unwrap();
    let g = dev.capture(S0, |d| launch(d)).unwrap();
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &y).unwrap(), vec![2, 3]);
}

#[test]
fn rule_03_the_recording_starts_empty_and_eager_launches_are_not_recorded() {
    let _suite = crate::suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1]);
    let y = dev.alloc(S0, 4).unwrap();
    for _ in 0..3 {
        add_one(&dev, &k, S0, &x, &y).unwrap();
    }
    // A sealed window and an aborted one recorded launches; the next must inherit none.
    let first = dev.capture(S0, |d| add_one(d, &k, S0, &x, &y)).unwrap();
    assert_eq!(dev.graph(&first).unwrap().launches, 1);
    dev.prepare(S0).unwrap();
    dev.begin(S0).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap();
    dev.abort(S0).unwrap();
    dev.write(S0, &y, 0, bytes_of(&[0])).unwrap();
    let g = dev.capture(S0, |d| add_one(d, &k, S0, &x, &y)).unwrap();
    assert_eq!(dev.graph(&g).unwrap().launches, 1);
}

#[test]
fn rule_04_recorded_memory_names_each_claim_once_write_winning() {
    let _suite = crate::suite_lock();
    // The recording reads x, writes y, reads y, then writes x: x is one claim, first
    // read (an input) and then written, so it is in the written set as well; y is one
    // claim, written.
    let (dev, world) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1]);
    let y = dev.alloc(S0, 4).unwrap();
    let g = dev
        .capture(S0, |d| {
            add_one(d, &k, S0, &x, &y)?;
            add_one(d, &k, S0, &y, &x)
        })
        .unwrap();
    assert_eq!(read(&dev, S0, &x).unwrap(), vec![3]);
    // A replay that fails to enqueue claims every range the graph writes: x and y.
    world.fail(FaultOp::Replay, 1);
    dev.replay(S0, &g, 1).unwrap_err();
    for b in [&x, &y] {
        let err = read(&dev, S0, b).unwrap_err();
        assert!(text(&err).contains("injected fault in replay"), "{err}");
    }
    // x is the graph's only input: once written, a replay runs (y needs no rewrite).
    dev.write(S0, &x, 0, bytes_of(&[10])).unwrap();
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &y).unwrap(), vec![11]);
    assert_eq!(read(&dev, S0, &x).unwrap(), vec![12]);
}

#[test]
fn rule_05_priming_keeps_warmups_working_set_so_the_window_needs_no_growth() {
    let _suite = crate::suite_lock();
    // Warmup writes three 1 MiB inputs, syncing after each: without priming the staging
    // pool would only reach one page, and the recording (which holds a staging slice
    // per recorded copy) would have to grow it inside the window.
    let (dev, world) = device();
    let bufs: Vec<_> = (0..3).map(|_| dev.alloc(S0, MIB).unwrap()).collect();
    let data: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i + 1; MIB as usize]).collect();
    let allocs_before = world.calls(FaultOp::Alloc);
    let g = dev
        .capture(S0, |d| {
            for (b, bytes) in bufs.iter().zip(&data) {
                d.write(S0, b, 0, bytes.clone())?;
                let _ = d.sync(S0); // refused while recording, not a failure
            }
            Ok::<(), ServerError>(())
        })
        .expect("the window needed no growth");
    assert_eq!(
        world.calls(FaultOp::Alloc) - allocs_before,
        3,
        "three staging pages, all in warmup"
    );
    for b in &bufs {
        dev.write(S0, b, 0, vec![0u8; MIB as usize]).unwrap();
    }
    dev.replay(S0, &g, 1).unwrap();
    for (b, bytes) in bufs.iter().zip(&data) {
        assert_eq!(&dev.read(S0, b).unwrap(), bytes);
    }
}

#[test]
fn rule_06_an_allocation_inside_the_window_is_refused_and_dooms_it() {
    let _suite = crate::suite_lock();
    let (dev, world) = device();
    dev.prepare(S0).unwrap();
    dev.begin(S0).unwrap();
    let err = dev.alloc(S0, 3 * MIB + 5).unwrap_err();
    match &err {
        ServerError::Doomed(pm) => match &pm.cause {
            ServerError::AllocInWindow {
                size,
                pool,
                stream,
                recording,
            } => {
                assert_eq!((*size, *stream, *recording), (3 * MIB + 5, S0, S0));
                assert_eq!(pool.to_string(), "device.persistent");
            }
            other => panic!("unexpected cause {other}"),
        },
        other => panic!("unexpected {other}"),
    }
    assert_eq!(
        world.calls(FaultOp::Alloc),
        0,
        "the driver never saw the allocation"
    );
    let end = dev.end(S0).unwrap_err();
    assert!(
        text(&end).contains("doomed by alloc on stream#0 after 0 recorded launches"),
        "{end}"
    );
}

#[test]
fn rule_07_a_graph_pins_every_slice_its_launches_touch() {
    let _suite = crate::suite_lock();
    // Drop an intermediate after capture, allocate 8 sentinels of its size: the replay
    // corrupts none of them, and its result is right.
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1; 64]);
    let y = dev.alloc(S0, 256).unwrap();
    let g = dev
        .capture(S0, |d| {
            let tmp = d.alloc(S0, 256)?;
            add_one(d, &k, S0, &x, &tmp)?;
            add_one(d, &k, S0, &tmp, &y)?;
            drop(tmp);
            // Another size: the pool takes `tmp` back inside the window.
            drop(d.alloc(S0, 512)?);
            Ok::<(), ServerError>(())
        })
        .unwrap();
    // Sentinels from the persistent pool, as a second capture's warmup would allocate.
    dev.prepare(S0).unwrap();
    let sentinels: Vec<_> = (0..8).map(|i| filled(&dev, S0, &[1000 + i; 64])).collect();
    dev.abort(S0).unwrap();
    dev.write(S0, &x, 0, bytes_of(&[7; 64])).unwrap();
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &y).unwrap(), vec![9; 64]);
    for (i, s) in sentinels.iter().enumerate() {
        assert_eq!(read(&dev, S0, s).unwrap(), vec![1000 + i as u32; 64]);
    }
    // The one exception is rule 23: a later capture into the same graph pool may take an
    // earlier member's graph-only memory (checked there, never assumed). Two members'
    // intermediates lie in one slice.
    let pool = dev.graph_pool("the exception").unwrap();
    let members: Vec<_> = (0..2)
        .map(|_| {
            dev.capture_in(S0, &pool, |d| {
                let tmp = d.alloc(S0, 256)?;
                add_one(d, &k, S0, &x, &tmp)?;
                add_one(d, &k, S0, &tmp, &y)
            })
            .unwrap()
        })
        .collect();
    let report = dev.memory_report();
    assert_eq!(report.pools[0].held_bytes, 256, "{report}");
    for g in &members {
        dev.replay(S0, g, 1).unwrap();
        assert_eq!(read(&dev, S0, &y).unwrap(), vec![9; 64]);
    }
}

#[test]
fn rule_07_inputs_dropped_inside_the_window_are_not_reused_by_it() {
    let _suite = crate::suite_lock();
    // Two inputs written before the window, one from the dynamic pool and one from the
    // persistent pool (allocated while prepared), read by a recorded launch and dropped
    // right after it; then the window allocates two buffers of their size and records
    // writes to them. The window's allocations must take other memory (not the dropped
    // persistent input's slice), and the graph must keep the inputs it recorded: each
    // replay reads the inputs' bytes, never the new buffers', and never fails as if the
    // memory were unknown.
    let (dev, _) = device();
    let k = kernels(&dev);
    let a = filled(&dev, S0, &[5; 64]);
    let y = dev.alloc(S0, 256).unwrap();
    dev.prepare(S0).unwrap();
    let b = filled(&dev, S0, &[7; 64]);
    let args = |a: &capture_core::Buffer, b: &capture_core::Buffer| {
        [Arg::read(a), Arg::read(b), Arg::write(&y)]
    };
    dev.launch(S0, &k.add, [1, 1, 1], &args(&a, &b), &[])
        .unwrap();
    // Warmup allocates what the recording will, so the window finds room.
    drop((dev.alloc(S0, 256).unwrap(), dev.alloc(S0, 256).unwrap()));
    dev.begin(S0).unwrap();
    dev.launch(S0, &k.add, [1, 1, 1], &args(&a, &b), &[])
        .unwrap();
    drop((a, b));
    let z1 = dev.alloc(S0, 256).unwrap();
    let z2 = dev.alloc(S0, 256).unwrap();
    dev.write(S0, &z1, 0, bytes_of(&[100; 64])).unwrap();
    dev.write(S0, &z2, 0, bytes_of(&[200; 64])).unwrap();
    let g = dev.end(S0).unwrap();
    for _ in 0..2 {
        dev.replay(S0, &g, 1).unwrap();
        assert_eq!(read(&dev, S0, &y).unwrap(), vec![12; 64]);
        assert_eq!(read(&dev, S0, &z1).unwrap(), vec![100; 64]);
        assert_eq!(read(&dev, S0, &z2).unwrap(), vec![200; 64]);
    }
}

#[test]
fn rule_08_recorded_copies_keep_their_bytes_and_clear_no_claim() {
    let _suite = crate::suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = dev.alloc(S0, 16).unwrap();
    let y = dev.alloc(S0, 16).unwrap();
    let z = dev.alloc(S0, 16).unwrap();
    // Warm the kernels, then record two host writes and a launch by hand.
    dev.write(S0, &x, 0, bytes_of(&[0; 4])).unwrap();
    dev.launch(
        S0,
        &k.add,
        [1, 1, 1],
        &[Arg::read(&x), Arg::read(&x), Arg::write(&y)],
        &[],
    )
    .unwrap();
    let a = dev.alloc(S0, 16).unwrap();
    let b = dev.alloc(S0, 16).unwrap();
    dev.prepare(S0).unwrap();
    // Warmup stages two 16-byte copies, so the recording finds two staging slices.
    dev.write(S0, &x, 0, bytes_of(&[0; 4])).unwrap();
    dev.write(S0, &z, 0, bytes_of(&[0; 4])).unwrap();
    dev.begin(S0).unwrap();
    dev.write(S0, &a, 0, bytes_of(&[5, 6, 7, 8])).unwrap();
    dev.write(S0, &b, 0, bytes_of(&[100, 200, 300, 400]))
        .unwrap();
    dev.launch(
        S0,
        &k.add,
        [1, 1, 1],
        &[Arg::read(&a), Arg::read(&b), Arg::write(&y)],
        &[],
    )
    .unwrap();
    let g = dev.end(S0).unwrap();
    // Recorded, not run: `a` is still unwritten.
    let err = read(&dev, S0, &a).unwrap_err();
    assert!(text(&err).contains("never written"), "{err}");
    // Other writes stage through the same pool; the graph's staging is not reused.
    for i in 0..4 {
        let other = filled(&dev, S0, &[1000 + i; 4]);
        drop(other);
    }
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &a).unwrap(), vec![5, 6, 7, 8]);
    assert_eq!(read(&dev, S0, &b).unwrap(), vec![100, 200, 300, 400]);
    assert_eq!(read(&dev, S0, &y).unwrap(), vec![105, 206, 307, 408]);
    // The graph's host bytes are its two staging slices, which hold the copied bytes.
    assert_eq!(dev.graph(&g).unwrap().host_bytes, 2 * 16);
    assert_eq!(dev.graph(&g).unwrap().copies, 2);
}

#[test]
fn rule_09_flushes_wait_for_the_window_and_a_host_read_is_refused_without_dooming() {
    let _suite = crate::suite_lock();
    // A drop queue that asks for a flush on every push: inside the window the flush
    // must be deferred (a fence wait there would break the capture).
    let config = DeviceConfig::new().drop_policy(FlushingPolicy::new(1, MIB).unwrap());
    let (dev, _) = device_with(config);
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1]);
    let y = dev.alloc(S0, 4).unwrap();
    let old = dev.capture(S0, |d| add_one(d, &k, S0, &x, &y)).unwrap();
    dev.prepare(S0).unwrap();
    dev.write(S0, &x, 0, bytes_of(&[41])).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap();
    dev.begin(S0).unwrap();
    dev.drop_graph(old).unwrap();
    dev.write(S0, &x, 0, bytes_of(&[41])).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap();
    let refused = read(&dev, S0, &y).unwrap_err();
    assert!(is_graph_state(&refused), "{refused}");
    assert!(is_graph_state(&dev.sync(S0).unwrap_err()));
    let g = dev
        .end(S0)
        .expect("neither the flush nor the refused read doomed it");
    assert_eq!(
        dev.memory_report().streams[0].pending_drops,
        0,
        "drained after end"
    );
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &y).unwrap(), vec![42]);
}

#[test]
fn rule_10_a_kernel_first_loaded_inside_the_window_dooms_it() {
    let _suite = crate::suite_lock();
    let (dev, world) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1]);
    let y = dev.alloc(S0, 4).unwrap();
    dev.prepare(S0).unwrap();
    dev.begin(S0).unwrap();
    let err = dev
        .launch(
            S0,
            &k.add_one,
            [1, 1, 1],
            &[Arg::read(&x), Arg::write(&y)],
            &[],
        )
        .unwrap_err();
    assert!(
        text(&err).contains("load kernel add_one (kernel#0): first loaded inside the window"),
        "{err}"
    );
    assert_eq!(
        err.root_cause().subject().and_then(|s| match s {
            Subject::Kernel { kernel, .. } => Some(*kernel),
            _ => None,
        }),
        Some(k.add_one.id())
    );
    assert_eq!(
        err.post_mortem().and_then(|pm| pm.op.kernel()),
        Some(k.add_one.id())
    );
    assert_eq!(world.calls(FaultOp::Load), 0);
    let end = dev.end(S0).unwrap_err();
    assert!(text(&end).contains("load add_one"), "{end}");
}

#[test]
fn rule_11_a_failure_inside_the_window_dooms_it_and_taints_what_it_wrote() {
    let _suite = crate::suite_lock();
    let (dev, world) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1]);
    let y = dev.alloc(S0, 4).unwrap();
    let z = dev.alloc(S0, 4).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap();
    dev.prepare(S0).unwrap();
    dev.begin(S0).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap();
    world.fail(FaultOp::Launch, 1);
    let err = dev
        .launch(
            S0,
            &k.add_one,
            [1, 1, 1],
            &[Arg::read(&y), Arg::write(&z)],
            &[],
        )
        .unwrap_err();
    assert!(text(&err).contains("injected fault in launch"), "{err}");
    let end = dev.end(S0).unwrap_err();
    assert!(
        text(&end).contains(
            "capture window of stream#0 doomed by add_one on stream#0 after 1 recorded launches"
        ),
        "{end}"
    );
    // y was written by warmup, but the window that should have written it again never
    // ran: reads of its recorded outputs fail, naming the cause.
    let err = read(&dev, S0, &y).unwrap_err();
    assert!(text(&err).contains("injected fault in launch"), "{err}");
}

#[test]
fn rule_12_a_foreign_end_abandons_the_window() {
    let _suite = crate::suite_lock();
    let (dev, _) = device();
    dev.prepare(S0).unwrap();
    dev.begin(S0).unwrap();
    let err = dev.end(S2).unwrap_err();
    assert!(
        text(&err).contains("capture window of stream#0 abandoned: ended by stream#2"),
        "{err}"
    );
    assert!(dev.captures().recording().is_empty());
    match dev.end(S0).unwrap_err() {
        ServerError::Abandoned { owner, by } => assert_eq!((owner, by), (S0, S2)),
        other => panic!("unexpected {other}"),
    }
    dev.prepare(S0).expect("the stream is free again");
    // A foreign end of a window still in prepare abandons it too.
    match dev.end(S2).unwrap_err() {
        ServerError::Abandoned { owner, by } => assert_eq!((owner, by), (S0, S2)),
        other => panic!("unexpected {other}"),
    }
    assert!(matches!(
        dev.end(S0).unwrap_err(),
        ServerError::Abandoned { .. }
    ));
    dev.prepare(S0).expect("the stream is free again");
}

#[test]
fn rule_13_a_neighbour_of_an_active_window_is_refused_without_dooming_it() {
    let _suite = crate::suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1]);
    let y = dev.alloc(S0, 4).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap();
    let n = filled(&dev, S2, &[5]);
    for recording in [false, true] {
        dev.prepare(S0).unwrap();
        if recording {
            dev.begin(S0).unwrap();
        }
        let refusals = [
            dev.alloc(S2, 4).map(|_| ()),
            dev.write(S2, &n, 0, bytes_of(&[6])),
            dev.read(S2, &n).map(|_| ()),
            dev.sync(S2),
            dev.prepare(S2),
            dev.begin(S2),
            add_one(&dev, &k, S2, &n, &n),
        ];
        for r in refusals {
            match r.unwrap_err() {
                ServerError::NeighbourRefused {
                    neighbour, owner, ..
                } => {
                    assert_eq!((neighbour, owner), (S2, S0));
                }
                other => panic!("unexpected {other}"),
            }
        }
        if recording {
            add_one(&dev, &k, S0, &x, &y).unwrap();
            dev.end(S0).expect("the refusals did not doom the window");
        } else {
            dev.abort(S0).unwrap();
        }
    }
    assert_eq!(read(&dev, S2, &n).unwrap(), vec![5]);
}

#[test]
fn rule_14_a_replay_checks_its_inputs_and_a_failed_enqueue_is_settled_by_a_later_one() {
    let _suite = crate::suite_lock();
    let (dev, world) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1]);
    let y = dev.alloc(S0, 4).unwrap();
    let g = dev.capture(S0, |d| add_one(d, &k, S0, &x, &y)).unwrap();
    // A replay that fails to enqueue taints what it writes...
    world.fail(FaultOp::Replay, 1);
    let err = dev.replay(S0, &g, 1).unwrap_err();
    assert!(text(&err).contains("injected fault in replay"), "{err}");
    let err = read(&dev, S0, &y).unwrap_err();
    assert!(text(&err).contains("injected fault in replay"), "{err}");
    // ...and a later successful replay settles it.
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &y).unwrap(), vec![2]);
    // A tainted input skips the replay and passes its failure on.
    let z = dev.alloc(S0, 4).unwrap();
    world.fail(FaultOp::Launch, 1);
    add_one(&dev, &k, S0, &y, &x).unwrap_err();
    let err = dev.replay(S0, &g, 1).unwrap_err();
    // The refusal names the replay by its graph, a field to match on.
    assert!(
        matches!(&err, ServerError::Unwritten(u)
            if u.by.as_ref().and_then(|by| by.op.graph()) == Some(g.id())),
        "{err}"
    );
    assert!(
        text(&err).starts_with(&format!("replay of {} on stream#0 skipped", g.id())),
        "{err}"
    );
    let err = read(&dev, S0, &y).unwrap_err();
    let ServerError::Unwritten(u) = &err else {
        panic!("{err}")
    };
    assert_eq!(
        u.chain.last().and_then(|s| s.op.graph()),
        Some(g.id()),
        "{err}"
    );
    assert!(
        text(&err).contains(&format!("replay {} on stream#0 skipped", g.id())),
        "{err}"
    );
    assert_eq!(
        world.calls(FaultOp::Replay),
        2,
        "the skipped replay never reached the driver"
    );
    drop(z);
}

#[test]
fn rule_14_bytes_the_graph_writes_before_it_reads_them_are_not_its_inputs() {
    let _suite = crate::suite_lock();
    let (dev, world) = device();
    let k = kernels(&dev);
    // x: eight u32; the graph first rewrites its upper half from the host, then reads all
    // of it.
    let x = filled(&dev, S0, &[1; 8]);
    let y = dev.alloc(S0, 32).unwrap();
    let upper = bytes_of(&[7; 4]);
    let g = dev
        .capture(S0, |d| {
            d.write(S0, &x, 16, upper.clone())?;
            add_one(d, &k, S0, &x, &y)
        })
        .unwrap();
    // A failed launch claims only the upper half of x.
    let z = filled(&dev, S0, &[0; 4]);
    world.fail(FaultOp::Launch, 1);
    dev.launch(
        S0,
        &k.add_one,
        [1, 1, 1],
        &[Arg::read(&z), Arg::write(&x).range(16, 16)],
        &[],
    )
    .unwrap_err();
    assert!(read(&dev, S0, &x).is_err(), "x's upper half is claimed");
    // The replay rewrites those bytes before it reads them: it runs, and what it wrote
    // reads back.
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &y).unwrap(), [2, 2, 2, 2, 8, 8, 8, 8]);
    // The lower half is still an input: claimed, the replay is skipped.
    world.fail(FaultOp::Launch, 1);
    dev.launch(
        S0,
        &k.add_one,
        [1, 1, 1],
        &[Arg::read(&z), Arg::write(&x).range(0, 16)],
        &[],
    )
    .unwrap_err();
    assert!(matches!(
        dev.replay(S0, &g, 1).unwrap_err(),
        ServerError::Unwritten(_)
    ));
}

#[test]
fn rule_15_an_asynchronous_error_taints_everything_written_since_the_last_good_fence() {
    let _suite = crate::suite_lock();
    let (dev, world) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1]);
    let before = dev.alloc(S0, 4).unwrap();
    add_one(&dev, &k, S0, &x, &before).unwrap();
    dev.sync(S0).unwrap();
    let y = dev.alloc(S0, 4).unwrap();
    let g = dev.capture(S0, |d| add_one(d, &k, S0, &x, &y)).unwrap();
    let z = dev.alloc(S0, 4).unwrap();
    add_one(&dev, &k, S0, &x, &z).unwrap();
    dev.replay(S0, &g, 1).unwrap();
    world.fail(FaultOp::AsyncAtFence, 1);
    let err = dev.sync(S0).unwrap_err();
    assert!(
        text(&err).contains("injected fault in asynchronous error at fence"),
        "{err}"
    );
    for b in [&y, &z] {
        let err = read(&dev, S0, b).unwrap_err();
        assert!(
            text(&err).contains("injected fault in asynchronous error at fence"),
            "{err}"
        );
    }
    assert_eq!(
        read(&dev, S0, &before).unwrap(),
        vec![2],
        "settled before the last good fence"
    );
}

#[test]
fn rule_16_dropping_a_graph_never_blocks_and_a_replay_inside_a_window_is_refused() {
    let _suite = crate::suite_lock();
    let (dev, world) = device();
    let k = kernels(&dev);
    let inp = dev.alloc(S0, 256).unwrap();
    let y = dev.alloc(S0, 256).unwrap();
    // The graph copies its input from host staging, then runs two launches.
    let g = dev
        .capture(S0, |d| {
            d.write(S0, &inp, 0, bytes_of(&[3; 64]))?;
            let tmp = d.alloc(S0, 256)?;
            add_one(d, &k, S0, &inp, &tmp)?;
            add_one(d, &k, S0, &tmp, &y)
        })
        .unwrap();
    dev.prepare(S0).unwrap();
    dev.begin(S0).unwrap();
    assert!(is_graph_state(&dev.replay(S0, &g, 1).unwrap_err()));
    dev.abort(S0).unwrap();
    dev.write(S0, &y, 0, bytes_of(&[0; 64])).unwrap();
    dev.sync(S0).unwrap();
    dev.replay(S0, &g, 1).unwrap();
    let waits = world.calls(FaultOp::FenceWait);
    dev.drop_graph(g).unwrap();
    assert_eq!(
        world.calls(FaultOp::FenceWait),
        waits,
        "the drop waited on nothing"
    );
    // The replay is still queued: its executable, its staging and its slices must
    // outlive it. Other writes stage through the same pool meanwhile, and a second
    // capture's warmup allocates from the same persistent pool.
    let other = dev.alloc(S0, 256).unwrap();
    dev.write(S0, &other, 0, bytes_of(&[90; 64])).unwrap();
    dev.prepare(S0).unwrap();
    let sentinels: Vec<_> = (0..8).map(|i| filled(&dev, S0, &[500 + i; 64])).collect();
    dev.abort(S0).unwrap();
    assert_eq!(read(&dev, S0, &y).unwrap(), vec![5; 64]);
    assert_eq!(read(&dev, S0, &inp).unwrap(), vec![3; 64]);
    for (i, s) in sentinels.iter().enumerate() {
        assert_eq!(read(&dev, S0, s).unwrap(), vec![500 + i as u32; 64]);
    }
}

#[test]
fn rule_17_a_driver_refusal_at_begin_unwinds_so_prepare_and_begin_can_be_retried() {
    let _suite = crate::suite_lock();
    let (dev, world) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1]);
    let y = dev.alloc(S0, 4).unwrap();
    dev.prepare(S0).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap();
    world.fail(FaultOp::Begin, 1);
    let err = dev.begin(S0).unwrap_err();
    assert!(text(&err).contains("injected fault in begin"), "{err}");
    assert!(dev.captures().recording().is_empty());
    // Disarmed: an allocation goes to the dynamic pool again.
    let _d = dev.alloc(S0, 4).unwrap();
    assert!(
        dev.trace()
            .render()
            .lines()
            .last()
            .unwrap()
            .contains("pool=device.dynamic")
    );
    dev.prepare(S0).expect("prepare again");
    dev.begin(S0).expect("begin again");
    add_one(&dev, &k, S0, &x, &y).unwrap();
    dev.end(S0).expect("seals");
}

#[test]
fn rule_18_work_across_streams_is_ordered_by_fences() {
    let _suite = crate::suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S1, &[0; 4]);
    dev.sync(S1).unwrap();
    let y = dev.alloc(S0, 16).unwrap();
    // S1's write is queued, not run; S0's launch must wait for it.
    dev.write(S1, &x, 0, bytes_of(&[10, 20, 30, 40])).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap();
    assert_eq!(read(&dev, S0, &y).unwrap(), vec![11, 21, 31, 41]);
    // Inputs from another stream are settled before the window opens, and the graph
    // pins them: replays after S1 rewrote x see the new bytes.
    let g = dev.capture(S0, |d| add_one(d, &k, S0, &x, &y)).unwrap();
    dev.write(S1, &x, 0, bytes_of(&[1, 2, 3, 4])).unwrap();
    dev.sync(S1).unwrap();
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &y).unwrap(), vec![2, 3, 4, 5]);
}

#[test]
fn a_capture_post_mortem_names_the_call_the_stream_and_the_launches_before_it() {
    let _suite = crate::suite_lock();
    let (dev, world) = device();
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1]);
    let y = dev.alloc(S0, 4).unwrap();
    let r = dev.capture(S0, |d| {
        for _ in 0..3 {
            add_one(d, &k, S0, &x, &y)?;
        }
        Ok::<(), ServerError>(())
    });
    r.unwrap();
    world.fail(FaultOp::Instantiate, 1);
    let err = dev.capture(S0, |d| add_one(d, &k, S0, &x, &y)).unwrap_err();
    assert!(
        text(&err).contains(
            "capture window of stream#0 doomed by instantiate on stream#0 after 1 recorded launches: driver call instantiate failed: injected fault in instantiate"
        ),
        "{err}"
    );
    // An abandoned window has no post-mortem: the ender's error is a flat `Abandoned`
    // naming both streams, matched in one step.
    dev.prepare(S0).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap();
    dev.begin(S0).unwrap();
    add_one(&dev, &k, S0, &x, &y).unwrap();
    match dev.end(S2).unwrap_err() {
        ServerError::Abandoned { owner, by } => assert_eq!((owner, by), (S0, S2)),
        other => panic!("a foreign end is a flat Abandoned, not {other:?}"),
    }
}

#[test]
fn memory_limits_report_every_pool_and_graph() {
    let _suite = crate::suite_lock();
    let config = DeviceConfig::new().device_memory(MemoryConfig::limited(2 * MIB).unwrap());
    let (dev, _) = device_with(config);
    let k = kernels(&dev);
    let x = filled(&dev, S0, &[1]);
    let y = dev.alloc(S0, 4).unwrap();
    let g = dev.capture(S0, |d| add_one(d, &k, S0, &x, &y)).unwrap();
    let err = dev.alloc(S0, 2 * MIB).unwrap_err();
    let ServerError::OutOfMemory(oom) = &err else {
        panic!("unexpected {err}")
    };
    assert_eq!(oom.graphs.len(), 1);
    assert_eq!(oom.graphs[0].graph, g.id());
    assert!(text(&err).contains("graph#0: device"), "{err}");
}

#[test]
fn rule_24_a_graph_belongs_to_one_device_and_dropping_its_handle_releases_it() {
    let _suite = crate::suite_lock();
    let (a, world) = device();
    let (b, _) = device();
    let (ka, kb) = (kernels(&a), kernels(&b));
    // Each device has its graph#0: a's adds one into ya, b's into yb.
    let (xa, ya) = (filled(&a, S0, &[1; 64]), a.alloc(S0, 256).unwrap());
    let (xb, yb) = (filled(&b, S0, &[10; 64]), b.alloc(S0, 256).unwrap());
    let ga = a.capture(S0, |d| add_one(d, &ka, S0, &xa, &ya)).unwrap();
    let gb = b.capture(S0, |d| add_one(d, &kb, S0, &xb, &yb)).unwrap();
    assert_eq!(ga.id(), gb.id(), "the same number on both devices");
    b.write(S0, &yb, 0, bytes_of(&[0; 64])).unwrap();
    // a's graph on b: refused, naming it; b's own graph of that number does not run.
    for err in [
        b.replay(S0, &ga, 1).unwrap_err(),
        b.label_graph(&ga, "wrong device").unwrap_err(),
    ] {
        assert!(
            matches!(err, ServerError::InvalidArgument { what: "graph", .. }),
            "{err}"
        );
        assert!(text(&err).contains("belongs to another device"), "{err}");
    }
    assert!(b.graph(&ga).is_none());
    assert_eq!(
        read(&b, S0, &yb).unwrap(),
        vec![0; 64],
        "b's graph#0 did not run"
    );
    b.replay(S0, &gb, 1).unwrap();
    assert_eq!(read(&b, S0, &yb).unwrap(), vec![11; 64]);
    // Dropping the handle releases the graph behind its last replay's fence, without
    // waiting: the intermediate it pinned goes back once the replay is behind a fence.
    let tmp_before = a.memory_report().streams[0].device.in_use();
    a.replay(S0, &ga, 1).unwrap();
    let waits = world.calls(FaultOp::FenceWait);
    drop(ga);
    assert_eq!(
        world.calls(FaultOp::FenceWait),
        waits,
        "the drop waited on nothing"
    );
    assert!(a.memory_report().graphs.is_empty(), "the graph is released");
    a.sync(S0).unwrap();
    assert_eq!(
        read(&a, S0, &ya).unwrap(),
        vec![2; 64],
        "the queued replay ran"
    );
    drop((xa, ya));
    a.sync(S0).unwrap();
    a.cleanup().unwrap();
    assert!(a.memory_report().streams[0].device.in_use() < tmp_before);
    // A handle that outlives its device does nothing when dropped.
    drop(b);
    drop(gb);
}

#[test]
fn rule_24_a_handle_dropped_inside_the_librarys_own_work_is_released_by_the_next_call() {
    let _suite = crate::suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    let (x, y) = (filled(&dev, S0, &[1; 64]), dev.alloc(S0, 256).unwrap());
    let g = dev.capture(S0, |d| add_one(d, &k, S0, &x, &y)).unwrap();
    // The handle lives inside the user's work; the device keeps the work until its run's
    // fence, so the handle is dropped while the stream drains, under the stream's lock.
    let work = capture_mock::MockWork::new("holds_a_graph", move |ranges| {
        let _keep = &g;
        ranges[0].fill(7);
        Ok(())
    });
    let out = dev.alloc(S0, 16).unwrap();
    dev.foreign_work(S0, &[Arg::write(&out)], work).unwrap();
    dev.sync(S0).unwrap();
    assert_eq!(read(&dev, S0, &out).unwrap().len(), 4);
    // Released by the next call, not inside the drain: no deadlock, no panic.
    assert!(
        dev.memory_report().graphs.is_empty(),
        "the graph is released"
    );
}

/// Three members of one pool: `a` carries state of its own from one replay to the next
/// (allocated in its warmup, then held by the graph alone); `g1` has a graph-only
/// intermediate; `g2` an intermediate the user keeps. Each takes the others' graph-only
/// bytes, and what it overwrites is claimed, never read.
#[test]
fn rule_23_graphs_of_one_pool_share_memory_only_under_check() {
    let _suite = crate::suite_lock();
    let (dev, _) = device();
    let k = kernels(&dev);
    let pool = dev.graph_pool("ladder").unwrap();
    let out = dev.alloc(S0, 256).unwrap();
    let mut state: Option<capture_core::Buffer> = None;
    let a = dev
        .capture_in(S0, &pool, |d| {
            let s = match &state {
                Some(s) => s.clone(),
                None => {
                    // Allocated and set in warmup, used by the recording: carried.
                    let s = d.alloc(S0, 256)?;
                    d.write(S0, &s, 0, bytes_of(&[10; 64]))?;
                    state = Some(s.clone());
                    s
                }
            };
            let tmp = d.alloc(S0, 256)?;
            add_one(d, &k, S0, &s, &tmp)?;
            add_one(d, &k, S0, &tmp, &s)?;
            add_one(d, &k, S0, &s, &out)
        })
        .unwrap();
    drop(state); // from here the graph alone holds its state
    dev.replay(S0, &a, 2).unwrap();
    assert_eq!(
        read(&dev, S0, &out).unwrap(),
        vec![17; 64],
        "10 + 2 (warmup) + 4, + 1"
    );
    // g1: its intermediate takes the pool's first bytes again, over a's state.
    let x = filled(&dev, S0, &[1; 64]);
    let (y1, y2) = (dev.alloc(S0, 256).unwrap(), dev.alloc(S0, 256).unwrap());
    let g1 = dev
        .capture_in(S0, &pool, |d| {
            let t = d.alloc(S0, 256)?;
            add_one(d, &k, S0, &x, &t)?;
            add_one(d, &k, S0, &t, &y1)
        })
        .unwrap();
    let b = g1.id();
    // Its warmup overwrote the state a needs from its own last replay: a's replay fails
    // naming it, and what a would have written is claimed with it.
    let warmup = format!("the warmup of {b} on stream#0 overwrote these bytes");
    let err = dev.replay(S0, &a, 1).unwrap_err();
    assert!(text(&err).contains(&warmup), "{}", text(&err));
    let cause = &err.unwritten().expect("a skipped replay").cause;
    assert!(
        matches!(cause, capture_core::FailureCause::Failed(ServerError::Overwritten { graph: Some(g), replay: None, .. }) if *g == b),
        "{cause:?}"
    );
    assert!(text(&read(&dev, S0, &out).unwrap_err()).contains(&warmup));
    // g2 keeps its intermediate: placed over g1's (graph-only), never under a handle.
    let mut kept = None;
    let g2 = dev
        .capture_in(S0, &pool, |d| {
            let t = d.alloc(S0, 256)?;
            add_one(d, &k, S0, &x, &t)?;
            add_one(d, &k, S0, &t, &y2)?;
            if d.phase() == capture_core::CapturePhase::Record {
                kept = Some(t); // the recorded one, in the bytes warmup's took
            }
            Ok::<(), ServerError>(())
        })
        .unwrap();
    let t2 = kept.unwrap();
    dev.replay(S0, &g2, 1).unwrap();
    assert_eq!(read(&dev, S0, &t2).unwrap(), vec![2; 64]);
    // g1's replay rewrites its own intermediate before reading it: it runs, and takes
    // g2's kept intermediate, whose read now fails naming that replay.
    dev.write(S0, &x, 0, bytes_of(&[7; 64])).unwrap();
    dev.replay(S0, &g1, 1).unwrap();
    assert_eq!(read(&dev, S0, &y1).unwrap(), vec![9; 64]);
    let err = read(&dev, S0, &t2).unwrap_err();
    assert!(
        text(&err).contains(&format!("replay 1 of {b} on stream#0 overwrote")),
        "{}",
        text(&err)
    );
    assert!(
        dev.trace()
            .render()
            .contains(&format!("pool#0: replay 1 of {b} overwrote"))
    );
    // g2's own replay writes it again.
    dev.replay(S0, &g2, 1).unwrap();
    assert_eq!(read(&dev, S0, &t2).unwrap(), vec![8; 64]);
    assert_eq!(read(&dev, S0, &y2).unwrap(), vec![9; 64]);
    // A member never places over a buffer a handle holds: g3 allocates, then reads g2's
    // kept intermediate; its own slice must not lie in the same bytes.
    let y3 = dev.alloc(S0, 256).unwrap();
    let g3 = dev
        .capture_in(S0, &pool, |d| {
            let u = d.alloc(S0, 256)?;
            add_one(d, &k, S0, &t2, &u)?;
            add_one(d, &k, S0, &u, &y3)
        })
        .unwrap();
    assert_eq!(read(&dev, S0, &y3).unwrap(), vec![10; 64]);
    assert_eq!(
        read(&dev, S0, &t2).unwrap(),
        vec![8; 64],
        "g3 took no byte of it"
    );
    drop(g3);
    // The pool holds, for graphs alone, a's state and temporary and g1's intermediate
    // (g2's is the user's): 512 B, of which a's state and g1's intermediate are one
    // slice's bytes held by both, counted once.
    let report = dev.memory_report();
    assert_eq!(report.pools.len(), 1, "{report}");
    assert_eq!(report.pools[0].members, vec![a.id(), b, g2.id()]);
    assert_eq!(report.pools[0].held_bytes, 512, "{report}");
    assert_eq!(report.pools[0].shared_bytes, 256, "{report}");
    assert!(
        report.to_string().contains("pool#0 \"ladder\": 3 graphs"),
        "{report}"
    );
    drop(t2);
    let report = dev.memory_report();
    assert_eq!(report.pools[0].held_bytes, 512, "{report}");
    assert_eq!(report.pools[0].shared_bytes, 256, "{report}");
    let held: u64 = report.graph_held_bytes();
    let info: u64 = report.graphs.iter().map(|g| g.info_bytes).sum();
    assert_eq!(held - info, 512, "{report}");
}

#[test]
fn rule_23_a_pool_belongs_to_one_device_and_one_pooled_stream() {
    let _suite = crate::suite_lock();
    let (a, _) = device_with(DeviceConfig::new().streams(2).unwrap());
    let (b, _) = device();
    let (ka, kb) = (kernels(&a), kernels(&b));
    let pool = a.graph_pool("ladder").unwrap();
    let (x, y) = (filled(&b, S0, &[1; 64]), b.alloc(S0, 256).unwrap());
    let err = b
        .capture_in(S0, &pool, |d| add_one(d, &kb, S0, &x, &y))
        .unwrap_err();
    assert!(
        matches!(
            err,
            ServerError::InvalidArgument {
                what: "graph pool",
                ..
            }
        ),
        "{err}"
    );
    assert!(b.captures().active().is_empty(), "nothing was prepared");
    let (x, y) = (filled(&a, S0, &[1; 64]), a.alloc(S0, 256).unwrap());
    let g = a
        .capture_in(S0, &pool, |d| add_one(d, &ka, S0, &x, &y))
        .unwrap();
    // S1 folds onto the other pooled stream: its capture into the pool is refused,
    // naming both, and leaves the stream free.
    assert_ne!(a.pooled_index(S1), a.pooled_index(S0));
    let (x1, y1) = (filled(&a, S1, &[1; 64]), a.alloc(S1, 256).unwrap());
    let err = a
        .capture_in(S1, &pool, |d| add_one(d, &ka, S1, &x1, &y1))
        .unwrap_err();
    assert!(text(&err).contains("pooled stream 0"), "{err}");
    assert!(a.captures().active().is_empty());
    a.capture(S1, |d| add_one(d, &ka, S1, &x1, &y1)).unwrap();
    a.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&a, S0, &y).unwrap(), vec![2; 64]);
}
