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
fn a_slot_is_refused_when_recorded_on_a_device_whose_graphs_cannot_change() {
    use capture_core::{
        Arg, Builtin, Device, DeviceConfig, GraphUpdates, ServerError, SlotMismatch, StreamId,
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
        assert!(matches!(dev.graph_updates(), GraphUpdates::Unsupported(_)));
        let s = StreamId::new(0);
        let (x, y) = (dev.alloc(s, 16).unwrap(), dev.alloc(s, 16).unwrap());
        dev.write_values(s, &x, 0, &[1.0f32; 4]).unwrap();
        let copy = dev.builtin(Builtin::Copy);
        let info = Builtin::Copy.info(4, 0.0);
        let launch = |x: Arg| dev.launch(s, &copy, [1, 1, 1], &[x, Arg::write(&y)], &info);
        dev.prepare(s).unwrap();
        launch(Arg::read(&x).slot("x")).expect("warmup runs it: outside a window a slot is a name");
        dev.begin(s).unwrap();
        // Refused when recorded, naming the slot: nothing recorded, the window goes on.
        match launch(Arg::read(&x).slot("x")) {
            Err(ServerError::SlotRefused(r)) => {
                assert_eq!(r.slot.as_str(), "x");
                assert!(matches!(r.mismatch, SlotMismatch::Unsupported(_)), "{r}");
            }
            other => panic!("expected the slot refused, got {other:?}"),
        }
        launch(Arg::read(&x)).unwrap();
        let graph = dev.end(s).expect("the refused slot doomed nothing");
        assert!(graph.slots().unwrap().is_empty());
        dev.replay(s, &graph, 1).unwrap();
        assert_eq!(dev.read_values::<f32>(s, &y).unwrap(), [1.0; 4]);
    }
    support::assert_no_validation_messages(&handle);
}
