//! `cargo xtask gpu-bundle`: the GPU tests prebuilt, for a GPU machine with no Rust and no
//! network: the release `it` and `alloc_count` test binaries of capture-cuda and
//! capture-vulkan, capture-vulkan's unit tests (the validation canary), capture-suite's
//! `mock`, the `capture` program (package capture-cli), the facade's GPU examples, the
//! shared snapshots of `crates/capture-suite/snapshots`, and `run.sh` (checked in as
//! `xtask/gpu/run.sh`) with the `bundle.env` it reads.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::cargo::{Executable, Target, cargo, executables, workspace_root};

pub(crate) const HELP: &str = "usage: cargo xtask gpu-bundle [--out DIR] [--debug]

Builds, here, what a GPU machine with no Rust and no network needs to run the GPU tests,
into DIR (default target/gpu-bundle, replaced when it holds an earlier bundle):

  capture-cuda-it, capture-vulkan-it
               the backends' release `it` test binaries (CUDA 12.9 bindings; capture-cuda's
               with its `cudarc` feature)
  capture-cuda-alloc-count, capture-vulkan-alloc-count
               the hot paths' allocation counts on CUDA and on Vulkan
  capture-vulkan-unit
               capture-vulkan's unit tests, the validation layer's canary among them
  torch_graph.py
               the same benchmark chain as a PyTorch CUDA graph (xtask/gpu/torch_graph.py)
  capture-suite-mock
               capture-suite's release `mock` test binary: the scenario suite on the mock
  capture      the capture program (package capture-cli), --features cuda,vulkan,
               and capture-bench beside it (`capture bench` runs it)
               (vulkan alone if the CUDA build fails; run.sh then skips the CUDA demo and
               says so)
  engine-step  the facade's engine example (examples/engine_step.rs, --features
               cudarc,vulkan): own kernels with scalars, a library call through foreign
               work, imported weights, captured and replayed per token
  moe-step     the facade's MoE example (examples/moe_step.rs): two experts forked onto
               two streams in one graph
  paged-step   the facade's paged example (examples/paged_step.rs): a decode step over a
               paged KV cache changed per token through its slots, in a graph pool
  decode-until the facade's loop example (examples/decode_until.rs): one loop replay
               ended on the device by the sampler's stop flag (rule 30)
  snapshots/   the scenario suite's shared snapshots (CAPTURE_SNAPSHOTS points here)
  run.sh       runs them all with CUDA required; ends `bundle: N passed, M failed`
               (xtask/gpu/run.sh, as checked in)
  bundle.env   what run.sh needs to know of this build (the snapshot directory compiled
               into capture-suite-mock, whether the CUDA demo is skipped)
  README.txt   what the bundle is and how to run it

--debug builds it unoptimised (what `cargo xtask test` runs on the CUDA driver model,
reusing the test build); a GPU machine gets the release build.

Copy it with its file modes (tar -czf gpu-bundle.tar.gz -C target gpu-bundle), unpack it
on the GPU machine and run ./run.sh (./run.sh --help: --logs DIR, --archive FILE,
--step-timeout S, --short, --no-vulkan). The binaries are x86-64 Linux, dynamically linked
against this machine's glibc: the GPU machine needs the same or a newer one.";

/// The bundle's script, checked in as `xtask/gpu/run.sh`; what varies is in `bundle.env`.
const RUN_SH: &str = include_str!("../gpu/run.sh");

/// The PyTorch side of the GPU benchmark, checked in as `xtask/gpu/torch_graph.py`.
const TORCH_GRAPH: &str = include_str!("../gpu/torch_graph.py");

/// The test binaries the bundle carries, and their names in it (which run.sh runs).
const TESTS: [(Target, &str); 6] = [
    (Target::test("capture-cuda", "it"), "capture-cuda-it"),
    (
        Target::test("capture-cuda", "alloc_count"),
        "capture-cuda-alloc-count",
    ),
    (Target::test("capture-vulkan", "it"), "capture-vulkan-it"),
    (
        Target::test("capture-vulkan", "alloc_count"),
        "capture-vulkan-alloc-count",
    ),
    (
        Target::lib("capture-vulkan", "capture_vulkan"),
        "capture-vulkan-unit",
    ),
    (Target::test("capture-suite", "mock"), "capture-suite-mock"),
];

/// The capture program, and its name in the bundle.
const PROGRAM: (Target, &str) = (Target::new("capture-cli", "bin", "capture"), "capture");

/// The benchmark program `capture bench` runs (found beside `capture`), and its name in
/// the bundle.
const BENCH: (Target, &str) = (
    Target::new("capture-bench", "bin", "capture-bench"),
    "capture-bench",
);

