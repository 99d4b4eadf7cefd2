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
