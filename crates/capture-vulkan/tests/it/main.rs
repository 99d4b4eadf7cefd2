//! capture-vulkan integration tests: the whole scenario suite in both memory modes, with
//! the validation layer judging every scenario (the canary that proves it watches is a
//! unit test of the driver), user kernels, the launch check, and a missing loader.
//!
//! Without Vulkan the tests print `SKIP:` and why, unless `CAPTURE_REQUIRE_VULKAN=1`
//! (which the README's test command sets after installing lavapipe): then they fail.

mod support;

mod host_visible {
    capture_suite::suite!(
        fallible: crate::support::backend(capture_vulkan::MemoryMode::HostVisible),
        after: crate::support::assert_no_validation_messages
    );
}

mod forced_staging {
    capture_suite::suite!(
        fallible: crate::support::backend(capture_vulkan::MemoryMode::ForcedStaging),
        after: crate::support::assert_no_validation_messages
    );
}

mod launch_check;
mod model;
mod teardown;
mod unavailable;
mod user_kernel;
