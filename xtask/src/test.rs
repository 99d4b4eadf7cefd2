//! `cargo xtask test`: the README's test command, and what CI runs ([`HELP`] says what it
//! does). Each row of its summary (core, mock, vulkan, cuda, cuda-model, nvrtc, examples)
//! is read from its own test binaries' results (`results`) or the examples' runs.

use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::cargo::{Target, cargo, step, workspace_root};
use crate::results::{Binary, Results, run_tests, skip_reason};
use crate::summary::{Backend, Summary};

pub(crate) const HELP: &str = "usage: cargo xtask test [--no-gate]

Installs what the tests need when it is missing (lavapipe and the Vulkan validation layer
with apt; NVRTC, nvJitLink and cuda.h from NVIDIA's PyPI wheels, into target/), runs the
gate (fmt, clippy -D warnings with and without every feature, rustdoc -D warnings, tidy,
each published crate's metadata and `cargo package`), then every test of the workspace
with CI=true (a missing or changed insta snapshot fails) and the features' own tests,
every example, and the cuda-model row: capture-cuda's tests, the bench's CUDA floor and
the GPU bundle's run.sh on the CUDA driver model (crates/capture-cuda-model). Ends with
which backends ran and which were skipped and why, each test binary's result, and
`N passed, M failed`. Vulkan (on lavapipe, by name) and NVRTC are required; CUDA is not
(without a driver its tests say SKIP). docs/testing.md says what each row runs.

  --no-gate   skip the gate (for a quick local rerun of the tests only)";

/// The gate's cargo steps: each one's name and command line, all with
/// `RUSTDOCFLAGS=-D warnings`. The backends behind features (the facade's and the
/// programs' vulkan and cuda, capture-cuda's cudarc adapter, the core's bookkeeping
/// bench) build only with them: the second clippy builds them without a GPU.
const GATE: [(&str, &str); 6] = [
    ("cargo fmt --check", "fmt --all -- --check"),
    (
        "cargo clippy",
        "clippy --workspace --all-targets -- -D warnings",
    ),
    (
        "cargo clippy (the facade, the programs, the decoder and the backends with every feature)",
        "clippy -p capture-graphs -p capture-cli -p capture-bench -p capture-decode \
         -p capture-cuda -p capture-vulkan -p capture-core --all-targets --features \
         capture-graphs/vulkan,capture-graphs/cudarc,capture-cli/vulkan,capture-cli/cuda,\
         capture-bench/vulkan,capture-bench/cuda,capture-decode/vulkan,capture-decode/cuda,\
         capture-core/bench-internals -- -D warnings",
    ),
    (
        "cargo clippy (the facade, the programs and the decoder without a backend)",
        "clippy -p capture-graphs -p capture-cli -p capture-bench -p capture-decode \
         --all-targets --no-default-features -- -D warnings",
    ),
    ("cargo doc", "doc --workspace --no-deps"),
    (
        "cargo doc (capture-graphs with every backend)",
        "doc -p capture-graphs --no-deps --features mock,vulkan,cuda",
    ),
];

pub(crate) fn run(args: &[String]) -> Result<()> {
    let gate = match args {
        [] => true,
        [no_gate] if no_gate == "--no-gate" => false,
        [other, ..] => bail!("unknown option {other:?}\n\n{HELP}"),
    };
    let root = workspace_root();
    if gate {
        for (name, line) in GATE {
            step(name, cargo(line).env("RUSTDOCFLAGS", "-D warnings"))?;
        }
        let missing = missing_facade_pages(&root.join("target").join("doc"));
        if !missing.is_empty() {
            bail!(
                "the facade's docs lack the pages of the backends' types it re-exports: {}",
                missing.join(", ")
            );
        }
        crate::tidy::run(&[])?;
        crate::package::run(&root)?;
    }

    crate::vulkan::ensure()?;
    let nvrtc_lib = crate::nvrtc::ensure()?;
    // The loop setter's link: nvJitLink and the device runtime, pinned as NVRTC is.
    let nvjitlink = crate::nvrtc::ensure_nvjitlink()?.join(crate::nvrtc::NVJITLINK_LIB);
    let devrt = crate::cuda_model::devrt(&root)?;
    let ld_path =
        crate::nvrtc::prepend_path(&nvrtc_lib, std::env::var("LD_LIBRARY_PATH").ok().as_deref());
    let env = |test: &mut Command| {
        test.env("CI", "true")
            .env("INSTA_UPDATE", "no")
            .env("CAPTURE_REQUIRE_VULKAN", "1")
            .env("CAPTURE_REQUIRE_NVRTC", "1")
            .env("CAPTURE_REQUIRE_NVJITLINK", "1")
            .env("CAPTURE_NVJITLINK", &nvjitlink)
            .env("CAPTURE_CUDADEVRT", &devrt)
            .env("LD_LIBRARY_PATH", &ld_path)
            // The pinned library by path: a system libnvrtc.so cannot stand in.
            .env("CAPTURE_NVRTC", nvrtc_lib.join(crate::nvrtc::LIB))
            .env("LP_NUM_THREADS", "0")
            // lavapipe by name: the Vulkan backend would otherwise take the
            // best-ranked device, and CI's tests are meant for lavapipe.
            .env("CAPTURE_VULKAN_DEVICE", "llvmpipe");
    };
    let mut results = run_tests("--workspace --no-fail-fast", env)?;
    // The decoder's test on Vulkan (and the program's CUDA refusal without a driver) and
    // the bench floors' (on lavapipe; CUDA's says SKIP without a driver) need the
    // `vulkan` and `cuda` features, which the workspace run leaves off.
    results.absorb(run_tests(
        "-p capture-decode -p capture-cli -p capture-bench --features capture-cli/vulkan,\
         capture-cli/cuda,capture-bench/vulkan,capture-bench/cuda,capture-decode/vulkan,\
         capture-decode/cuda --test decode --test floors",
        env,
    )?);
    let started = Instant::now();
    let examples = crate::examples::run(env)?.took(started.elapsed().as_secs_f64());
    let (model, model_results) = cuda_model_row(&root, &ld_path, &env)?;

    let row =
        |name, row, targets: &[&Target]| Backend::of(name, row).took(results.seconds(targets));
    let backends = vec![
        row(
            "core",
            core_row(&results),
            &[&CORE, &ALLOC_COUNT, &CORE_UNIT],
        ),
        row("mock", mock_row(&results), &[&MOCK, &MOCK_UNIT]),
        row(
            "vulkan",
            vulkan_row(&results),
            &[&VULKAN, &VULKAN_ALLOC, &VULKAN_UNIT],
        ),
        cuda_row(&results).took(results.seconds(&[&CUDA])),
        model,
        Backend::of("nvrtc", nvrtc_row(&results)),
        examples,
    ];
    results.absorb(model_results);
    let summary = Summary { results, backends };
    summary.print();
    let failed_rows: Vec<&str> = summary
        .backends
        .iter()
        .filter(|b| b.is_failed())
        .map(Backend::name)
        .collect();
    if !failed_rows.is_empty() {
        bail!("the summary's {} row(s) FAILED", failed_rows.join(", "));
    }
    if summary.results.failed() > 0 {
        bail!("{} test(s) failed", summary.results.failed());
    }
    Ok(())
}

/// The `cuda-model` row: capture-cuda's tests (the scenario suite on the shared
/// snapshots, the model-based test, the GPU tests, in parallel as on a GPU), its
/// allocation counts and the bench's CUDA floor on the CUDA driver model, then the GPU
/// bundle's own `run.sh` on it end to end (`--driver-model --short --no-vulkan`: the
/// demo, a short bench, the decoder, CUDA required). Its binaries come back relabelled
/// `… (driver model)`.
fn cuda_model_row(
    root: &std::path::Path,
    ld_path: &str,
    env: &dyn Fn(&mut Command),
) -> Result<(Backend, Results)> {
    let model = crate::cuda_model::build(root)?;
    // The library's tests see the library's kernels alone; the program's runs (its
    // floor, the bundle's demo, bench and decoder) the program's too.
    let configure = |c: &mut Command, program: bool| {
        env(c);
        model.apply(c, ld_path, program);
    };
    let mut results = run_tests("-p capture-cuda --test it --test alloc_count", |c| {
        configure(c, false)
    })?;
    let floors = run_tests("-p capture-bench --features cuda --test floors", |c| {
        configure(c, true)
    })?;
    let floors_failed =
        floors.failed() > 0 || floors.binaries.is_empty() || !floors.skips().is_empty();
    results.absorb(floors);
    let bundle = root.join("target").join("gpu-bundle-model");
    crate::gpu_bundle::build(&bundle, false)?;
    let logs = root.join("target").join("cuda-model").join("logs");
    let mut run = Command::new(bundle.join("run.sh"));
    // The unoptimised bundle on 2 CPUs: a longer step timeout than a GPU's default.
    run.args("--driver-model --short --no-vulkan --step-timeout 420 --logs".split(' '))
        .arg(&logs);
    configure(&mut run, true);
    println!("xtask: the GPU bundle's run.sh on the CUDA driver model");
    let started = Instant::now();
    let status = run.status().context("starting the bundle's run.sh")?;
    let bundle_seconds = started.elapsed().as_secs_f64();
    let summary = std::fs::read_to_string(logs.join("summary.txt")).unwrap_or_default();
    let bundle_line = summary
        .lines()
        .find(|l| l.starts_with("bundle: "))
        .unwrap_or("bundle: no summary line");
    let row = || -> Result<String, String> {
        let it = passing(&results, &CUDA)?;
        let alloc = tally(&results, &CUDA_ALLOC, true)?;
        let scenarios = it.passed_in("cuda");
        let device = it.line_after("cuda device: ").unwrap_or("unknown device");
        if scenarios == 0 || !device.contains("driver model") {
            return Err(format!(
                "{CUDA}: {scenarios} scenarios passed on {device}: the suite must pass on the \
                 driver model"
            ));
        }
        if let Some(skip) = it.skips().next() {
            return Err(format!("{CUDA}: a test said {skip}"));
        }
        if floors_failed {
            return Err("the program's CUDA floor test failed or said SKIP on the model".into());
        }
        if !status.success() {
            return Err(format!(
                "the bundle's run.sh on the model: {bundle_line} (logs in {})",
                logs.display()
            ));
        }
        Ok(format!(
            "the CUDA driver model (not a GPU), {device}: {scenarios} scenarios; {}; {alloc}; \
             the GPU bundle's run.sh --driver-model --short: {bundle_line} \
             ({bundle_seconds:.0} s)",
            tally(&results, &CUDA, false)?,
        ))
    };
    let seconds = results.seconds(&[&CUDA, &CUDA_ALLOC]) + bundle_seconds;
    let backend = Backend::of("cuda-model", row()).took(seconds);
    for b in &mut results.binaries {
        b.package = format!("{} (driver model)", b.package);
    }
    Ok((backend, results))
}

/// capture-core's unit tests.
const CORE_UNIT: Target = Target::lib("capture-core", "capture_core");
/// The core's rule, bad-input, thread and trace tests, on the mock.
const CORE: Target = Target::test("capture-suite", "core");
/// The hot paths' allocation counts (a harness-less binary).
const ALLOC_COUNT: Target = Target::test("capture-suite", "alloc_count");
/// capture-mock's unit tests.
const MOCK_UNIT: Target = Target::lib("capture-mock", "capture_mock");
/// The scenario suite on the mock (module `suite`) and the mock's own tests.
const MOCK: Target = Target::test("capture-suite", "mock");
/// The suite on Vulkan in both memory modes.
const VULKAN: Target = Target::test("capture-vulkan", "it");
/// The hot paths' allocation counts on Vulkan (a harness-less binary).
const VULKAN_ALLOC: Target = Target::test("capture-vulkan", "alloc_count");
/// capture-vulkan's unit tests, the validation canary among them.
const VULKAN_UNIT: Target = Target::lib("capture-vulkan", "capture_vulkan");
/// The validation canary, in capture-vulkan's unit tests, which must pass without `SKIP:`.
const VULKAN_CANARY: &str =
    "driver::canary::executing_a_non_simultaneous_secondary_twice_is_reported";
/// The suite on CUDA (module `cuda`), and the NVRTC test.
const CUDA: Target = Target::test("capture-cuda", "it");
/// The hot paths' allocation counts on CUDA (a harness-less binary).
const CUDA_ALLOC: Target = Target::test("capture-cuda", "alloc_count");
/// The NVRTC test of capture-cuda, which `cargo xtask test` requires to pass.
const NVRTC_TEST: &str = "nvrtc::every_builtin_compiles_to_the_shipped_ptx_and_cubins";

/// `target`'s results when it ran and nothing in it failed; otherwise why not.
fn passing<'r>(results: &'r Results, target: &Target) -> Result<&'r Binary, String> {
    let binary = results
        .get(target)
        .ok_or_else(|| format!("{target} did not run"))?;
    match binary.totals {
        None => Err(format!("{target} printed no `test result:` line")),
        Some(t) if t.failed > 0 => Err(format!("{target}: {t}")),
        Some(_) => Ok(binary),
    }
}

