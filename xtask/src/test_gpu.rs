//! `cargo xtask test-gpu`: the GPU tests, for a machine with an NVIDIA GPU and its driver
//! (the self-hosted `gpu` runners of `.github/workflows/gpu.yml`): CUDA required, Vulkan
//! when a loader is present, and the demo and the decoder on each GPU backend.

use std::process::Command;

use anyhow::{Result, bail};

use crate::cargo::cargo;
use crate::libs::has_library;
use crate::results::{Results, run_tests, skip_reason};
use crate::test::{CUDA, NVRTC_TEST, VULKAN};
use crate::vulkan;

const HELP: &str = "usage: cargo xtask test-gpu

For a machine with an NVIDIA GPU and its driver. In order:
  1. fails at once when the CUDA driver (libcuda.so.1) is not installed;
  2. prints the device, driver and CUDA versions (nvidia-smi, when present);
  3. cargo test -p capture-cuda --features cudarc -- --show-output with
     CAPTURE_REQUIRE_CUDA=1 (a missing
     driver or device fails instead of saying SKIP), CI=true and INSTA_UPDATE=no; NVRTC
     is fetched into target/nvrtc when pip can, and then required too;
  4. when the Vulkan loader (libvulkan.so.1) is present: cargo test -p capture-vulkan,
     with CAPTURE_REQUIRE_VULKAN=1 when the Khronos validation layer is installed;
  5. the demo and the decoder on each GPU backend:
     cargo run --release -p capture-cli --features cuda,vulkan -- demo --backend cuda
     and -- decode --backend cuda, -- decode --buckets 1,2,4,8 --backend cuda (and
     --backend vulkan when the loader is present);
then prints a summary, and fails if any step failed.";

/// The CUDA driver library cudarc loads.
const DRIVER: &str = "libcuda.so.1";

/// How one step of the run fared.
struct Step {
    name: String,
    status: &'static str,
    detail: String,
}

impl Step {
    fn new(name: &str, ok: bool, detail: String) -> Self {
        Self {
            name: name.to_string(),
            status: if ok { "ok" } else { "FAILED" },
            detail,
        }
    }

    fn skipped(name: &str, why: &str) -> Self {
        Self {
            name: name.to_string(),
            status: "skipped",
            detail: why.to_string(),
        }
    }
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    if let Some(arg) = args.first() {
        if matches!(arg.as_str(), "-h" | "--help") {
            println!("{HELP}");
            return Ok(());
        }
        bail!("unknown option {arg:?}\n\n{HELP}");
    }
    if !has_library(DRIVER) {
        bail!(
            "no CUDA driver found: {DRIVER} is not installed (cargo xtask test-gpu needs an \
             NVIDIA GPU and its driver)"
        );
    }
    let gpu = describe_gpus();
    println!("xtask: {gpu}");

    let mut steps = Vec::new();
    let ld_path = std::env::var("LD_LIBRARY_PATH").ok();
    let nvrtc = match crate::nvrtc::ensure() {
        Ok(lib) => Some(crate::nvrtc::prepend_path(&lib, ld_path.as_deref())),
        Err(e) => {
            println!("xtask: NVRTC could not be fetched ({e:#}); its test will say SKIP");
            None
        }
    };
    // With the cudarc adapter, so its test (a cudarc context handed over) runs too.
    let cuda_args = ["-p", "capture-cuda", "--features", "cudarc"];
    let results = run_tests(&cuda_args, &["--show-output"], |cuda| {
        // A GPU's driver: the tests fail on the driver model here.
        cuda.env("CAPTURE_REQUIRE_CUDA", "1")
            .env_remove("CAPTURE_CUDA_MODEL")
            .env("CI", "true")
            .env("INSTA_UPDATE", "no");
        if let Some(path) = &nvrtc {
            cuda.env("LD_LIBRARY_PATH", path)
                .env("CAPTURE_REQUIRE_NVRTC", "1");
        }
    })?;
    steps.push(cuda_step(&results));

    let probe = vulkan::Probe::detect();
    let vulkan = probe.loader;
    if vulkan {
        let layer = probe.validation_layer;
        if !layer {
            println!(
                "xtask: the Khronos validation layer is not installed: the Vulkan tests run \
                 without it and without CAPTURE_REQUIRE_VULKAN=1 (apt install \
                 vulkan-validationlayers to have them judged)"
            );
        }
        let results = run_tests(&["-p", "capture-vulkan"], &[], |test| {
            test.env("CI", "true").env("INSTA_UPDATE", "no");
            if layer {
                test.env("CAPTURE_REQUIRE_VULKAN", "1");
            }
        })?;
        steps.push(vulkan_step(&results, layer));
    } else {
        steps.push(Step::skipped(
            "cargo test -p capture-vulkan",
            &format!("{} not found", vulkan::LOADER),
        ));
    }

