//! capture-vulkan integration tests: the whole scenario suite in both memory modes, with
//! the validation layer judging every scenario (the canary that proves it watches is a
//! unit test of the driver), once more with loops on the indirect fallback
//! (`indirect_loops`), and once more on a device the test made itself and handed
//! over (`external`; `adopted` checks what the caller keeps), user kernels and their
//! SPIR-V check, the launch check, a missing loader, device and memory choice, the
//! submission cadence, cross-stream order when only a wait follows another stream's
//! write, failures at the backend's own Vulkan calls (its fault hook) and
//! what they leave alive, the allocation count limit, descriptor-pool growth, the
//! read-back page a stream keeps, loop replays (rule 30) and what an iteration after the
//! flag's costs.
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

/// Every scenario once more on the loop fallback (rule 30 without conditional
/// rendering): every dispatch a window records is indirect from its group-count slot.
mod indirect_loops {
    capture_suite::suite!(
        fallible: crate::support::with(capture_vulkan::VulkanOptions {
            indirect_loops: true,
            ..capture_vulkan::VulkanOptions::from_env()
        }),
        after: crate::support::assert_no_validation_messages
    );
}

mod adopted;
mod external {
    capture_suite::suite!(
        fallible: crate::adopted::shared_backend(),
        after: crate::adopted::assert_shared_quiet
    );
}

mod allocation_limit;
mod cadence;
mod cross_stream;
mod descriptor_pools;
mod device_choice;
mod error_leaks;
mod launch_check;
mod launch_model;
mod loops;
mod memory_choice;
mod model;
mod read_staging;
mod submit_faults;
mod teardown;
mod unavailable;
mod user_kernel;