/// `name: N passed[, N ignored]` when `target` is [`passing`] (with a test passed, where
/// `some`); otherwise why not.
fn tally(results: &Results, target: &Target, some: bool) -> Result<String, String> {
    let binary = passing(results, target)?;
    match binary.totals {
        _ if some && binary.passed() == 0 => Err(format!("{target}: no test passed")),
        Some(t) if t.ignored > 0 => Ok(format!(
            "{target}: {} passed, {} ignored",
            t.passed, t.ignored
        )),
        _ => Ok(format!("{target}: {} passed", binary.passed())),
    }
}

/// The `core` row: capture-suite's `core` and `alloc_count` binaries and capture-core's
/// unit tests all ran, and nothing in them failed.
fn core_row(results: &Results) -> Result<String, String> {
    let core = tally(results, &CORE, true)?;
    let alloc = tally(results, &ALLOC_COUNT, true)?;
    Ok(format!(
        "{core}; {alloc}; {}",
        tally(results, &CORE_UNIT, false)?
    ))
}

/// The `mock` row: capture-suite's `mock` binary passed with scenarios of the suite among
/// its tests, and capture-mock's unit tests passed.
fn mock_row(results: &Results) -> Result<String, String> {
    let scenarios = passing(results, &MOCK)?.passed_in("suite");
    if scenarios == 0 {
        return Err(format!(
            "{MOCK}: no scenario of the suite (`suite::`) passed"
        ));
    }
    Ok(format!(
        "{scenarios} scenarios of the shared suite passed on the mock; {}; {}",
        tally(results, &MOCK, false)?,
        tally(results, &MOCK_UNIT, false)?
    ))
}

