//! Cross-stream order on lavapipe when nothing but a device-side wait stands between
//! another stream's write and a host read (rule 18).
//!
//! `begin` makes its stream wait, on the device, for every other stream's queued work,
//! and the core then counts those streams as followed: a later host read on the stream
//! waits only for the stream's own fence. On Vulkan the wait rides in the submitter's next
//! submission; when the window leaves the submitter with no eager work after it, the read's
//! fence has to submit the wait on its own, or it names a timeline value the wait is
//! not behind and the host reads while the other stream still writes. The model test
//! found it (`model-regressions/host_visible.txt`); this is its shrunk form, made slow
//! on the writer's side so a read that does not wait reads stale bytes every time.

use capture_core::{Arg, Builtin, Chain, StreamId};
use capture_suite::scenarios::{Harness, N, bytes, floats, suite_lock};
use capture_vulkan::MemoryMode;

use crate::support;

const S0: StreamId = StreamId::new(0);
const S1: StreamId = StreamId::new(1);

/// Elements of the buffer the other stream fills.
const BIG: u64 = 1 << 16;

/// Elements of the other stream's own buffer, and how many launches fill it before x:
/// launches of one workgroup (grid-stride) that keep lavapipe's queue busy for tens of
/// milliseconds, while S1's capture and read take well under one.
const SLOW: u64 = 1 << 20;
const AHEAD: usize = 16;

#[test]
fn a_host_read_after_a_window_waits_for_another_streams_write_of_the_buffer() {
    let _suite = suite_lock();
    for memory in [MemoryMode::HostVisible, MemoryMode::ForcedStaging] {
        let backend = match support::backend(memory) {
            Ok(b) => b,
            Err(why) => {
                println!("SKIP: cross-stream order: {why}");
                return;
            }
        };
        let keep = backend.clone();
        let h = Harness::new(backend).expect("device");
        let busy = h.dev.alloc(S0, SLOW * 4).expect("busy");
        for round in 0..3u8 {
            let value = 7.0 + f32::from(round);
            // x lives on S1 and holds zeros, settled.
            let x = h.dev.alloc(S1, BIG * 4).expect("x");
            h.dev
                .write(S1, &x, 0, vec![0; (BIG * 4) as usize])
                .expect("zeros");
            h.dev.sync(S1).expect("sync");
            // S0 queues slow launches, then one writing all of x; nothing waits for them
            // on the host.
            for _ in 0..AHEAD {
                h.launch(S0, Builtin::Fill, &[Arg::write(&busy)], SLOW, 1.0)
                    .expect("busy fill on S0");
            }
            h.launch(S0, Builtin::Fill, &[Arg::write(&x)], BIG, value)
                .expect("fill on S0");
            // A capture on S1: `begin` makes S1 wait, on the device, for S0's queued
            // work; after the window S1 has no eager work queued.
            let scratch = h.dev.alloc(S1, N * 4).expect("scratch");
            let fill = h.kernel(Builtin::Fill);
            let graph = h
                .dev
                .capture(S1, |d| {
                    d.launch(
                        S1,
                        fill,
                        [1, 1, 1],
                        &[Arg::write(&scratch)],
                        &Builtin::Fill.info(N, 1.0),
                    )
                })
                .unwrap_or_else(|e| panic!("capture: {}", Chain(&e)));
            // The host read on x's own stream: it follows S0's write through S1's wait.
            let got = h
                .dev
                .read_range(S1, &x, (BIG - N) * 4, N * 4)
                .unwrap_or_else(|e| panic!("read: {}", Chain(&e)));
            assert_eq!(
                floats(&got),
                vec![value; N as usize],
                "{memory:?}, round {round}: the read ran before S0's fill of x (the tail of \
                 x read back; the model has it filled)"
            );
            let whole = h.dev.read(S1, &x).expect("whole read");
            assert_eq!(whole, bytes(&vec![value; BIG as usize]));
            h.dev.drop_graph(graph).expect("drop graph");
        }
        drop(h);
        support::assert_no_validation_messages(&keep);
    }
}
