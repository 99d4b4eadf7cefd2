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

Installs lavapipe and the Vulkan validation layer with apt, and fetches NVRTC (the
nvidia-cuda-nvrtc-cu12 wheel, with pip, into target/nvrtc) when missing. Vulkan and NVRTC
are required (CAPTURE_REQUIRE_VULKAN=1, CAPTURE_REQUIRE_NVRTC=1); CUDA is not (without a
driver its tests say SKIP; `cargo xtask test-gpu` requires it).

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
    let nvrtc_lib = crate::nvrtc::ensure()?;
    let ld_path = std::env::var("LD_LIBRARY_PATH").ok();
    let mut test = cargo(&["test", "--workspace", "--", "--show-output"]);
    test.env("CI", "true")
        .env("INSTA_UPDATE", "no")
        .env("CAPTURE_REQUIRE_VULKAN", "1")
        .env("CAPTURE_REQUIRE_NVRTC", "1")
        .env(
            "LD_LIBRARY_PATH",
            crate::nvrtc::prepend_path(&nvrtc_lib, ld_path.as_deref()),
        )
        .env("LP_NUM_THREADS", "0");
    let counts = run_counting("cargo test --workspace", test)?;

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
        cuda_row(&counts),
        nvrtc_row(&counts),
    ];
    let summary = Summary { counts, backends };
    summary.print();
    if summary.counts.vulkan.0 == 0 || summary.counts.vulkan.1 == 0 || !summary.counts.canary {
        bail!("the Vulkan suite did not run in both memory modes with its canary");
    }
    if summary.counts.scenarios == 0 {
        bail!("the scenario suite did not run on the mock");
    }
    if !summary.counts.nvrtc {
        bail!("capture-cuda's NVRTC test did not pass (NVRTC is required: {NVRTC_TEST})");
    }
    if summary.counts.failed > 0 {
        bail!("{} test(s) failed", summary.counts.failed);
    }
    Ok(())
}

/// The NVRTC test of capture-cuda, which `cargo xtask test` requires to pass.
const NVRTC_TEST: &str = "nvrtc::every_builtin_compiles_to_the_shipped_ptx";

/// The `cuda` row: `ran` when scenarios passed under `cuda::` and none said `SKIP:` for
/// CUDA; otherwise `skipped` with the first reason a test gave.
fn cuda_row(counts: &Counts) -> Backend {
    let skip = counts
        .skips
        .iter()
        .find(|s| s.contains("CUDA"))
        .map(|s| skip_reason(s));
    match skip {
        None if counts.cuda > 0 => Backend::ran(
            "cuda",
            format!(
                "{}: {} scenarios passed",
                counts.cuda_device.as_deref().unwrap_or("unknown device"),
                counts.cuda
            ),
        ),
        None => Backend::skipped(
            "cuda",
            "no `cuda::` scenario test ran, and no test said why",
        ),
        Some(why) => Backend::skipped("cuda", why),
    }
}

/// The `nvrtc` row: whether capture-cuda's NVRTC test passed.
fn nvrtc_row(counts: &Counts) -> Backend {
    if counts.nvrtc {
        Backend::ran(
            "nvrtc",
            "NVRTC compiled every builtin to PTX for sm_80 and sm_90".to_string(),
        )
    } else {
        let why = counts
            .skips
            .iter()
            .find(|s| s.starts_with("SKIP: nvrtc"))
            .map_or("did not pass", |s| skip_reason(s));
        Backend::failed("nvrtc", &format!("{NVRTC_TEST}: {why}"))
    }
}

/// The reason of a `SKIP: <what>: <reason>` line ("CUDA unavailable: libcuda.so not
/// found"), or the whole line after `SKIP: ` when it names no test.
pub(crate) fn skip_reason(line: &str) -> &str {
    let rest = line.strip_prefix("SKIP:").unwrap_or(line).trim_start();
    match rest.split_once(": ") {
        Some((_, why)) if !why.is_empty() => why,
        _ => rest,
    }
}

pub(crate) fn cargo(args: &[&str]) -> Command {
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
    /// Scenario-suite tests that passed on CUDA (`test cuda::<scenario> ... ok`); a
    /// scenario that said `SKIP:` passes too, so read with [`Counts::skips`].
    pub(crate) cuda: u64,
    /// The CUDA device the tests ran on (`cuda device: <name> (compute X.Y), driver V`).
    pub(crate) cuda_device: Option<String>,
    /// Whether capture-cuda's NVRTC test passed.
    pub(crate) nvrtc: bool,
    /// `SKIP:` lines the tests printed, each once.
    pub(crate) skips: Vec<String>,
}

