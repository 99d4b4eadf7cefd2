//! Opening the backend for tests: validation on whenever installed, `SKIP:` when Vulkan
//! is missing unless `CAPTURE_REQUIRE_VULKAN` is set (`1`: a device and the Khronos
//! validation layer; `device`: a device, the layer where installed, as on a GPU machine
//! without it), and the check that the layer said nothing.

use capture_vulkan::{MemoryMode, VulkanBackend, VulkanOptions};

/// Whether the environment requires a Vulkan device (a missing one then fails the
/// tests): `CAPTURE_REQUIRE_VULKAN=1` or `=device`.
pub(crate) fn required() -> bool {
    std::env::var("CAPTURE_REQUIRE_VULKAN").is_ok_and(|v| v == "1" || v == "device")
}

/// Whether the environment requires the Khronos validation layer too:
/// `CAPTURE_REQUIRE_VULKAN=1`.
pub(crate) fn layer_required() -> bool {
    std::env::var("CAPTURE_REQUIRE_VULKAN").is_ok_and(|v| v == "1")
}

/// The backend in `memory` mode with validation on (on the device
/// `CAPTURE_VULKAN_DEVICE` names, if any), or why it cannot be had.
pub(crate) fn backend(memory: MemoryMode) -> Result<VulkanBackend, String> {
    with(VulkanOptions {
        memory,
        ..VulkanOptions::from_env()
    })
}

/// The backend opened with `options` and validation on, or why it cannot be had.
pub(crate) fn with(options: VulkanOptions) -> Result<VulkanBackend, String> {
    match VulkanBackend::new(VulkanOptions {
        validation: true,
        ..options
    }) {
        Ok(b) => {
            let (major, minor, patch) = b.api_version();
            println!(
                "vulkan device: {} (API {major}.{minor}.{patch}), {}, validation {}, loops by \
                 {:?}",
                b.device_name(),
                b.memory_choice(),
                if b.validation_enabled() { "on" } else { "off" },
                b.loop_emulation()
            );
            if layer_required() {
                assert!(
                    b.validation_enabled(),
                    "CAPTURE_REQUIRE_VULKAN=1 but the Khronos validation layer is not enabled"
                );
            }
            Ok(b)
        }
        Err(e) if required() => panic!("CAPTURE_REQUIRE_VULKAN is set and {e}"),
        Err(e) => Err(e.to_string()),
    }
}

/// Panics if the validation layer reported any warning or error.
pub(crate) fn assert_no_validation_messages(backend: &VulkanBackend) {
    let messages = backend.take_validation_messages();
    assert!(
        messages.is_empty(),
        "the validation layer reported {} message(s):\n{}",
        messages.len(),
        messages.join("\n")
    );
}