/// The `vulkan` row: capture-vulkan's `it` passed, with scenarios in both memory modes,
/// and its unit tests passed with the validation canary caught.
fn vulkan_row(results: &Results) -> Result<String, String> {
    let vulkan = passing(results, &VULKAN)?;
    let unit = passing(results, &VULKAN_UNIT)?;
    let host = vulkan.passed_in("host_visible");
    let staging = vulkan.passed_in("forced_staging");
    let canary_skipped = unit.skips().any(|s| s.starts_with("SKIP: canary"));
    if host == 0 || staging == 0 || !unit.passed_test(VULKAN_CANARY) || canary_skipped {
        let canary = if canary_skipped {
            "skipped"
        } else {
            "not passed"
        };
        return Err(format!(
            "{VULKAN}: {host} scenarios passed host-visible, {staging} forced-staging; \
             {VULKAN_UNIT}: canary {canary}: the suite must pass in both modes with the \
             canary caught"
        ));
    }
    let alloc = tally(results, &VULKAN_ALLOC, true)?;
    let skipped = match vulkan.skips().count() + unit.skips().count() {
        0 => "none".to_string(),
        n => n.to_string(),
    };
    Ok(format!(
        "{}: {host} scenarios host-visible, {staging} forced-staging, under validation \
         with the canary caught; tests that said SKIP: {skipped}; {}; {alloc}; {}",
        vulkan
            .line_after("vulkan device: ")
            .unwrap_or("unknown device"),
        tally(results, &VULKAN, false)?,
        tally(results, &VULKAN_UNIT, false)?
    ))
}

