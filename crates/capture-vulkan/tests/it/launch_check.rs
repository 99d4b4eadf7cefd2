//! The core's launch check on Vulkan: the same refusals as on the mock, before the
//! driver sees the launch.

use capture_vulkan::MemoryMode;

use crate::support;

#[test]
fn the_core_refuses_a_launch_that_does_not_fit_before_vulkan_sees_it() {
    let backend = match support::backend(MemoryMode::HostVisible) {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: launch check: {why}");
            return;
        }
    };
    let handle = backend.clone();
    let refusals = capture_suite::launch_check::refused_launches(backend).unwrap();
    let launches: Vec<_> = refusals.iter().map(|r| r.launch).collect();
    assert_eq!(
        launches,
        [
            "one argument too many",
            "access beyond the declaration",
            "block beyond the device",
            "shared memory beyond the device",
            "empty grid",
            "programmatic launch",
            "misaligned range"
        ],
        "this device binds at any byte: the misaligned case is unreachable here"
    );
    support::assert_no_validation_messages(&handle);
}

#[test]
fn one_backend_value_hosts_devices_one_after_another_and_side_by_side() {
    let backend = match support::backend(MemoryMode::Auto) {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: devices one after another: {why}");
            return;
        }
    };
    let results = capture_suite::reuse::devices_one_after_another(&backend, 2).unwrap();
    assert_eq!(results, [3.0; 5]);
    support::assert_no_validation_messages(&backend);
}

#[test]
fn a_captured_launch_changes_through_its_slots_and_only_later_replays_see_it() {
    use capture_core::{
        Arg, Builtin, Device, DeviceConfig, Dims, GraphUpdates, ServerError, SlotMismatch, StreamId,
    };
    let backend = match support::backend(MemoryMode::HostVisible) {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: slots on Vulkan: {why}");
            return;
        }
    };
    let handle = backend.clone();
    {
        let dev = Device::new(backend, DeviceConfig::new()).unwrap();
        assert_eq!(dev.graph_updates(), GraphUpdates::Supported);
        let s = StreamId::new(0);
        let alloc = |v: f32| {
            let b = dev.alloc(s, 16).unwrap();
            dev.write_values(s, &b, 0, &[v; 4]).unwrap();
            b
        };
        let (x, x2, y, y2) = (alloc(1.0), alloc(2.0), alloc(0.0), alloc(0.0));
        let (add, copy) = (dev.builtin(Builtin::AddScalar), dev.builtin(Builtin::Copy));
        let g = dev
            .capture(s, |d| {
                // A launch before and after the slotted one: three secondaries, in order.
                d.launch(
                    s,
                    &copy,
                    [1, 1, 1],
                    &[Arg::read(&x), Arg::write(&y)],
                    &Builtin::Copy.info(4, 0.0),
                )?;
                d.launch(
                    s,
                    &add,
                    Dims::grid([1, 1, 1]).up_to([4, 1, 1]).slot("grid"),
                    &[Arg::read(&x).slot("x"), Arg::write(&y).slot("y")],
                    &Builtin::AddScalar.info(4, 10.0),
                )?;
                d.launch(
                    s,
                    &add,
                    [1, 1, 1],
                    &[Arg::read(&y), Arg::write(&y)],
                    &Builtin::AddScalar.info(4, 100.0),
                )
            })
            .unwrap();
        assert_eq!(g.slots().unwrap().len(), 3);
        dev.replay(s, &g, 1).unwrap();
        // Submitted, maybe not run: the updates reach only the next replay.
        g.rebind("x", &x2).unwrap();
        g.rebind("y", &y2).unwrap();
        g.set_grid("grid", [4, 1, 1]).unwrap();
        dev.replay(s, &g, 1).unwrap();
        // The fixed launches still read x and write y: y = x + 100.
        assert_eq!(dev.read_values::<f32>(s, &y).unwrap(), [101.0; 4]);
        assert_eq!(dev.read_values::<f32>(s, &y2).unwrap(), [12.0; 4]);
        // Refused, changing nothing.
        match g.set_grid("grid", [5, 1, 1]) {
            Err(ServerError::SlotRefused(r)) => {
                assert!(
                    matches!(r.mismatch, SlotMismatch::GridPastMax { .. }),
                    "{r}"
                );
            }
            other => panic!("expected the grid refused, got {other:?}"),
        }
        dev.write_values(s, &y2, 0, &[0.0f32; 4]).unwrap();
        dev.replay(s, &g, 3).unwrap();
        assert_eq!(dev.read_values::<f32>(s, &y2).unwrap(), [12.0; 4]);
        drop(g);
        dev.cleanup().unwrap();
    }
    support::assert_no_validation_messages(&handle);
}

/// A loop rebinding a slot over many buffers (a KV cache's blocks) holds a bounded number
/// of descriptor pools (issue 45, item 6): the set an update takes goes back to a free
/// list once the secondary it was recorded in retires, and the next update rewrites it,
/// instead of every update taking a set the graph holds until it drops.
#[test]
fn a_loop_of_rebinds_over_many_buffers_holds_a_bounded_number_of_descriptor_pools() {
    use capture_core::{Arg, Builtin, Device, DeviceConfig, StreamId};
    use capture_vulkan::{VulkanBackend, VulkanOptions};
    let backend = match support::with(VulkanOptions {
        memory: MemoryMode::HostVisible,
        sets_per_pool: 4,
        ..VulkanOptions::from_env()
    }) {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: rebind loop on Vulkan: {why}");
            return;
        }
    };
    let handle: VulkanBackend = backend.clone();
    {
        let dev = Device::new(backend, DeviceConfig::new()).unwrap();
        let s = StreamId::new(0);
        let blocks: Vec<_> = (0..32)
            .map(|i| {
                let b = dev.alloc(s, 16).unwrap();
                dev.write_values(s, &b, 0, &[i as f32; 4]).unwrap();
                b
            })
            .collect();
        let y = dev.alloc(s, 16).unwrap();
        let add = dev.builtin(Builtin::AddScalar);
        let g = dev
            .capture(s, |d| {
                d.launch(
                    s,
                    &add,
                    [1, 1, 1],
                    &[Arg::read(&blocks[0]).slot("kv"), Arg::write(&y)],
                    &Builtin::AddScalar.info(4, 0.5),
                )
            })
            .unwrap();
        let kv = g.buffer_slot("kv").unwrap();
        let before = handle.descriptor_pools_created();
        for round in 0..400usize {
            let block = round % blocks.len();
            kv.rebind(&blocks[block]).unwrap();
            dev.replay(s, &g, 1).unwrap();
            if round % 8 == 7 {
                // Each token's logits read back, as a decode loop does now and then.
                assert_eq!(
                    dev.read_values::<f32>(s, &y).unwrap(),
                    [block as f32 + 0.5; 4]
                );
            }
        }
        let made = handle.descriptor_pools_created() - before;
        // 400 updates over 32 buffers: one set per update would be 100 pools of 4.
        assert!(
            made <= 4,
            "{made} descriptor pools made for 400 updates (4 sets a pool)"
        );
        drop(g);
        dev.sync(s).unwrap();
    }
    support::assert_no_validation_messages(&handle);
}
