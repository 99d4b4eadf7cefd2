//! Device choice on a real driver: a device named by a piece of its name opens, and a
//! name or index no device has is a typed `Unavailable` listing the devices seen (run
//! alone, with no other device holding the loader, that refusal once crashed: the loader
//! was unloaded before the instance was destroyed).

use capture_vulkan::{DeviceSelector, MemoryMode, VulkanBackend, VulkanOptions};

use crate::support;

#[test]
fn a_device_named_by_a_piece_of_its_name_opens() {
    let default = match support::backend(MemoryMode::Auto) {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: device choice: {why}");
            return;
        }
    };
    let name = default.device_name().to_owned();
    let piece: String = name.chars().take(6).collect::<String>().to_uppercase();
    let named = support::with(VulkanOptions {
        device: Some(DeviceSelector::Name(piece)),
        ..VulkanOptions::default()
    })
    .expect("the named device opens");
    assert_eq!(named.device_name(), name);
    support::assert_no_validation_messages(&named);
}

#[test]
fn an_unknown_device_name_or_index_is_unavailable_listing_the_devices_seen() {
    let default = match support::backend(MemoryMode::Auto) {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: device choice: {why}");
            return;
        }
    };
    let name = default.device_name().to_owned();
    drop(default);
    for (selector, shown) in [
        (
            DeviceSelector::Name("no such device".into()),
            "name \"no such device\"",
        ),
        (DeviceSelector::Index(4096), "index 4096"),
    ] {
        let err = VulkanBackend::new(VulkanOptions {
            device: Some(selector),
            ..VulkanOptions::default()
        })
        .unwrap_err();
        assert_eq!(err.backend(), "Vulkan");
        let why = err.why();
        assert!(
            why.starts_with(&format!("no Vulkan device matches the device {shown}")),
            "{why}"
        );
        assert!(why.contains("devices seen: 0: "), "{why}");
        assert!(why.contains(&name), "{why}");
    }
}