/// The `cuda` row: `ran` when scenarios passed under `cuda::` and none said `SKIP:` for
/// CUDA; `skipped` with the first reason a test gave; FAILED when capture-cuda's `it`
/// did not run or a test in it failed.
fn cuda_row(results: &Results) -> Backend {
    let cuda = match passing(results, &CUDA) {
        Ok(binary) => binary,
        Err(why) => return Backend::failed("cuda", why),
    };
    let scenarios = cuda.passed_in("cuda");
    match cuda.skips().find(|s| s.contains("CUDA")).map(skip_reason) {
        Some(why) => Backend::skipped("cuda", why.to_string()),
        None if scenarios == 0 => Backend::skipped(
            "cuda",
            "no `cuda::` scenario test ran, and no test said why".to_string(),
        ),
        None => Backend::of(
            "cuda",
            tally(results, &CUDA, false).map(|tally| {
                let device = cuda.line_after("cuda device: ").unwrap_or("unknown device");
                format!("{device}: {scenarios} scenarios passed; {tally}")
            }),
        ),
    }
}

/// The `nvrtc` row: whether capture-cuda's NVRTC test passed without saying `SKIP:`.
fn nvrtc_row(results: &Results) -> Result<String, String> {
    let Some(cuda) = results.get(&CUDA) else {
        return Err(format!("{NVRTC_TEST}: {CUDA} did not run"));
    };
    if let Some(skip) = cuda.skips().find(|s| s.starts_with("SKIP: nvrtc")) {
        return Err(format!("{NVRTC_TEST}: {}", skip_reason(skip)));
    }
    if !cuda.passed_test(NVRTC_TEST) {
        return Err(format!("{NVRTC_TEST}: did not pass"));
    }
    Ok("NVRTC compiled every builtin to the shipped PTX and cubins for sm_80 and sm_90".into())
}

