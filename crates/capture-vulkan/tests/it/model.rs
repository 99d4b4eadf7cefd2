//! The model-based test on lavapipe: random programs from `capture_suite::model`, each on
//! a fresh device over the Vulkan backend (host-visible pages, then forced staging),
//! checked op by op against the reference model, with the validation layer judging every
//! case. Cases: `CAPTURE_PROPTEST_CASES`, a tenth of it on Vulkan (default 300 per memory
//! mode); a failure shrinks and its seed is kept in `tests/it/model-regressions/`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use capture_suite::model;
use capture_suite::scenarios::suite_lock;
use capture_vulkan::{MemoryMode, VulkanBackend};
use proptest::test_runner::{Config, FileFailurePersistence, TestCaseError, TestError, TestRunner};

use crate::support;

fn cases() -> u32 {
    std::env::var("CAPTURE_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .map_or(300, |n| (n / 10).max(20))
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
    let cases = std::env::var("CAPTURE_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .map_or(20, |n| (n / 100).max(10));
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
    let ran = AtomicU64::new(0);
    let start = Instant::now();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(regressions))),
        source_file: Some(file!()),
        ..Config::default()
    });
    let result = runner.run(strategy, |program| {
        let _suite = suite_lock();
        ran.fetch_add(1, Ordering::Relaxed);
        let checked = check(&|| backend.clone(), &program);
        let messages = backend.take_validation_messages();
        if !messages.is_empty() {
            return Err(TestCaseError::fail(format!(
                "the validation layer reported {} message(s):\n{}",
                messages.len(),
                messages.join("\n")
            )));
        }
        checked.map_err(|v| TestCaseError::fail(v.to_string()))
    });
    let ran = ran.load(Ordering::Relaxed);
    match result {
        Ok(()) => {
            let per_case = start.elapsed().as_secs_f64() * 1000.0 / ran.max(1) as f64;
            println!(
                "model: {ran} cases on Vulkan ({}, {label}), 0 violations ({per_case:.1} ms per case)",
                backend.device_name()
            );
        }
        Err(TestError::Fail(reason, program)) => {
            panic!("model: violation on Vulkan ({label}): {reason}\nminimal program:\n{program}")
        }
        Err(TestError::Abort(reason)) => panic!("model: aborted on Vulkan ({label}): {reason}"),
    }
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
