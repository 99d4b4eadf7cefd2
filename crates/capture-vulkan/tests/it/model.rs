//! The model-based test on lavapipe: random programs from `capture_suite::model`, each on
//! a fresh device over the Vulkan backend (host-visible pages, then forced staging),
//! checked op by op against the reference model, with the validation layer judging every
//! case. Cases: `CAPTURE_PROPTEST_CASES`, a tenth of it on Vulkan (default 300 per memory
//! mode); a failure shrinks and its seed is kept in `tests/it/model-regressions/`.

use capture_suite::model;
use capture_vulkan::{MemoryMode, VulkanBackend};

use crate::support;

fn cases() -> u32 {
    model::cases_from_env(300, 10, 20)
}

fn run(memory: MemoryMode, label: &str, regressions: &'static str) {
    run_with(
        memory,
        label,
        regressions,
        cases(),
        &model::program(),
        |make, program| model::check(make, program),
    );
}

/// The threaded variant on lavapipe: a fortieth of the cases, at least 10.
fn run_threads() {
    let cases = model::cases_from_env(20, 100, 10);
    run_with(
        MemoryMode::HostVisible,
        "threads, host-visible",
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/it/model-regressions/threads.txt"
        ),
        cases,
        &model::threads_program(),
        |make, program| model::check_threads(make, program),
    );
}

fn run_with<S>(
    memory: MemoryMode,
    label: &str,
    regressions: &'static str,
    cases: u32,
    strategy: &S,
    check: impl Fn(&dyn Fn() -> VulkanBackend, &S::Value) -> Result<(), model::Violation>,
) where
    S: proptest::strategy::Strategy,
    S::Value: std::fmt::Display,
{
    let backend: VulkanBackend = match support::backend(memory) {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: model on Vulkan: {why}");
            return;
        }
    };
    let label = format!("Vulkan ({}, {label})", backend.device_name());
    model::drive(&label, cases, regressions, strategy, |program| {
        let checked = check(&|| backend.clone(), program);
        let messages = backend.take_validation_messages();
        if !messages.is_empty() {
            return Err(format!(
                "the validation layer reported {} message(s):\n{}",
                messages.len(),
                messages.join("\n")
            ));
        }
        checked.map_err(|v| v.to_string())
    });
}

#[test]
fn model_on_host_visible_pages() {
    run(
        MemoryMode::HostVisible,
        "host-visible",
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/it/model-regressions/host_visible.txt"
        ),
    );
}

#[test]
fn model_on_forced_staging() {
    run(
        MemoryMode::ForcedStaging,
        "forced staging",
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/it/model-regressions/forced_staging.txt"
        ),
    );
}

#[test]
fn model_threads_on_host_visible_pages() {
    run_threads();
}