/// Runs `command` (a `cargo test`), echoing its output and counting as it goes.
pub(crate) fn run_counting(name: &str, mut command: Command) -> Result<Counts> {
    println!("xtask: {name}");
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {name}"))?;
    let stdout = child.stdout.take().context("cargo test's stdout")?;
    let mut counts = Counts::default();
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        println!("{line}");
        counts.read(&line);
    }
    let status = child.wait()?;
    if !status.success() && counts.failed == 0 {
        // A build failure or a crashed binary prints no failed count: count it.
        counts.failed += 1;
    }
    Ok(counts)
}

impl Counts {
    /// Counts one line of `cargo test` output.
    fn read(&mut self, line: &str) {
        if let Some(name) = line
            .strip_prefix("test ")
            .and_then(|l| l.strip_suffix(" ... ok"))
        {
            let module = name.split("::").next().unwrap_or_default();
            match module {
                "suite" => self.scenarios += 1,
                "host_visible" => self.vulkan.0 += 1,
                "forced_staging" => self.vulkan.1 += 1,
                "canary" => self.canary = true,
                "cuda" => self.cuda += 1,
                _ if name == NVRTC_TEST => self.nvrtc = true,
                _ => {}
            }
        }
        if let Some(device) = line.strip_prefix("vulkan device: ") {
            self.vulkan_device.get_or_insert_with(|| device.to_string());
        }
        if let Some(device) = line.strip_prefix("cuda device: ") {
            self.cuda_device.get_or_insert_with(|| device.to_string());
        }
        if line.starts_with("SKIP:") && !self.skips.iter().any(|s| s == line) {
            self.skips.push(line.to_string());
        }
        if let Some(rest) = line.strip_prefix("test result: ") {
            self.binaries += 1;
            self.passed += number_before(rest, " passed");
            self.failed += number_before(rest, " failed");
            self.ignored += number_before(rest, " ignored");
        } else if let Some(rest) = line.strip_prefix("alloc_count: ") {
            self.binaries += 1;
            self.passed += number_before(rest, " passed");
            self.failed += number_before(rest, " failed");
        }
    }
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
    use super::*;

    fn counts(lines: &str) -> Counts {
        let mut counts = Counts::default();
        for line in lines.lines() {
            counts.read(line.trim_start());
        }
        counts
    }

    #[test]
    fn cuda_skips_with_the_first_reason_when_the_driver_is_missing() {
        let c = counts(
            "test cuda::capture_replay ... ok
            test cuda::input_rewrite ... ok
            SKIP: capture_replay: CUDA unavailable: libcuda.so not found
            SKIP: input_rewrite: CUDA unavailable: libcuda.so not found
            test nvrtc::every_builtin_compiles_to_the_shipped_ptx ... ok",
        );
        assert_eq!(c.cuda, 2);
        assert!(c.nvrtc);
        let row = cuda_row(&c);
        assert_eq!(
            (row.status(), row.why()),
            ("skipped", "CUDA unavailable: libcuda.so not found")
        );
        let row = nvrtc_row(&c);
        assert_eq!(
            (row.status(), row.why()),
            (
                "ran",
                "NVRTC compiled every builtin to PTX for sm_80 and sm_90"
            )
        );
    }

    #[test]
    fn cuda_ran_names_the_device() {
        let c = counts(
            "cuda device: NVIDIA H200 (compute 9.0), driver 12080
            test cuda::capture_replay ... ok
            test suite::capture_replay ... ok
            test cuda::input_rewrite ... FAILED",
        );
        assert_eq!((c.cuda, c.scenarios), (1, 1));
        let row = cuda_row(&c);
        assert_eq!(
            (row.status(), row.why()),
            (
                "ran",
                "NVIDIA H200 (compute 9.0), driver 12080: 1 scenarios passed"
            )
        );
    }

    #[test]
    fn a_missing_or_skipped_nvrtc_test_fails_its_row() {
        let c = counts("SKIP: nvrtc: libnvrtc.so.12 not found");
        assert!(!c.nvrtc);
        let row = nvrtc_row(&c);
        assert_eq!(row.status(), "FAILED");
        assert_eq!(row.why(), format!("{NVRTC_TEST}: libnvrtc.so.12 not found"));
        assert_eq!(cuda_row(&c).status(), "skipped");
    }

    #[test]
    fn a_skip_reason_drops_the_test_name() {
        assert_eq!(
            skip_reason("SKIP: capture_replay: CUDA unavailable: no driver"),
            "CUDA unavailable: no driver"
        );
        assert_eq!(skip_reason("SKIP: no reason"), "no reason");
    }

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
