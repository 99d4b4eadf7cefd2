//! Descriptor-pool growth, forced with a small `VulkanOptions::sets_per_pool` (lavapipe
//! never reports `VK_ERROR_OUT_OF_POOL_MEMORY`, so the pools count their sets): a capture
//! of more launches than a pool holds gets more pools, and its replays give the right
//! bytes under validation. Launches that bind exactly the same buffers share one set.

use capture_core::{Arg, Builtin, StreamId};
use capture_suite::scenarios::{Harness, N, ramp, suite_lock};
use capture_vulkan::{MemoryMode, VulkanOptions};

use crate::support;

const S: StreamId = StreamId::new(0);
const PER_POOL: u32 = 2;
const LAUNCHES: u32 = 7;

/// The backend with [`PER_POOL`] sets a pool, or `None` after saying why it cannot be had.
fn small_pools(memory: MemoryMode) -> Option<capture_vulkan::VulkanBackend> {
    match support::with(VulkanOptions {
        memory,
        sets_per_pool: PER_POOL,
        ..VulkanOptions::from_env()
    }) {
        Ok(b) => Some(b),
        Err(why) => {
            println!("SKIP: descriptor pools: {why}");
            None
        }
    }
}

#[test]
fn a_capture_of_more_launches_than_a_pool_holds_grows_its_pools_and_replays_right() {
    let _suite = suite_lock();
    for memory in [MemoryMode::HostVisible, MemoryMode::ForcedStaging] {
        let Some(backend) = small_pools(memory) else {
            return;
        };
        let keep = backend.clone();
        let h = Harness::new(backend).expect("device");
        // A buffer of its own per launch: each binds something new, so needs a set.
        let xs: Vec<_> = (0..LAUNCHES)
            .map(|_| h.buffer(S, &ramp(1.0)).expect("x"))
            .collect();
        let y = h.buffer(S, &ramp(0.0)).expect("y");
        h.dev.sync(S).expect("settled");
        let before = keep.descriptor_pools_created();
        let g = h
            .dev
            .capture(S, |d| {
                for x in &xs {
                    d.launch(
                        S,
                        h.kernel(Builtin::Axpy),
                        [1, 1, 1],
                        &[Arg::read(x), Arg::read_write(&y)],
                        &Builtin::Axpy.info(N, 1.0),
                    )?;
                }
                Ok::<(), capture_core::ServerError>(())
            })
            .expect("graph");
        let window_pools = u64::from(LAUNCHES.div_ceil(PER_POOL));
        assert!(
            keep.descriptor_pools_created() - before >= window_pools,
            "{LAUNCHES} recorded launches at {PER_POOL} sets a pool made fewer than \
             {window_pools} pools"
        );
        // y = its ramp + x·7 after warmup, + x·7·3 after three replays.
        h.dev.replay(S, &g, 3).expect("replay");
        let expected: Vec<f32> = ramp(0.0)
            .iter()
            .zip(ramp(1.0))
            .map(|(y, x)| y + x * (4 * LAUNCHES) as f32)
            .collect();
        h.expect(S, &y, &expected);
        h.dev.drop_graph(g).expect("drop");
        drop((xs, y, h));
        support::assert_no_validation_messages(&keep);
    }
}

#[test]
fn launches_that_bind_the_same_buffers_share_one_set() {
    let _suite = suite_lock();
    let Some(backend) = small_pools(VulkanOptions::from_env().memory) else {
        return;
    };
    let keep = backend.clone();
    let h = Harness::new(backend).expect("device");
    let x = h.buffer(S, &ramp(1.0)).expect("x");
    let y = h.buffer(S, &ramp(0.0)).expect("y");
    h.dev.sync(S).expect("settled");
    let before = keep.descriptor_pools_created();
    let g = h
        .dev
        .capture(S, |d| {
            for _ in 0..LAUNCHES {
                d.launch(
                    S,
                    h.kernel(Builtin::Axpy),
                    [1, 1, 1],
                    &[Arg::read(&x), Arg::read_write(&y)],
                    &Builtin::Axpy.info(N, 1.0),
                )?;
            }
            Ok::<(), capture_core::ServerError>(())
        })
        .expect("graph");
    // One set for the warmup's batch and one for the window: a pool each at most.
    assert!(
        keep.descriptor_pools_created() - before <= 2,
        "{LAUNCHES} identical launches made {} pools",
        keep.descriptor_pools_created() - before
    );
    h.dev.replay(S, &g, 3).expect("replay");
    let expected: Vec<f32> = ramp(0.0)
        .iter()
        .zip(ramp(1.0))
        .map(|(y, x)| y + x * (4 * LAUNCHES) as f32)
        .collect();
    h.expect(S, &y, &expected);
    h.dev.drop_graph(g).expect("drop");
    drop((x, y, h));
    support::assert_no_validation_messages(&keep);
}