/// The facade's examples the bundle carries (built with `cudarc,vulkan`: the engine
/// example's CUDA path goes through cudarc), and their names in it.
const EXAMPLES: [(Target, &str); 4] = [
    (
        Target::new("capture-graphs", "example", "engine_step"),
        "engine-step",
    ),
    (
        Target::new("capture-graphs", "example", "moe_step"),
        "moe-step",
    ),
    (
        Target::new("capture-graphs", "example", "paged_step"),
        "paged-step",
    ),
    (
        Target::new("capture-graphs", "example", "decode_until"),
        "decode-until",
    ),
];

/// Where the shared snapshots live in the source tree (compiled into capture-suite).
pub(crate) const SNAPSHOTS: &str = "crates/capture-suite/snapshots";

/// The test of capture-suite's `mock` binary that reads the snapshot directory compiled
/// into the binary (the build machine's source tree) rather than `CAPTURE_SNAPSHOTS`.
const SOURCE_TREE_TEST: &str = "every_scenario_has_a_snapshot_and_no_snapshot_lacks_a_scenario";

pub(crate) fn run(args: &[String]) -> Result<()> {
    let root = workspace_root();
    let mut out = root.join("target").join("gpu-bundle");
    let mut release = true;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--out" => {
                let dir = args.next().context("--out needs a directory")?;
                out = PathBuf::from(dir);
            }
            "--debug" => release = false,
            other => match other.strip_prefix("--out=") {
                Some(dir) => out = PathBuf::from(dir),
                None => bail!("unknown option {other:?}\n\n{HELP}"),
            },
        }
    }
    if std::env::consts::ARCH != "x86_64" || std::env::consts::OS != "linux" {
        println!(
            "xtask: note: building on {}-{}: the bundle runs only on machines like this one",
            std::env::consts::ARCH,
            std::env::consts::OS
        );
    }

    build(&out, release)
}

/// Builds the bundle into `out` (replacing an earlier bundle there), optimised or not.
pub(crate) fn build(out: &Path, release: bool) -> Result<()> {
    let root = workspace_root();
    // Refuse a wrong --out before minutes of building, not after.
    check_replaceable(out)?;
    let profile = if release { "--release" } else { "" };
    let tests = build_tests(profile)?;
    let ((capture, bench), no_cuda_demo) = build_capture(profile)?;
    let examples = build_examples(profile)?;
    let out = out.to_path_buf();

    prepare(&out)?;
    for (exe, name) in &tests {
        copy(exe, &out.join(name))?;
    }
    copy(&capture, &out.join(PROGRAM.1))?;
    copy(&bench, &out.join(BENCH.1))?;
    for (exe, name) in &examples {
        copy(exe, &out.join(name))?;
    }
    let snapshots = root.join(SNAPSHOTS);
    let copied = copy_snapshots(&snapshots, &out.join("snapshots"))?;

    let script = out.join("run.sh");
    fs::write(&script, RUN_SH)?;
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755))?;
    let torch = out.join("torch_graph.py");
    fs::write(&torch, TORCH_GRAPH)?;
    fs::set_permissions(&torch, fs::Permissions::from_mode(0o755))?;
    fs::write(
        out.join("bundle.env"),
        bundle_env(&snapshots, no_cuda_demo.as_deref()),
    )?;
    fs::write(
        out.join("README.txt"),
        readme(&build_info(), no_cuda_demo.as_deref()),
    )?;

    let size: u64 = fs::read_dir(&out)?
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    println!(
        "xtask: GPU bundle in {} ({} MB, {copied} snapshots{}): copy it to the GPU machine \
         (tar keeps the file modes) and run ./run.sh there",
        out.display(),
        size.div_ceil(1 << 20),
        if no_cuda_demo.is_some() {
            "; the capture program has no CUDA backend"
        } else {
            ""
        }
    );
    Ok(())
}

/// The `cargo test` options that select [`TESTS`]: each package and target once.
fn test_selection() -> String {
    let mut selected: Vec<String> = Vec::new();
    for (target, _) in &TESTS {
        let only = match target.kind {
            "lib" => "--lib".to_string(),
            _ => format!("--test {}", target.name),
        };
        for arg in [format!("-p {}", target.package), only] {
            if !selected.contains(&arg) {
                selected.push(arg);
            }
        }
    }
    selected.join(" ")
}

