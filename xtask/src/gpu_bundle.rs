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
into DIR (default target/gpu-bundle, replaced when it holds an earlier bundle): the
backends' release `it`, `alloc_count` and unit test binaries (capture-cuda's with its
`cudarc` feature), capture-suite's `mock` and the shared snapshots, the `capture` program
with `capture-bench` beside it (--features cuda,vulkan; vulkan alone if the CUDA build
fails, and run.sh then skips the CUDA demo and says so), the facade's GPU examples
(--features cudarc,vulkan), torch_graph.py, run.sh with the bundle.env it reads, and
README.txt (xtask/gpu/README.txt: what each step runs).

--debug builds it unoptimised (what `cargo xtask test` runs on the CUDA driver model,
reusing the test build); a GPU machine gets the release build.

Copy it with its file modes (tar -czf gpu-bundle.tar.gz -C target gpu-bundle), unpack it
on the GPU machine and run ./run.sh (./run.sh --help: --logs DIR, --archive FILE,
--step-timeout S, --short, --no-vulkan). The binaries are x86-64 Linux, dynamically linked
against this machine's glibc: the GPU machine needs the same or a newer one.";

/// The bundle's script, checked in as `xtask/gpu/run.sh`; what varies is in `bundle.env`.
const RUN_SH: &str = include_str!("../gpu/run.sh");

/// What the bundle is and how to run it, checked in as `xtask/gpu/README.txt`; `{info}`
/// and `{note}` are filled in.
const README: &str = include_str!("../gpu/README.txt");

/// The PyTorch side of the GPU benchmark, checked in as `xtask/gpu/torch_graph.py`.
const TORCH_GRAPH: &str = include_str!("../gpu/torch_graph.py");

/// The test binaries the bundle carries (see [`bundled`] for their names in it).
const TESTS: [Target; 6] = [
    Target::test("capture-cuda", "it"),
    Target::test("capture-cuda", "alloc_count"),
    Target::test("capture-vulkan", "it"),
    Target::test("capture-vulkan", "alloc_count"),
    Target::lib("capture-vulkan", "capture_vulkan"),
    Target::test("capture-suite", "mock"),
];

/// The capture program, and the benchmark program `capture bench` runs (found beside it).
const PROGRAMS: [Target; 2] = [
    Target::new("capture-cli", "bin", "capture"),
    Target::new("capture-bench", "bin", "capture-bench"),
];

/// The facade's examples the bundle carries (built with `cudarc,vulkan`: the engine
/// example's CUDA path goes through cudarc).
const EXAMPLES: [Target; 4] = [
    Target::new("capture-graphs", "example", "engine_step"),
    Target::new("capture-graphs", "example", "moe_step"),
    Target::new("capture-graphs", "example", "paged_step"),
    Target::new("capture-graphs", "example", "decode_until"),
];

/// Built binaries, each with its name in the bundle.
type Bundled = Vec<(PathBuf, String)>;