    for (command, backend) in [
        (&["demo"][..], "cuda"),
        (&["demo"], "vulkan"),
        (&["decode"], "cuda"),
        (&["decode"], "vulkan"),
        (&["decode", "--buckets", "1,2,4,8"], "cuda"),
        (&["decode", "--buckets", "1,2,4,8"], "vulkan"),
    ] {
        let name = format!("{} --backend {backend}", command.join(" "));
        if backend == "vulkan" && !vulkan {
            steps.push(Step::skipped(
                &name,
                &format!("{} not found", vulkan::LOADER),
            ));
            continue;
        }
        println!("xtask: capture {name}");
        let mut args = vec![
            "run",
            "--release",
            "-p",
            "capture-cli",
            "--features",
            "cuda,vulkan",
            "--",
        ];
        args.extend_from_slice(command);
        args.extend(["--backend", backend]);
        let status = cargo(&args).env("CAPTURE_REQUIRE_CUDA", "1").status();
        steps.push(match status {
            Ok(s) => Step::new(&name, s.success(), s.to_string()),
            Err(e) => Step::new(&name, false, format!("could not start cargo run: {e}")),
        });
    }

    println!();
    println!("summary (test-gpu):");
    println!("  {gpu}");
    for s in &steps {
        println!("  {:<8} {:<30} {}", s.status, s.name, s.detail);
    }
    let failed = steps.iter().filter(|s| s.status == "FAILED").count();
    let passed = steps.iter().filter(|s| s.status == "ok").count();
    println!("xtask: test-gpu: {passed} passed, {failed} failed");
    if failed > 0 {
        bail!("{failed} GPU step(s) failed");
    }
    Ok(())
}

/// The capture-cuda step: every test passed, the suite ran under `cuda::` in
/// capture-cuda's `it`, and nothing there said `SKIP:` for CUDA.
fn cuda_step(results: &Results) -> Step {
    let name = "cargo test -p capture-cuda --features cudarc";
    let Some(it) = results.get(&CUDA) else {
        return Step::new(name, false, format!("{CUDA} did not run"));
    };
    let skip = it.skips().find(|s| s.contains("CUDA"));
    let nvrtc = if it.passed_test(NVRTC_TEST) && !it.skips().any(|s| s.starts_with("SKIP: nvrtc")) {
        "; NVRTC compiled every builtin to PTX"
    } else {
        ""
    };
    let device = it.line_after("cuda device: ").unwrap_or("unknown device");
    let scenarios = it.passed_in("cuda");
    if results.failed() > 0 {
        Step::new(
            name,
            false,
            format!("{} test(s) failed ({device})", results.failed()),
        )
    } else if let Some(skip) = skip {
        Step::new(name, false, format!("skipped: {}", skip_reason(skip)))
    } else if scenarios == 0 {
        Step::new(name, false, "no `cuda::` scenario test ran".to_string())
    } else {
        Step::new(
            name,
            true,
            format!(
                "{device}: {scenarios} scenarios, {} tests passed{nvrtc}",
                results.passed()
            ),
        )
    }
}

/// The capture-vulkan step: every test passed, and the suite ran in both memory modes
/// in capture-vulkan's `it`.
fn vulkan_step(results: &Results, layer: bool) -> Step {
    let name = "cargo test -p capture-vulkan";
    let Some(it) = results.get(&VULKAN) else {
        return Step::new(name, false, format!("{VULKAN} did not run"));
    };
    let device = it.line_after("vulkan device: ").unwrap_or("unknown device");
    if results.failed() > 0 {
        return Step::new(
            name,
            false,
            format!("{} test(s) failed ({device})", results.failed()),
        );
    }
    let (host, staging) = (it.passed_in("host_visible"), it.passed_in("forced_staging"));
    let ran = host > 0 && staging > 0 && !it.skips().any(|s| s.contains("Vulkan unavailable"));
    Step::new(
        name,
        ran,
        format!(
            "{device}: {host} scenarios host-visible, {staging} forced-staging{}",
            if layer { "" } else { " (no validation layer)" }
        ),
    )
}

/// One line naming each GPU, its driver, compute capability and CUDA version, from
/// `nvidia-smi`; says so when nvidia-smi is missing or fails.
fn describe_gpus() -> String {
    let query = Command::new("nvidia-smi")
        .args([
            "--query-gpu=name,driver_version,compute_cap",
            "--format=csv,noheader",
        ])
        .output();
    let query = match query {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        Ok(o) => {
            return format!(
                "nvidia-smi failed ({}): {}; device and versions unknown",
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            );
        }
        Err(_) => {
            return "nvidia-smi not found: device, driver and CUDA versions unknown".to_string();
        }
    };
    let cuda = Command::new("nvidia-smi")
        .output()
        .ok()
        .and_then(|o| cuda_version(&String::from_utf8_lossy(&o.stdout)))
        .unwrap_or_else(|| "unknown".to_string());
    let gpus: Vec<String> = query.lines().filter_map(describe_gpu).collect();
    format!(
        "gpu: {}; CUDA {cuda} (the newest the driver supports)",
        if gpus.is_empty() {
            "none listed".to_string()
        } else {
            gpus.join("; ")
        }
    )
}

