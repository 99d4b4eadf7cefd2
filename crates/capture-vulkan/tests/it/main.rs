//! capture-vulkan integration tests: the whole scenario suite in both memory modes, with
//! the validation layer judging every scenario, and the canary that proves it watches.
//!
//! Without Vulkan the tests print `SKIP:` and why, unless `CAPTURE_REQUIRE_VULKAN=1`
//! (which the README's test command sets after installing lavapipe): then they fail.

mod support;

mod host_visible {
    capture_mock::suite!(
        fallible: crate::support::backend(capture_vulkan::MemoryMode::HostVisible),
        after: crate::support::assert_no_validation_messages
    );
}

mod forced_staging {
    capture_mock::suite!(
        fallible: crate::support::backend(capture_vulkan::MemoryMode::ForcedStaging),
        after: crate::support::assert_no_validation_messages
    );
}

mod canary;
mod unavailable;
mod user_kernel;