/// A binary's name in the bundle, which run.sh runs: `<package>-<test>` for a test
/// target (`capture-cuda-alloc-count`), `<package>-unit` for a library's unit tests, the
/// program's or example's own name otherwise (`capture`, `engine-step`).
fn bundled(target: &Target) -> String {
    let name = target.name.replace('_', "-");
    match target.kind {
        "lib" => format!("{}-unit", target.package),
        "test" => format!("{}-{name}", target.package),
        _ => name,
    }
}

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
    // capture-cuda's `it` with the cudarc adapter's test (a cudarc context handed over).
    let tests = format!(
        "test --no-run {} --features capture-cuda/cudarc",
        test_selection()
    );
    let mut binaries = built(&tests, profile, &TESTS, true)?;
    let (programs, no_cuda_demo) = build_programs(profile)?;
    binaries.extend(programs);
    let examples = EXAMPLES.iter().map(|e| format!(" --example {}", e.name));
    let examples = format!(
        "build -p capture-graphs --features cudarc,vulkan{}",
        examples.collect::<String>()
    );
    binaries.extend(built(&examples, profile, &EXAMPLES, false)?);

    prepare(out)?;
    for (exe, name) in &binaries {
        copy(exe, &out.join(name))?;
    }
    let snapshots = root.join(SNAPSHOTS);
    let copied = copy_snapshots(&snapshots, &out.join("snapshots"))?;
    for (name, text) in [("run.sh", RUN_SH), ("torch_graph.py", TORCH_GRAPH)] {
        fs::write(out.join(name), text)?;
        fs::set_permissions(out.join(name), fs::Permissions::from_mode(0o755))?;
    }
    let no_cuda_demo = no_cuda_demo.as_deref();
    fs::write(out.join("bundle.env"), bundle_env(&snapshots, no_cuda_demo))?;
    fs::write(out.join("README.txt"), readme(&build_info(), no_cuda_demo))?;

    let size: u64 = fs::read_dir(out)?
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
    for target in &TESTS {
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

/// Runs `cargo <line> <profile>` and returns each of `targets`' executable (built with the
/// test harness or without, as `test`) and name in the bundle; fails unless every one
/// was built.
fn built(line: &str, profile: &str, targets: &[Target], test: bool) -> Result<Bundled> {
    let line = format!("{line} {profile}");
    let line = line.trim_end();
    let (ok, built) = executables(&format!("cargo {line}"), cargo(line))?;
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for target in targets {
        match find(&built, target, test) {
            Some(exe) => found.push((exe, bundled(target))),
            None => missing.push(target.to_string()),
        }
    }
    if !ok || !missing.is_empty() {
        let missing = if missing.is_empty() {
            "it failed".into()
        } else {
            missing.join(", ")
        };
        bail!("cargo {line} did not build what the bundle needs: {missing}");
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

/// Builds the [`PROGRAMS`] with CUDA and Vulkan, or with Vulkan alone when the CUDA build
/// fails; returns them and, in the second case, why the CUDA demo is skipped.
fn build_programs(profile: &str) -> Result<(Bundled, Option<String>)> {
    let mut skip = None;
    for features in [
        "capture-cli/cuda,capture-cli/vulkan,capture-bench/cuda,capture-bench/vulkan",
        "capture-cli/vulkan,capture-bench/vulkan",
    ] {
        let line = format!(
            "build -p capture-cli --bin capture -p capture-bench --bin capture-bench --features {features}"
        );
        match built(&line, profile, &PROGRAMS, false) {
            Ok(found) => return Ok((found, skip)),
            Err(e) => {
                println!("xtask: {e}; trying without CUDA");
                skip = Some(format!(
                    "the capture program did not build with --features {features} when this \
                     bundle was made, so it has no CUDA backend"
                ));
            }
        }
    }
    bail!("the capture program did not build, with or without CUDA")
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

/// The bundle's `README.txt`: `xtask/gpu/README.txt` with the build and the note filled
/// in.
fn readme(info: &str, no_cuda_demo: Option<&str>) -> String {
    let note = no_cuda_demo
        .map(|why| format!("\nNote: {why}; run.sh skips the CUDA demo and says so.\n"))
        .unwrap_or_default();
    README.replace("{info}", info).replace("{note}", &note)
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
        assert_eq!(find(&built, &TESTS[2], true), path("it"));
        assert_eq!(find(&built, &TESTS[5], true), path("mock"));
        assert_eq!(
            find(&built, &TESTS[0], true),
            None,
            "capture-cuda's `it` is not built"
        );
        assert_eq!(find(&built, &PROGRAMS[0], false), path("capture"));
        assert_eq!(find(&built, &EXAMPLES[0], false), path("engine_step"));
        assert_eq!(
            find(&built, &PROGRAMS[0], true),
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
        let readme = readme("info", None);
        assert!(!readme.contains("{info}") && !readme.contains("{note}"));
        // capture-bench is run through `./capture bench`.
        let run = TESTS.iter().chain(&PROGRAMS[..1]).chain(&EXAMPLES);
        for name in run.map(bundled) {
            assert!(
                RUN_SH.contains(&format!("./{name}")),
                "run.sh does not run {name}"
            );
            assert!(readme.contains(&name), "README.txt does not name {name}");
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