/// `NVIDIA H200, 570.86.15, 9.0` → `NVIDIA H200, driver 570.86.15, compute 9.0`.
fn describe_gpu(line: &str) -> Option<String> {
    let fields: Vec<&str> = line.split(',').map(str::trim).collect();
    match fields.as_slice() {
        [name, driver, compute] if !name.is_empty() => {
            Some(format!("{name}, driver {driver}, compute {compute}"))
        }
        _ => None,
    }
}

/// The `CUDA Version: 12.8` of plain `nvidia-smi` output.
fn cuda_version(smi: &str) -> Option<String> {
    let (_, rest) = smi.split_once("CUDA Version:")?;
    rest.split_whitespace()
        .next()
        .map(|v| v.trim_end_matches('|').to_string())
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::tests::results;

    const SMI: &str = "\
Mon Jan  6 10:00:00 2025
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 570.86.15              Driver Version: 570.86.15      CUDA Version: 12.8     |
|-----------------------------------------+------------------------+----------------------+
";

    #[test]
    fn versions_are_read_from_nvidia_smi() {
        assert_eq!(cuda_version(SMI).as_deref(), Some("12.8"));
        assert_eq!(cuda_version("no versions here"), None);
        assert_eq!(
            describe_gpu("NVIDIA H200, 570.86.15, 9.0").as_deref(),
            Some("NVIDIA H200, driver 570.86.15, compute 9.0")
        );
        assert_eq!(describe_gpu(""), None);
    }

    #[test]
    fn the_cuda_step_fails_on_a_skip_or_when_nothing_ran() {
        let run = |it: &str| {
            results(
                &format!(
                    "Running unittests src/lib.rs (target/debug/deps/capture_cuda-88)
                    test result: ok. 6 passed; 0 failed; 0 ignored
                    Running tests/it/main.rs (target/debug/deps/it-66)
                    {it}"
                ),
                true,
            )
        };
        let step = cuda_step(&run("
            cuda device: NVIDIA H200 (compute 9.0), driver 12080
            test cuda::capture_replay ... ok
            test cuda::input_rewrite ... ok
            test nvrtc::every_builtin_compiles_to_the_shipped_ptx_and_cubins ... ok
            test result: ok. 3 passed; 0 failed; 0 ignored"));
        assert_eq!(step.status, "ok", "{}", step.detail);
        assert_eq!(
            step.detail,
            "NVIDIA H200 (compute 9.0), driver 12080: 2 scenarios, 9 tests passed; NVRTC \
             compiled every builtin to PTX"
        );
        let step = cuda_step(&run("
            test cuda::capture_replay ... ok
            SKIP: capture_replay: CUDA unavailable: libcuda.so not found
            test result: ok. 1 passed; 0 failed; 0 ignored"));
        assert_eq!(step.status, "FAILED");
        assert_eq!(
            step.detail,
            "skipped: CUDA unavailable: libcuda.so not found"
        );
        let step = cuda_step(&run("test result: ok. 0 passed; 0 failed; 0 ignored"));
        assert_eq!(
            (step.status, step.detail.as_str()),
            ("FAILED", "no `cuda::` scenario test ran")
        );
        let step = cuda_step(&Results::default());
        assert_eq!(
            (step.status, step.detail.as_str()),
            ("FAILED", "capture-cuda --test it did not run")
        );
    }

    #[test]
    fn the_vulkan_step_needs_both_memory_modes() {
        let run = |it: &str| {
            results(
                &format!("Running tests/it/main.rs (target/debug/deps/it-55)\n{it}"),
                true,
            )
        };
        let step = vulkan_step(
            &run("test host_visible::capture_replay ... ok
                test forced_staging::capture_replay ... ok
                test result: ok. 2 passed; 0 failed; 0 ignored"),
            false,
        );
        assert_eq!(
            (step.status, step.detail.as_str()),
            (
                "ok",
                "unknown device: 1 scenarios host-visible, 1 forced-staging (no validation layer)"
            )
        );
        let step = vulkan_step(
            &run("test host_visible::capture_replay ... ok
                test result: ok. 1 passed; 0 failed; 0 ignored"),
            true,
        );
        assert_eq!(step.status, "FAILED");
    }
}