/// Builds the test binaries (`profile`: `--release` or empty); returns each of [`TESTS`]'
/// executable and name.
fn build_tests(profile: &str) -> Result<Vec<(PathBuf, &'static str)>> {
    // capture-cuda's `it` with the cudarc adapter's test (a cudarc context handed over).
    let line = format!(
        "test --no-run {} --features capture-cuda/cudarc {profile}",
        test_selection()
    );
    let line = line.trim_end();
    let (ok, built) = executables(&format!("cargo {line}"), cargo(line))?;
    if !ok {
        bail!("building the test binaries failed (cargo {line}); the bundle needs every one");
    }
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for (target, name) in TESTS {
        match find(&built, &target, true) {
            Some(exe) => found.push((exe, name)),
            None => missing.push(target.to_string()),
        }
    }
    if !missing.is_empty() {
        bail!("cargo built no test binary for {}", missing.join(", "));
    }
    Ok(found)
}

/// The executable built for `target` (with the test harness or without, as `test`).
fn find(built: &[Executable], target: &Target, test: bool) -> Option<PathBuf> {
    built
        .iter()
        .find(|e| e.test == test && target.is(&e.package, &e.kind, &e.target))
        .map(|e| e.path.clone())
}

/// Builds the `capture` program and the `capture-bench` program with CUDA and Vulkan,
/// or with Vulkan alone when the CUDA build fails; returns both and, in the second case,
/// why the CUDA demo is skipped.
fn build_capture(profile: &str) -> Result<((PathBuf, PathBuf), Option<String>)> {
    let ((program, _), (bench, _)) = (PROGRAM, BENCH);
    let mut skip = None;
    for features in [
        "capture-cli/cuda,capture-cli/vulkan,capture-bench/cuda,capture-bench/vulkan",
        "capture-cli/vulkan,capture-bench/vulkan",
    ] {
        let line = format!(
            "build -p {} --bin {} -p {} --bin {} --features {features} {profile}",
            program.package, program.name, bench.package, bench.name
        );
        let line = line.trim_end();
        let (ok, built) = executables(&format!("cargo {line}"), cargo(line))?;
        match (find(&built, &program, false), find(&built, &bench, false)) {
            (Some(exe), Some(bench)) if ok => return Ok(((exe, bench), skip)),
            _ => {
                println!("xtask: `cargo {line}` failed; trying without CUDA");
                skip = Some(format!(
                    "the capture program did not build with --features {features} when this \
                     bundle was made, so it has no CUDA backend"
                ));
            }
        }
    }
    bail!("the capture program did not build, with or without CUDA")
}

/// Builds the facade's [`EXAMPLES`] with CUDA (through cudarc, loaded at run time, so no
/// toolkit is needed) and Vulkan; each one's executable and name in the bundle.
fn build_examples(profile: &str) -> Result<Vec<(PathBuf, &'static str)>> {
    let mut line = String::from("build -p capture-graphs --features cudarc,vulkan");
    for (example, _) in &EXAMPLES {
        line.push_str(" --example ");
        line.push_str(example.name);
    }
    let line = format!("{line} {profile}");
    let line = line.trim_end();
    let (ok, built) = executables(&format!("cargo {line}"), cargo(line))?;
    let mut found = Vec::new();
    for (example, name) in EXAMPLES {
        match find(&built, &example, false) {
            Some(exe) if ok => found.push((exe, name)),
            _ => bail!("the example {} did not build (cargo {line})", example.name),
        }
    }
    Ok(found)
}

/// Fails unless `out` is absent, empty, or an earlier bundle (it holds a `run.sh`).
fn check_replaceable(out: &Path) -> Result<()> {
    if !out.exists() {
        return Ok(());
    }
    let empty = fs::read_dir(out)
        .with_context(|| format!("{} is not a directory", out.display()))?
        .next()
        .is_none();
    if !empty && !out.join("run.sh").is_file() {
        bail!(
            "refusing to replace {}: it is not empty and holds no run.sh of an earlier bundle",
            out.display()
        );
    }
    Ok(())
}

/// Makes `out` an empty directory, replacing an earlier bundle but nothing else.
fn prepare(out: &Path) -> Result<()> {
    check_replaceable(out)?;
    if out.exists() {
        fs::remove_dir_all(out).with_context(|| format!("removing {}", out.display()))?;
    }
    fs::create_dir_all(out.join("snapshots")).with_context(|| format!("creating {}", out.display()))
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}

/// Copies every `*.snap` of `from` into `to`; returns how many.
fn copy_snapshots(from: &Path, to: &Path) -> Result<usize> {
    let mut copied = 0;
    for entry in fs::read_dir(from).with_context(|| format!("listing {}", from.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "snap") {
            copy(&path, &to.join(path.file_name().context("a file name")?))?;
            copied += 1;
        }
    }
    if copied == 0 {
        bail!("{} holds no snapshot", from.display());
    }
    Ok(copied)
}

/// The commit and compiler the bundle is built from, for its README.
fn build_info() -> String {
    let output = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .current_dir(workspace_root())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_else(|| "unknown".to_string())
    };
    format!(
        "commit {}, {}",
        output("git", &["describe", "--always", "--dirty"]),
        output("rustc", &["--version"])
    )
}

