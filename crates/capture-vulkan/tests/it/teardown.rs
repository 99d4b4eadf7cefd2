//! Dropping a device while another stream's queued work still reads a stream's pages:
//! every stream finishes before any stream's memory is destroyed (rule 19).

use capture_core::{Arg, StreamId};
use capture_suite::scenarios::{Harness, N, ramp, suite_lock};
use capture_vulkan::MemoryMode;

use crate::support;

const S0: StreamId = StreamId::new(0);
const S1: StreamId = StreamId::new(1);

#[test]
fn dropping_a_device_with_cross_stream_work_queued_destroys_nothing_in_use() {
    let _suite = suite_lock();
    for memory in [MemoryMode::HostVisible, MemoryMode::ForcedStaging] {
        let backend = match support::backend(memory) {
            Ok(b) => b,
            Err(why) => {
                println!("SKIP: teardown: {why}");
                return;
            }
        };
        let keep = backend.clone();
        let h = Harness::new(backend).expect("device");
        // S1 queues launches reading S0's buffer; nothing waits for them.
        let x = h.buffer(S0, &ramp(1.0)).expect("x");
        let y = h.dev.alloc(S1, N * 4).expect("y");
        for _ in 0..4 {
            h.launch(
                S1,
                capture_core::Builtin::AddScalar,
                &[Arg::read(&x), Arg::write(&y)],
                N,
                1.0,
            )
            .expect("launch");
        }
        drop((x, y));
        drop(h);
        support::assert_no_validation_messages(&keep);
    }
}
