//! Missing Vulkan is a typed error saying why, never a panic.

use capture_vulkan::{MemoryMode, VulkanBackend, VulkanOptions};

#[test]
fn a_missing_loader_is_a_typed_unavailable_error() {
    let err = VulkanBackend::new(VulkanOptions {
        loader: Some("/nonexistent/libvulkan.so.1".into()),
        validation: true,
        memory: MemoryMode::HostVisible,
        ..VulkanOptions::default()
    })
    .unwrap_err();
    assert!(err.why().starts_with("no Vulkan loader"), "{err}");
    assert!(err.to_string().starts_with("Vulkan unavailable: "), "{err}");
    let as_server: capture_core::ServerError = err.into();
    assert!(
        capture_core::Chain(&as_server)
            .to_string()
            .contains("Vulkan unavailable: no Vulkan loader"),
    );
}