/// A single-quoted shell word.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The bundle's `bundle.env`, which run.sh sources: `source_snapshots` is the directory
/// the capture-suite binary has compiled in; `no_cuda_demo` says why the CUDA demo is
/// skipped, if it is.
fn bundle_env(source_snapshots: &Path, no_cuda_demo: Option<&str>) -> String {
    format!(
        "# Written by `cargo xtask gpu-bundle` for run.sh, which sources it (see the top of
# run.sh, or xtask/gpu/run.sh in the source tree).
SOURCE_SNAPSHOTS={}
SOURCE_TREE_TEST={}
NO_CUDA_DEMO={}
",
        quote(&source_snapshots.display().to_string()),
        quote(SOURCE_TREE_TEST),
        quote(no_cuda_demo.unwrap_or_default()),
    )
}

/// The bundle's `README.txt`.
fn readme(info: &str, no_cuda_demo: Option<&str>) -> String {
    let note = no_cuda_demo
        .map(|why| format!("\nNote: {why}; run.sh skips the CUDA demo and says so.\n"))
        .unwrap_or_default();
    format!(
        "capture GPU bundle ({info})

Prebuilt tests for a machine with an NVIDIA GPU and its driver, needing neither Rust nor
a network. Run:

    ./run.sh

It prints nvidia-smi, then runs
  capture-suite-mock             the scenario suite on the mock, against snapshots/ (an
                                 altered snapshot fails here, on any machine)
  capture-cuda-it --show-output  the same suite on CUDA (CAPTURE_REQUIRE_CUDA=1: no
                                 driver or no device is a failure), printing the device
  capture-vulkan-it              the suite on Vulkan in both memory modes, when
                                 libvulkan.so.1 is present (CAPTURE_REQUIRE_VULKAN=1
                                 when the Khronos validation layer is installed too)
  capture-vulkan-unit            capture-vulkan's unit tests, the validation layer's
                                 canary among them, when libvulkan.so.1 is present
  capture-cuda-alloc-count       no heap allocation per launch or replay on CUDA
  capture-vulkan-alloc-count     the same on Vulkan, when libvulkan.so.1 is present
  capture demo --backend cuda    eager vs replayed kernel chain, results checked equal
  capture demo --backend vulkan  the same, when libvulkan.so.1 is present
  capture bench --backend cuda   the benchmark matrix on CUDA, beside a bare
                                 cuLaunchKernel loop (the eager floor)
  torch_graph.py                 the same chain eagerly and as torch.cuda.CUDAGraph
                                 replays, where PyTorch is installed
  capture bench --backend vulkan the launch-bound rows on Vulkan, beside the ash floor
  capture decode --backend cuda  the llama-shaped decoder captured once and replayed per
                                 token, its ids, logits and host reference checked; its
                                 products as cuBLAS SGEMMs through foreign work (cuBLAS
                                 looked for where PyTorch installs it; the step fails
                                 without it; CAPTURE_CUBLAS=PATH names one)
  capture decode --backend vulkan the same, when libvulkan.so.1 is present
  capture decode --until-eos --backend cuda
                                 decode until the end token: one loop replay the device
                                 ends (rule 30) against replays with host checks
  capture decode --until-eos --backend vulkan  the same, with libvulkan.so.1
  capture decode --buckets 1,2,4,8 --backend cuda
                                 a batch over a paged KV cache, one graph per bucket in
                                 one graph pool: tokens/s per bucket eager and replayed,
                                 the pool's memory against separate pools, every check
  capture decode --buckets 1,2,4,8 --backend vulkan  the same, with libvulkan.so.1
  engine-step --backend cuda     the engine example on CUDA (its kernels, its library
                                 call on the raw stream, its cudarc weights imported)
  moe-step --backend cuda        the MoE example: experts forked onto two CUDA streams
                                 in one graph, against eager and one stream
  paged-step --backend cuda      the paged example: a position slot and a KV page
                                 rebound per token, two graphs in one graph pool
  decode-until --backend cuda    the loop example: one loop replay (a WHILE conditional
                                 node) ended by the sampler's stop flag
and ends with `bundle: N passed, M failed` (exit status non-zero on any failure).
Each step runs under a timeout (--step-timeout S, default 240) and writes its output to
logs/NN-step.log beside run.sh (--logs DIR to put them elsewhere), with summary.txt;
--archive FILE writes all the logs so far into one gzipped tar after every step;
--short runs one benchmark row and a small decoder, --no-vulkan skips Vulkan.
capture's CUDA driver model (the stand-in for libcuda.so.1 CI tests with) is refused as
a driver unless --driver-model says it is meant.
{note}
run.sh reads what is particular to this build from bundle.env.

Needs: x86-64 Linux with a glibc no older than the build machine's; the NVIDIA driver
(libcuda.so.1). NVRTC is not needed (the kernels ship as cubins and PTX; capture-cuda's NVRTC test
says SKIP here and runs in CI). Environment run.sh sets: CAPTURE_SNAPSHOTS,
INSTA_WORKSPACE_ROOT, INSTA_UPDATE=no, CI=true, CAPTURE_REQUIRE_CUDA=1, LP_NUM_THREADS=0.
One test binary can be run alone with a filter, e.g.
    CAPTURE_REQUIRE_CUDA=1 CAPTURE_SNAPSHOTS=$PWD/snapshots ./capture-cuda-it capture_replay
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cargo::tests::artifact_line;
    use crate::cargo::{executable, parse_message};

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-bundle-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn built(artifacts: &[(&str, &str, &str, bool)]) -> Vec<Executable> {
        artifacts
            .iter()
            .map(|(id, kind, name, test)| {
                executable(&parse_message(&artifact_line(id, kind, name, *test)).unwrap()).unwrap()
            })
            .collect()
    }

    #[test]
    fn each_bundled_binary_is_found_by_package_and_target() {
        let built = built(&[
            (
                "path+file:///w/crates/capture-core#0.1.0",
                "lib",
                "capture_core",
                true,
            ),
            (
                "path+file:///w/crates/capture-vulkan#0.1.0",
                "test",
                "it",
                true,
            ),
            (
                "path+file:///w/crates/capture-suite#0.1.0",
                "test",
                "core",
                true,
            ),
            (
                "path+file:///w/crates/capture-suite#0.1.0",
                "test",
                "mock",
                true,
            ),
            (
                "path+file:///w/crates/capture-cli#capture-cli@0.1.0",
                "bin",
                "capture",
                false,
            ),
            (
                "path+file:///w/crates/capture#capture-graphs@0.1.0",
                "example",
                "engine_step",
                false,
            ),
        ]);
        let path = |name: &str| Some(PathBuf::from(format!("/w/target/release/deps/{name}-0123")));
        assert_eq!(find(&built, &TESTS[2].0, true), path("it"));
        assert_eq!(find(&built, &TESTS[5].0, true), path("mock"));
        assert_eq!(
            find(&built, &TESTS[0].0, true),
            None,
            "capture-cuda's `it` is not built"
        );
        assert_eq!(find(&built, &PROGRAM.0, false), path("capture"));
        assert_eq!(find(&built, &EXAMPLES[0].0, false), path("engine_step"));
        assert_eq!(
            find(&built, &PROGRAM.0, true),
            None,
            "the program, not its unit tests"
        );
    }

    #[test]
    fn the_test_binaries_are_selected_once_each() {
        assert_eq!(
            test_selection(),
            "-p capture-cuda --test it --test alloc_count -p capture-vulkan --lib \
             -p capture-suite --test mock"
        );
    }

    #[test]
    fn run_sh_runs_every_bundled_binary_and_has_no_placeholder() {
        let examples = EXAMPLES.iter().map(|(_, name)| *name);
        for name in TESTS
            .iter()
            .map(|(_, name)| *name)
            .chain([PROGRAM.1])
            .chain(examples)
        {
            assert!(
                RUN_SH.contains(&format!("./{name}")),
                "run.sh does not run {name}"
            );
            let readme = readme("info", None);
            assert!(readme.contains(name), "README.txt does not name {name}");
        }
        assert!(RUN_SH.starts_with("#!/usr/bin/env bash\n"));
        let placeholder = RUN_SH
            .split('@')
            .find(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_uppercase() || c == '_'));
        assert_eq!(placeholder, None, "run.sh is copied as it is checked in");
        let out = Command::new("bash")
            .args(["-n", concat!(env!("CARGO_MANIFEST_DIR"), "/gpu/run.sh")])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "bash -n run.sh: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn bundle_env_reads_back_in_the_shell() {
        let dir = scratch("env");
        let why = "it's not built; $HOME `x` \\ \"y\"";
        fs::write(
            dir.join("bundle.env"),
            bundle_env(Path::new("/w/it's/snapshots"), Some(why)),
        )
        .unwrap();
        let out = Command::new("bash")
            .args([
                "-c",
                r#". ./bundle.env && printf '%s|%s|%s' "$SOURCE_SNAPSHOTS" "$SOURCE_TREE_TEST" "$NO_CUDA_DEMO""#,
            ])
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(out.status.success());
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            format!("/w/it's/snapshots|{SOURCE_TREE_TEST}|{why}")
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A bundle of `run.sh`, its `bundle.env`, and fake binaries that log how they were
    /// run to `calls`; the CUDA suite passes a scenario when `cuda_ok`.
    fn fake_bundle(
        name: &str,
        source_snapshots: &Path,
        no_cuda_demo: Option<&str>,
        cuda_ok: bool,
    ) -> PathBuf {
        let dir = scratch(name);
        fs::create_dir_all(dir.join("snapshots")).unwrap();
        fs::write(dir.join("run.sh"), RUN_SH).unwrap();
        fs::write(
            dir.join("bundle.env"),
            bundle_env(source_snapshots, no_cuda_demo),
        )
        .unwrap();
        let cuda_line = if cuda_ok {
            "test cuda::capture_replay ... ok"
        } else {
            "running 0 tests"
        };
        for (file, body) in [
            (
                "capture-suite-mock",
                "echo \"mock $* in $CAPTURE_SNAPSHOTS\" >> calls".to_string(),
            ),
            (
                "capture-cuda-it",
                format!("echo \"cuda $* $CAPTURE_REQUIRE_CUDA\" >> calls; echo '{cuda_line}'"),
            ),
            (
                "capture-cuda-alloc-count",
                "echo \"cuda-alloc $CAPTURE_REQUIRE_CUDA\" >> calls".to_string(),
            ),
            (
                "capture-vulkan-it",
                "echo \"vulkan $*\" >> calls".to_string(),
            ),
            (
                "capture-vulkan-unit",
                "echo \"vulkan-unit $*\" >> calls".to_string(),
            ),
            (
                "capture-vulkan-alloc-count",
                "echo \"vulkan-alloc $CAPTURE_REQUIRE_VULKAN\" >> calls".to_string(),
            ),
            (
                "engine-step",
                "echo \"engine-step $*\" >> calls; echo 'engine_step on cuda: fake'".to_string(),
            ),
            (
                "moe-step",
                "echo \"moe-step $*\" >> calls; echo 'moe_step on cuda: fake'".to_string(),
            ),
            (
                "paged-step",
                "echo \"paged-step $*\" >> calls; echo 'paged_step on cuda: fake'".to_string(),
            ),
            (
                "decode-until",
                "echo \"decode-until $*\" >> calls; echo 'decode_until on cuda: fake'".to_string(),
            ),
            (
                "capture",
                // The decoder prints its GEMM path: cuBLAS when run.sh requires it.
                "echo \"capture $*\" >> calls; if [ \"$1\" = decode ]; then \
                 echo \"decode cuBLAS required: ${CAPTURE_REQUIRE_CUBLAS:-0}\" >> calls; \
                 if [ \"${CAPTURE_REQUIRE_CUBLAS:-0}\" = 1 ]; then \
                 echo 'GEMM path: cuBLAS SGEMM (fake)'; \
                 else echo 'GEMM path: own kernel (fake)'; fi; \
                 case \"$*\" in *--buckets*) echo '  separate / shared = 1.88 (fake)';; esac; fi"
                    .to_string(),
            ),
        ] {
            let path = dir.join(file);
            fs::write(&path, format!("#!/usr/bin/env bash\n{body}\n")).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        }
        dir
    }

    /// A directory holding a fake `libcuda.so.1` (capture's driver model when `model`).
    fn fake_driver(name: &str, model: bool) -> PathBuf {
        let dir = scratch(name);
        let body = if model {
            "\x7fELF ... capture CUDA driver model (not a GPU) ..."
        } else {
            "\x7fELF ... NVIDIA ..."
        };
        fs::write(dir.join("libcuda.so.1"), body).unwrap();
        dir
    }

    /// Runs the bundle's run.sh from elsewhere with `args`, the driver in `driver` first
    /// on `LD_LIBRARY_PATH`; returns its success, output and calls.
    fn run_bundle_with(dir: &Path, driver: &Path, args: &[&str]) -> (bool, String, String) {
        let out = Command::new("bash")
            .arg(dir.join("run.sh"))
            .args(args)
            .current_dir(std::env::temp_dir())
            .env("LD_LIBRARY_PATH", driver)
            .env(
                "CAPTURE_CUDA_MODEL_KERNELS",
                "/k/libkernels.so:/k/libcuda_model_kernels.so",
            )
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let calls = fs::read_to_string(dir.join("calls")).unwrap_or_default();
        (out.status.success(), text, calls)
    }

    fn run_bundle(dir: &Path) -> (bool, String, String) {
        let driver = fake_driver(
            &format!("driver-{}", dir.display().to_string().len()),
            false,
        );
        let ran = run_bundle_with(dir, &driver, &[]);
        fs::remove_dir_all(&driver).unwrap();
        ran
    }

    /// The `bundle: N passed, M failed` line, checked against the steps' own lines.
    fn tally(text: &str) -> (usize, usize) {
        let last = text
            .lines()
            .rfind(|l| l.starts_with("bundle: "))
            .unwrap_or_else(|| panic!("no bundle line in {text}"));
        let (passed, failed) = last
            .strip_prefix("bundle: ")
            .and_then(|l| l.split_once(" passed, "))
            .unwrap_or_else(|| panic!("last line {last:?}"));
        let failed = failed.strip_suffix(" failed").unwrap();
        let counted = (
            text.lines()
                .filter(|l| l.starts_with("== ") && l.contains(": ok ("))
                .count(),
            text.lines()
                .filter(|l| l.starts_with("== ") && l.contains(": FAILED"))
                .count(),
        );
        assert_eq!((passed.parse().unwrap(), failed.parse().unwrap()), counted);
        counted
    }

    #[test]
    fn run_sh_runs_the_bundle_as_bundle_env_says() {
        let source = scratch("source-snapshots");
        fs::write(source.join("capture_replay.snap"), "").unwrap();
        let dir = fake_bundle("with-source", &source, None, true);
        let (ok, text, calls) = run_bundle(&dir);
        assert!(ok, "{text}");
        let snapshots = dir.join("snapshots");
        assert!(
            calls.contains(&format!("mock  in {}\n", snapshots.display())),
            "the whole mock suite runs against the bundle's snapshots:\n{calls}"
        );
        assert!(calls.contains("cuda --show-output 1\n"), "{calls}");
        assert!(calls.contains("capture demo --backend cuda\n"), "{calls}");
        assert!(calls.contains("cuda-alloc 1\n"), "{calls}");
        if calls.contains("vulkan ") {
            // Where this machine has a Vulkan loader: the unit tests and counts run too.
            assert!(calls.contains("vulkan-unit"), "{calls}");
            assert!(calls.contains("vulkan-alloc 1\n"), "{calls}");
        }
        assert!(calls.contains("capture bench --backend cuda\n"), "{calls}");
        assert!(calls.contains("capture decode --backend cuda\n"), "{calls}");
        assert!(
            calls.contains("capture decode --backend cuda --buckets 1,2,4,8\n"),
            "{calls}"
        );
        assert!(calls.contains("engine-step --backend cuda\n"), "{calls}");
        assert!(calls.contains("moe-step --backend cuda\n"), "{calls}");
        assert!(calls.contains("paged-step --backend cuda\n"), "{calls}");
        assert!(calls.contains("decode-until --backend cuda\n"), "{calls}");
        assert!(
            calls.contains("capture decode --backend cuda --until-eos"),
            "{calls}"
        );
        assert!(
            calls.contains("decode cuBLAS required: 1\n"),
            "on a GPU the decoder must run its products through cuBLAS:\n{calls}"
        );
        assert_eq!(tally(&text).1, 0, "{text}");
        // One log file per step, and the summary, beside run.sh.
        let logs: Vec<String> = fs::read_dir(dir.join("logs"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            logs.iter().any(|l| l.ends_with("-capture-cuda-tests.log")),
            "{logs:?}"
        );
        assert!(logs.contains(&"summary.txt".to_string()), "{logs:?}");
        let cuda_log = logs
            .iter()
            .find(|l| l.ends_with("-capture-cuda-tests.log"))
            .unwrap();
        let cuda_log = fs::read_to_string(dir.join("logs").join(cuda_log)).unwrap();
        assert!(
            cuda_log.contains("test cuda::capture_replay ... ok"),
            "{cuda_log}"
        );
        fs::remove_dir_all(&dir).unwrap();
        fs::remove_dir_all(&source).unwrap();
    }

    #[test]
    fn run_sh_skips_what_this_machine_cannot_run_and_fails_an_empty_cuda_suite() {
        let dir = fake_bundle(
            "without-source",
            Path::new("/nonexistent/snapshots"),
            Some("no CUDA in this build"),
            false,
        );
        let (ok, text, calls) = run_bundle(&dir);
        assert!(!ok, "{text}");
        assert!(
            calls.contains(&format!("mock --skip {SOURCE_TREE_TEST} in ")),
            "{calls}"
        );
        assert!(text.contains("== demo --backend cuda: skipped: no CUDA in this build\n"));
        assert!(!calls.contains("capture demo --backend cuda"), "{calls}");
        assert!(text.contains("== decode --backend cuda: skipped: no CUDA in this build\n"));
        assert!(text.contains(
            "== decode --buckets 1,2,4,8 --backend cuda: skipped: no CUDA in this build\n"
        ));
        assert!(text.contains("== bench --backend cuda: skipped: no CUDA in this build\n"));
        assert!(text.contains("no line of the output matches"), "{text}");
        assert!(text.contains("\nfailed: capture-cuda tests\n"), "{text}");
        assert_eq!(tally(&text).1, 1, "{text}");
        fs::remove_file(dir.join("bundle.env")).unwrap();
        let (ok, text, _) = run_bundle(&dir);
        assert!(!ok);
        assert!(text.contains("no bundle.env"), "{text}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn run_sh_refuses_the_driver_model_unless_it_is_meant() {
        let source = scratch("model-snapshots");
        let dir = fake_bundle("model", &source, None, true);
        let model = fake_driver("model-driver", true);
        let (ok, text, _) = run_bundle_with(&dir, &model, &["--no-vulkan"]);
        assert!(!ok, "{text}");
        assert!(
            text.contains("is capture's CUDA driver model, not a GPU's driver"),
            "{text}"
        );
        assert!(text.contains("failed: CUDA driver"), "{text}");
        let (ok, text, calls) =
            run_bundle_with(&dir, &model, &["--driver-model", "--no-vulkan", "--short"]);
        assert!(ok, "{text}");
        assert!(text.contains("(--driver-model: expected)"), "{text}");
        assert!(
            calls.contains(
                "capture bench --backend cuda --rows 64x150,fork,update,decode,until --passes 4\n"
            ),
            "{calls}"
        );
        assert!(text.contains("torch CUDA graph: skipped"), "{text}");
        // A GPU's driver where the model is meant fails too.
        let gpu = fake_driver("gpu-driver", false);
        let (ok, text, _) = run_bundle_with(&dir, &gpu, &["--driver-model", "--no-vulkan"]);
        assert!(!ok, "{text}");
        assert!(
            text.contains("is not capture's CUDA driver model"),
            "{text}"
        );
        for d in [dir, source, model, gpu] {
            fs::remove_dir_all(&d).unwrap();
        }
    }

    #[test]
    fn run_sh_kills_a_step_past_its_timeout_and_logs_where_asked() {
        let source = scratch("slow-snapshots");
        let dir = fake_bundle("slow", &source, None, true);
        fs::write(
            dir.join("capture-cuda-alloc-count"),
            "#!/usr/bin/env bash\necho started\nsleep 30\n",
        )
        .unwrap();
        let logs = scratch("slow-logs");
        let archived = scratch("slow-archive");
        let archive = archived.join("logs.tar.gz");
        let driver = fake_driver("slow-driver", false);
        let (ok, text, _) = run_bundle_with(
            &dir,
            &driver,
            &[
                "--step-timeout",
                "1",
                "--no-vulkan",
                "--logs",
                logs.to_str().unwrap(),
                "--archive",
                archive.to_str().unwrap(),
            ],
        );
        assert!(!ok, "{text}");
        assert!(
            text.contains(
                "capture-cuda allocation counts: FAILED: killed after the step timeout of 1 s"
            ),
            "{text}"
        );
        let summary = fs::read_to_string(logs.join("summary.txt")).unwrap();
        assert!(summary.contains("FAILED"), "{summary}");
        assert!(
            summary.lines().last().unwrap().starts_with("bundle: "),
            "{summary}"
        );
        // The archive holds every log, the killed step's whole, and the summary.
        let listed = Command::new("tar")
            .arg("-tzf")
            .arg(&archive)
            .output()
            .unwrap();
        let listed = String::from_utf8_lossy(&listed.stdout).to_string();
        assert!(listed.contains("./summary.txt"), "{listed}");
        let killed = fs::read_dir(&logs)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().to_string())
            .find(|n| n.contains("allocation-counts"))
            .expect("the killed step's log");
        assert!(listed.contains(&killed), "{listed}");
        let unpacked = scratch("slow-unpacked");
        let status = Command::new("tar")
            .arg("-xzf")
            .arg(&archive)
            .arg("-C")
            .arg(&unpacked)
            .status()
            .unwrap();
        assert!(status.success());
        let log = fs::read_to_string(unpacked.join(&killed)).unwrap();
        assert!(log.contains("started"), "{log}");
        assert!(
            log.contains("killed after the step timeout of 1 s"),
            "{log}"
        );
        assert!(!archived.join("logs.tar.gz.part").exists());
        for d in [dir, source, logs, driver, archived, unpacked] {
            fs::remove_dir_all(&d).unwrap();
        }
    }

    #[test]
    fn a_directory_that_is_not_a_bundle_is_not_replaced() {
        let dir = scratch("replace");
        fs::write(dir.join("precious"), "").unwrap();
        assert!(prepare(&dir).is_err());
        assert!(dir.join("precious").exists());
        fs::write(dir.join("run.sh"), "").unwrap();
        prepare(&dir).unwrap();
        assert!(!dir.join("precious").exists());
        assert!(dir.join("snapshots").is_dir());
        fs::remove_dir_all(&dir).unwrap();
    }
}
