//! The memory choice on a real driver, as `VulkanBackend::memory_choice` reports it:
//! forced staging gets unmapped device-local pages; a device with unified memory (a CPU
//! device such as lavapipe) gets mapped device-local pages by default.

use capture_vulkan::{MemoryMode, PagePlacement};

use crate::support;

#[test]
fn the_memory_choice_follows_the_mode_and_the_device() {
    let auto = match support::backend(MemoryMode::Auto) {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: memory choice: {why}");
            return;
        }
    };
    let choice = auto.memory_choice();
    if auto.device_kind() == "CPU" || auto.device_kind() == "integrated GPU" {
        assert_eq!(choice.placement(), PagePlacement::DeviceMapped, "{choice}");
        assert!(!choice.staged());
    }
    assert!(
        choice.to_string().contains(&choice.placement().to_string()),
        "{choice}"
    );
    let forced = support::backend(MemoryMode::ForcedStaging).expect("forced staging");
    let choice = forced.memory_choice();
    assert_eq!(choice.placement(), PagePlacement::DeviceStaged, "{choice}");
    assert!(choice.staged());
    assert!(
        choice
            .to_string()
            .starts_with("device-local pages with staging"),
        "{choice}"
    );
}