/// Pages a user of `capture-graphs` must find in its docs (relative to the doc root):
/// each backend's types inlined under its module, and the bound for generic code.
const FACADE_PAGES: [&str; 6] = [
    "capture_graphs/trait.Backend.html",
    "capture_graphs/mock/type.MockBackend.html",
    "capture_graphs/mock/struct.MockKernel.html",
    "capture_graphs/vulkan/struct.VulkanBackend.html",
    "capture_graphs/vulkan/struct.VulkanKernelSource.html",
    "capture_graphs/cuda/struct.CudaKernelSource.html",
];

/// The [`FACADE_PAGES`] that `doc` (a rustdoc output directory) lacks.
fn missing_facade_pages(doc: &std::path::Path) -> Vec<&'static str> {
    FACADE_PAGES
        .into_iter()
        .filter(|page| !doc.join(page).is_file())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::tests::results;

    #[test]
    fn a_facade_page_missing_from_the_docs_is_named() {
        let doc = std::env::temp_dir().join(format!("xtask-facade-doc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&doc);
        for page in &FACADE_PAGES[1..] {
            let path = doc.join(page);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "").unwrap();
        }
        assert_eq!(missing_facade_pages(&doc), [FACADE_PAGES[0]]);
        std::fs::remove_dir_all(&doc).unwrap();
    }

    /// A passing run of every binary the rows read, with `cuda` as capture-cuda's output.
    fn run(cuda: &str) -> Results {
        results(
            &format!(
                "
                Running unittests src/lib.rs (target/debug/deps/capture_core-11)
                test result: ok. 30 passed; 0 failed; 0 ignored
                Running unittests src/lib.rs (target/debug/deps/capture_mock-77)
                test result: ok. 5 passed; 0 failed; 0 ignored
                Running tests/alloc_count/main.rs (target/debug/deps/alloc_count-44)
                alloc_count: 9 passed, 0 failed
                Running tests/core/main.rs (target/debug/deps/core-22)
                test rules::rule_01_no_launch_while_recording ... ok
                test result: ok. 48 passed; 0 failed; 1 ignored
                Running tests/mock/main.rs (target/debug/deps/mock-33)
                test suite::capture_replay ... ok
                test suite::input_rewrite ... ok
                test mock::nothing_runs_at_enqueue ... ok
                test result: ok. 3 passed; 0 failed; 0 ignored
                Running tests/it/main.rs (target/debug/deps/it-55)
                vulkan device: llvmpipe (LLVM 19.1.7, 256 bits), Vulkan 1.4
                test host_visible::capture_replay ... ok
                test forced_staging::capture_replay ... ok
                test result: ok. 2 passed; 0 failed; 0 ignored
                Running tests/alloc_count.rs (target/debug/deps/alloc_count-99)
                alloc_count: 6 passed, 0 failed
                Running unittests src/lib.rs (target/debug/deps/capture_vulkan-88)
                test driver::canary::executing_a_non_simultaneous_secondary_twice_is_reported ... ok
                test memory::rounds_up ... ok
                test result: ok. 2 passed; 0 failed; 0 ignored
                Running tests/it/main.rs (target/debug/deps/it-66)
                {cuda}
                "
            ),
            true,
        )
    }

    fn row(backend: &Backend) -> (&str, &str) {
        (backend.status, backend.why.as_str())
    }

    const CUDA_WITHOUT_DRIVER: &str = "
        test cuda::capture_replay ... ok
        test cuda::input_rewrite ... ok
        test nvrtc::every_builtin_compiles_to_the_shipped_ptx_and_cubins ... ok
        SKIP: capture_replay: CUDA unavailable: libcuda.so not found
        SKIP: input_rewrite: CUDA unavailable: libcuda.so not found
        test result: ok. 3 passed; 0 failed; 0 ignored";

    #[test]
    fn every_row_reads_its_own_binary() {
        let r = run(CUDA_WITHOUT_DRIVER);
        assert_eq!(
            row(&Backend::of("core", core_row(&r))),
            (
                "ran",
                "capture-suite --test core: 48 passed, 1 ignored; capture-suite --test \
                 alloc_count: 9 passed; capture-core unit tests: 30 passed"
            )
        );
        assert_eq!(
            row(&Backend::of("mock", mock_row(&r))),
            (
                "ran",
                "2 scenarios of the shared suite passed on the mock; capture-suite --test \
                 mock: 3 passed; capture-mock unit tests: 5 passed"
            )
        );
        assert_eq!(
            row(&Backend::of("vulkan", vulkan_row(&r))),
            (
                "ran",
                "llvmpipe (LLVM 19.1.7, 256 bits), Vulkan 1.4: 1 scenarios host-visible, 1 \
                 forced-staging, under validation with the canary caught; tests that said \
                 SKIP: none; capture-vulkan --test it: 2 passed; capture-vulkan --test \
                 alloc_count: 6 passed; capture-vulkan unit tests: 2 passed"
            )
        );
        assert_eq!(
            row(&cuda_row(&r)),
            ("skipped", "CUDA unavailable: libcuda.so not found")
        );
        assert_eq!(
            row(&Backend::of("nvrtc", nvrtc_row(&r))),
            (
                "ran",
                "NVRTC compiled every builtin to the shipped PTX and cubins for sm_80 and sm_90"
            )
        );
    }

    #[test]
    fn cuda_ran_names_the_device_and_fails_on_a_failed_test() {
        let r = run("
            cuda device: NVIDIA H200 (compute 9.0), driver 12080
            test cuda::capture_replay ... ok
            test result: ok. 1 passed; 0 failed; 0 ignored");
        assert_eq!(
            row(&cuda_row(&r)),
            (
                "ran",
                "NVIDIA H200 (compute 9.0), driver 12080: 1 scenarios passed; \
                 capture-cuda --test it: 1 passed"
            )
        );
        assert_eq!(
            row(&Backend::of("nvrtc", nvrtc_row(&r))),
            (
                "FAILED",
                "nvrtc::every_builtin_compiles_to_the_shipped_ptx_and_cubins: did not pass"
            )
        );
        let r = run("
            test cuda::capture_replay ... ok
            test cuda::input_rewrite ... FAILED
            test result: FAILED. 1 passed; 1 failed; 0 ignored");
        assert_eq!(
            row(&cuda_row(&r)),
            (
                "FAILED",
                "capture-cuda --test it: 1 passed, 1 failed, 0 ignored"
            )
        );
    }

    #[test]
    fn a_skipped_nvrtc_test_fails_its_row() {
        let r = run("
            test nvrtc::every_builtin_compiles_to_the_shipped_ptx_and_cubins ... ok
            SKIP: nvrtc: libnvrtc.so.12 not found
            test result: ok. 1 passed; 0 failed; 0 ignored");
        assert_eq!(
            row(&Backend::of("nvrtc", nvrtc_row(&r))),
            (
                "FAILED",
                "nvrtc::every_builtin_compiles_to_the_shipped_ptx_and_cubins: libnvrtc.so.12 not found"
            )
        );
        assert_eq!(
            row(&cuda_row(&r)),
            (
                "skipped",
                "no `cuda::` scenario test ran, and no test said why"
            )
        );
    }

    #[test]
    fn a_row_whose_binary_is_missing_or_incomplete_fails() {
        let r = results(
            "
            Running tests/mock/main.rs (target/debug/deps/mock-33)
            test mock::nothing_runs_at_enqueue ... ok
            test result: ok. 1 passed; 0 failed; 0 ignored
            Running tests/it/main.rs (target/debug/deps/it-55)
            test host_visible::capture_replay ... ok
            test result: ok. 1 passed; 0 failed; 0 ignored
            Running unittests src/lib.rs (target/debug/deps/capture_vulkan-88)
            test driver::canary::executing_a_non_simultaneous_secondary_twice_is_reported ... ok
            SKIP: canary: the validation layer is not installed
            test result: ok. 1 passed; 0 failed; 0 ignored
            ",
            true,
        );
        assert_eq!(
            row(&Backend::of("core", core_row(&r))),
            ("FAILED", "capture-suite --test core did not run")
        );
        assert_eq!(
            row(&Backend::of("mock", mock_row(&r))),
            (
                "FAILED",
                "capture-suite --test mock: no scenario of the suite (`suite::`) passed"
            )
        );
        assert_eq!(
            row(&Backend::of("vulkan", vulkan_row(&r))),
            (
                "FAILED",
                "capture-vulkan --test it: 1 scenarios passed host-visible, 0 forced-staging; \
                 capture-vulkan unit tests: canary skipped: the suite must pass in both modes \
                 with the canary caught"
            )
        );
        assert_eq!(
            row(&cuda_row(&r)),
            ("FAILED", "capture-cuda --test it did not run")
        );
        assert_eq!(
            row(&Backend::of("nvrtc", nvrtc_row(&r))),
            (
                "FAILED",
                "nvrtc::every_builtin_compiles_to_the_shipped_ptx_and_cubins: capture-cuda --test it did not run"
            )
        );
    }
}
