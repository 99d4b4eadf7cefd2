//! `cargo xtask test`: the README's test command, and what CI runs.
//!
//! Installs what the tests need when it is missing, runs the gate (fmt, clippy, docs,
//! tidy), then every test of the workspace, and ends with a summary of which backends
//! ran and which were skipped and why.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::summary::{Backend, Summary};
use crate::{tidy, workspace_root};

const HELP: &str = "usage: cargo xtask test [--no-gate]

Runs the gate (cargo fmt --check, clippy -D warnings, rustdoc -D warnings, tidy), then
`cargo test --workspace` with CI=true (so a missing or changed insta snapshot fails),
then prints which backends ran and which were skipped and why.

  --no-gate   skip the gate (for a quick local rerun of the tests only)";

pub(crate) fn run(args: &[String]) -> Result<()> {
    let mut gate = true;
    for arg in args {
        match arg.as_str() {
            "--no-gate" => gate = false,
            "-h" | "--help" => {
                println!("{HELP}");
                return Ok(());
            }
            other => bail!("unknown option {other:?}\n\n{HELP}"),
        }
    }
    let root = workspace_root();
    if gate {
        step(
            "cargo fmt --check",
            &mut cargo(&["fmt", "--all", "--", "--check"]),
        )?;
        step(
            "cargo clippy",
            &mut cargo(&[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ]),
        )?;
        step(
            "cargo doc",
            cargo(&["doc", "--workspace", "--no-deps"]).env("RUSTDOCFLAGS", "-D warnings"),
        )?;
        let problems = tidy::check(&root)?;
        if !problems.is_empty() {
            for p in &problems {
                eprintln!("tidy: {p}");
            }
            bail!("tidy found {} problem(s)", problems.len());
        }
        println!("xtask: tidy ok");
    }

    crate::vulkan::ensure()?;
    let mut test = cargo(&["test", "--workspace", "--", "--show-output"]);
    test.env("CI", "true")
        .env("INSTA_UPDATE", "no")
        .env("CAPTURE_REQUIRE_VULKAN", "1")
        .env("LP_NUM_THREADS", "0");
    let counts = run_counting(test)?;

    let backends = vec![
        Backend::ran(
            "core",
            "capture-core's unit and integration tests".to_string(),
        ),
        if counts.scenarios > 0 {
            Backend::ran(
                "mock",
                format!(
                    "{} scenarios of the shared suite passed on the mock",
                    counts.scenarios
                ),
            )
        } else {
            Backend::failed("mock", "no scenario of the suite passed on the mock")
        },
        if counts.vulkan.0 > 0 && counts.vulkan.1 > 0 && counts.canary {
            Backend::ran(
                "vulkan",
                format!(
                    "{}: {} scenarios host-visible, {} forced-staging, under validation with the canary caught; scenarios it cannot run: none",
                    counts.vulkan_device.as_deref().unwrap_or("unknown device"),
                    counts.vulkan.0,
                    counts.vulkan.1
                ),
            )
        } else {
            Backend::failed("vulkan", "the Vulkan suite or its canary did not pass")
        },
        Backend::not_built(
            "cuda",
            "capture-cuda is not implemented yet (its issue is open)",
        ),
    ];
    let summary = Summary { counts, backends };
    summary.print();
    if summary.counts.vulkan.0 == 0 || summary.counts.vulkan.1 == 0 || !summary.counts.canary {
        bail!("the Vulkan suite did not run in both memory modes with its canary");
    }
    if summary.counts.scenarios == 0 {
        bail!("the scenario suite did not run on the mock");
    }
    if summary.counts.failed > 0 {
        bail!("{} test(s) failed", summary.counts.failed);
    }
    Ok(())
}

fn cargo(args: &[&str]) -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.args(args).current_dir(workspace_root());
    c
}

fn step(name: &str, command: &mut Command) -> Result<()> {
    println!("xtask: {name}");
    let status = command
        .status()
        .with_context(|| format!("starting {name}"))?;
    if !status.success() {
        bail!("{name} failed ({status})");
    }
    Ok(())
}

/// Passed / failed / ignored totals over every `test result:` line cargo printed.
#[derive(Debug, Default, Clone)]
pub(crate) struct Counts {
    pub(crate) passed: u64,
    pub(crate) failed: u64,
    pub(crate) ignored: u64,
    pub(crate) binaries: u64,
    /// Scenario-suite tests that passed on the mock (`test suite::<scenario> ... ok`).
    pub(crate) scenarios: u64,
    /// Scenario-suite tests that passed on Vulkan, host-visible and forced-staging.
    pub(crate) vulkan: (u64, u64),
    /// Whether the Vulkan validation canary passed.
    pub(crate) canary: bool,
    /// The Vulkan device the tests ran on.
    pub(crate) vulkan_device: Option<String>,
    /// `SKIP:` lines the tests printed, each once.
    pub(crate) skips: Vec<String>,
}

fn run_counting(mut command: Command) -> Result<Counts> {
    println!("xtask: cargo test --workspace");
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .context("starting cargo test")?;
    let stdout = child.stdout.take().context("cargo test's stdout")?;
    let mut counts = Counts::default();
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        println!("{line}");
        let ok = line.ends_with("... ok");
        if ok && line.starts_with("test suite::") {
            counts.scenarios += 1;
        }
        if ok && line.starts_with("test host_visible::") {
            counts.vulkan.0 += 1;
        }
        if ok && line.starts_with("test forced_staging::") {
            counts.vulkan.1 += 1;
        }
        if ok && line.starts_with("test canary::") {
            counts.canary = true;
        }
        if let Some(device) = line.strip_prefix("vulkan device: ") {
            counts
                .vulkan_device
                .get_or_insert_with(|| device.to_string());
        }
        if line.starts_with("SKIP:") && !counts.skips.iter().any(|s| s == &line) {
            counts.skips.push(line.clone());
        }
        if let Some(rest) = line.strip_prefix("test result: ") {
            counts.binaries += 1;
            counts.passed += number_before(rest, " passed");
            counts.failed += number_before(rest, " failed");
            counts.ignored += number_before(rest, " ignored");
        } else if let Some(rest) = line.strip_prefix("alloc_count: ") {
            counts.binaries += 1;
            counts.passed += number_before(rest, " passed");
            counts.failed += number_before(rest, " failed");
        }
    }
    let status = child.wait()?;
    if !status.success() && counts.failed == 0 {
        // A build failure or a crashed binary prints no failed count: count it.
        counts.failed += 1;
    }
    Ok(counts)
}

/// The number just before `label` in `text` ("3 passed" → 3), or 0.
fn number_before(text: &str, label: &str) -> u64 {
    text.split([';', ','])
        .find_map(|part| part.trim().strip_suffix(label.trim_start()))
        .and_then(|n| n.split_whitespace().last()?.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::number_before;

    #[test]
    fn counts_are_read_from_cargo_test_result_lines() {
        let line =
            "ok. 12 passed; 1 failed; 3 ignored; 0 measured; 0 filtered out; finished in 0.01s";
        assert_eq!(number_before(line, " passed"), 12);
        assert_eq!(number_before(line, " failed"), 1);
        assert_eq!(number_before(line, " ignored"), 3);
        assert_eq!(number_before("2 passed, 0 failed", " passed"), 2);
        assert_eq!(number_before("2 passed, 0 failed", " failed"), 0);
    }
}
