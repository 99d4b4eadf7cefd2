//! `cargo xtask gpu-bundle`: the GPU tests prebuilt, for a GPU machine with no Rust and no
//! network: the release test binaries of capture-cuda, capture-vulkan and capture-mock,
//! the `capture` program, the shared snapshots, and a `run.sh` that runs them all.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::json::{self, Value};
use crate::test::cargo;
use crate::workspace_root;

const HELP: &str = "usage: cargo xtask gpu-bundle [--out DIR]

Builds, here, what a GPU machine with no Rust and no network needs to run the GPU tests,
into DIR (default target/gpu-bundle, replaced when it holds an earlier bundle):

  capture-cuda-it, capture-vulkan-it, capture-mock-it
               the crates' release integration-test binaries (CUDA 12.9 bindings)
  capture      the capture program, --features cuda,vulkan (vulkan alone if the CUDA
               build fails; run.sh then skips the CUDA demo and says so)
  snapshots/   the scenario suite's shared snapshots (CAPTURE_SNAPSHOTS points here)
  run.sh       runs them all with CUDA required; ends `bundle: N passed, M failed`
  README.txt   what the bundle is and how to run it

Copy it with its file modes (tar -czf gpu-bundle.tar.gz -C target gpu-bundle), unpack it
on the GPU machine and run ./run.sh. The binaries are x86-64 Linux, dynamically linked
against this machine's glibc: the GPU machine needs the same or a newer one.";

/// The crates whose `it` test binary the bundle carries.
const TEST_CRATES: [&str; 3] = ["capture-cuda", "capture-vulkan", "capture-mock"];

/// The capture-mock test that reads the snapshot directory compiled into the binary
/// (the build machine's source tree) rather than `CAPTURE_SNAPSHOTS`.
const SOURCE_TREE_TEST: &str = "every_scenario_has_a_snapshot_and_no_snapshot_lacks_a_scenario";

pub(crate) fn run(args: &[String]) -> Result<()> {
    let root = workspace_root();
    let mut out = root.join("target").join("gpu-bundle");
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => {
                println!("{HELP}");
                return Ok(());
            }
            "--out" => {
                let dir = args.next().context("--out needs a directory")?;
                out = PathBuf::from(dir);
            }
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

    // Refuse a wrong --out before minutes of building, not after.
    check_replaceable(&out)?;
    let tests = build_tests()?;
    let (capture, cuda_demo) = build_capture()?;

    prepare(&out)?;
    for (krate, exe) in &tests {
        copy(exe, &out.join(format!("{krate}-it")))?;
    }
    copy(&capture, &out.join("capture"))?;
    let snapshots = root.join("crates/capture-mock/snapshots");
    let copied = copy_snapshots(&snapshots, &out.join("snapshots"))?;

    let script = out.join("run.sh");
    fs::write(&script, run_sh(&snapshots, cuda_demo.as_deref()))?;
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755))?;
    fs::write(
        out.join("README.txt"),
        readme(&build_info(), cuda_demo.as_deref()),
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
        if cuda_demo.is_some() {
            "; the capture program has no CUDA backend"
        } else {
            ""
        }
    );
    Ok(())
}

/// Builds the release test binaries and returns each crate's `it` binary.
fn build_tests() -> Result<BTreeMap<&'static str, PathBuf>> {
    let mut args = vec!["test", "--release", "--no-run"];
    for krate in TEST_CRATES {
        args.extend(["-p", krate]);
    }
    args.extend(["--features", "capture-cuda/cuda-12090"]);
    let (ok, messages) = cargo_json(&args)?;
    if !ok {
        bail!(
            "building the test binaries failed (cargo {}); the bundle needs all three",
            args.join(" ")
        );
    }
    let mut found = BTreeMap::new();
    for message in &messages {
        if let Some((krate, exe)) = test_binary(message) {
            found.insert(krate, exe);
        }
    }
    let missing: Vec<&str> = TEST_CRATES
        .into_iter()
        .filter(|k| !found.contains_key(k))
        .collect();
    if !missing.is_empty() {
        bail!("cargo built no `it` test binary for {}", missing.join(", "));
    }
    Ok(found)
}

/// The crate and executable of a `compiler-artifact` message for one of
/// [`TEST_CRATES`]' `it` test binaries.
fn test_binary(message: &Value) -> Option<(&'static str, PathBuf)> {
    let exe = artifact(message, "it", "test")?;
    if message.get("profile")?.get("test")?.as_bool() != Some(true) {
        return None;
    }
    let manifest = Path::new(message.get("manifest_path")?.as_str()?);
    let dir = manifest.parent()?.file_name()?.to_str()?;
    let krate = TEST_CRATES.into_iter().find(|k| *k == dir)?;
    Some((krate, exe))
}

/// The executable of a `compiler-artifact` message for target `name` of `kind`.
fn artifact(message: &Value, name: &str, kind: &str) -> Option<PathBuf> {
    if message.get("reason")?.as_str()? != "compiler-artifact" {
        return None;
    }
    let target = message.get("target")?;
    let kinds = target.get("kind")?.as_array()?;
    if target.get("name")?.as_str()? != name || !kinds.iter().any(|k| k.as_str() == Some(kind)) {
        return None;
    }
    message.get("executable")?.as_str().map(PathBuf::from)
}

/// Builds the `capture` program with CUDA and Vulkan, or with Vulkan alone when the
/// CUDA build fails; returns it and, in the second case, why the CUDA demo is skipped.
fn build_capture() -> Result<(PathBuf, Option<String>)> {
    let mut skip = None;
    for features in ["cuda,vulkan", "vulkan"] {
        let args = [
            "build",
            "--release",
            "-p",
            "capture",
            "--features",
            features,
        ];
        let (ok, messages) = cargo_json(&args)?;
        let exe = messages.iter().find_map(|m| artifact(m, "capture", "bin"));
        match exe {
            Some(exe) if ok => return Ok((exe, skip)),
            _ => {
                println!(
                    "xtask: `cargo {}` failed; trying without CUDA",
                    args.join(" ")
                );
                skip = Some(format!(
                    "the capture program did not build with --features {features} when this \
                     bundle was made, so it has no CUDA backend"
                ));
            }
        }
    }
    bail!("the capture program did not build, with or without CUDA")
}

/// Runs `cargo <args> --message-format=json-render-diagnostics` (diagnostics and
/// progress on stderr as usual) and returns whether it succeeded and its JSON messages.
fn cargo_json(args: &[&str]) -> Result<(bool, Vec<Value>)> {
    println!("xtask: cargo {}", args.join(" "));
    let mut child = cargo(args)
        .arg("--message-format=json-render-diagnostics")
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting cargo {}", args.join(" ")))?;
    let stdout = child.stdout.take().context("cargo's stdout")?;
    let mut messages = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        if line.starts_with('{') {
            messages.push(
                json::parse(&line).with_context(|| format!("reading cargo's message {line}"))?,
            );
        } else if !line.trim().is_empty() {
            println!("{line}");
        }
    }
    Ok((child.wait()?.success(), messages))
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

/// The bundle's `run.sh`. `source_snapshots` is the directory the capture-mock binary
/// has compiled in; `no_cuda_demo` says why the CUDA demo is skipped, if it is.
fn run_sh(source_snapshots: &Path, no_cuda_demo: Option<&str>) -> String {
    let cuda_demo = match no_cuda_demo {
        None => "step \"demo --backend cuda\" ./capture demo --backend cuda".to_string(),
        Some(why) => format!("skip \"demo --backend cuda\" {}", quote(why)),
    };
    RUN_SH
        .replace(
            "@SOURCE_SNAPSHOTS@",
            &quote(&source_snapshots.display().to_string()),
        )
        .replace("@SOURCE_TREE_TEST@", SOURCE_TREE_TEST)
        .replace("@CUDA_DEMO@", &cuda_demo)
}

const RUN_SH: &str = r#"#!/usr/bin/env bash
# capture's GPU bundle (made by `cargo xtask gpu-bundle`): runs the prebuilt tests and
# demos on this machine, CUDA required. Ends with `bundle: N passed, M failed`, and exits
# non-zero when anything failed. See README.txt.
cd "$(dirname "$0")" || exit 2
export CAPTURE_SNAPSHOTS="$PWD/snapshots" INSTA_WORKSPACE_ROOT="$PWD" INSTA_UPDATE=no \
    CI=true CAPTURE_REQUIRE_CUDA=1 LP_NUM_THREADS=0

passed=0
failed=0
failures=""

step() {
    local name=$1
    shift
    echo
    echo "== $name: $*"
    if "$@"; then
        passed=$((passed + 1))
        echo "== $name: ok"
    else
        failed=$((failed + 1))
        failures="$failures, $name"
        echo "== $name: FAILED"
    fi
}

skip() {
    echo
    echo "== $1: skipped: $2"
}

# Runs the CUDA suite ("$@"), which must have run: without a `cuda::` scenario that passed
# (an empty binary, say) it fails even though it exits 0.
cuda_tests() {
    local log rc
    log=$(mktemp) || return 1
    "$@" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    if [ "$rc" -eq 0 ] && ! grep -q '^test cuda::.* \.\.\. ok$' "$log"; then
        echo "no cuda:: scenario test ran"
        rc=1
    fi
    rm -f "$log"
    return "$rc"
}

has_lib() {
    if ldconfig -p 2>/dev/null | awk '{print $1}' | grep -qx "$1"; then
        return 0
    fi
    local dir
    for dir in ${LD_LIBRARY_PATH//:/ } /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /lib64 \
        /usr/local/nvidia/lib64 /usr/lib/wsl/lib; do
        [ -e "$dir/$1" ] && return 0
    done
    return 1
}

has_validation_layer() {
    local dir
    for dir in ${VK_LAYER_PATH//:/ } /usr/share/vulkan/explicit_layer.d \
        /etc/vulkan/explicit_layer.d /usr/local/share/vulkan/explicit_layer.d; do
        [ -e "$dir/VkLayer_khronos_validation.json" ] && return 0
    done
    return 1
}

echo "== machine: $(uname -srm)"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi || echo "nvidia-smi failed"
else
    echo "nvidia-smi: not found"
fi
if ! has_lib libcuda.so.1; then
    echo "no CUDA driver found: libcuda.so.1 is not installed (the CUDA tests will fail)"
fi

# The capture-mock binary's check of the snapshot set reads the directory compiled into
# it, on the machine that built the bundle; CI runs that check there.
if ls @SOURCE_SNAPSHOTS@/*.snap >/dev/null 2>&1; then
    step "capture-mock tests" ./capture-mock-it
else
    echo
    echo "note: skipping @SOURCE_TREE_TEST@: it reads" @SOURCE_SNAPSHOTS@ "(the build machine's tree)"
    step "capture-mock tests" ./capture-mock-it --skip @SOURCE_TREE_TEST@
fi

step "capture-cuda tests" cuda_tests ./capture-cuda-it --show-output

vulkan=0
if has_lib libvulkan.so.1; then
    vulkan=1
    if has_validation_layer; then
        step "capture-vulkan tests" env CAPTURE_REQUIRE_VULKAN=1 ./capture-vulkan-it
    else
        echo
        echo "note: the Khronos validation layer is not installed: the Vulkan tests run without it"
        step "capture-vulkan tests" ./capture-vulkan-it
    fi
else
    skip "capture-vulkan tests" "libvulkan.so.1 not found"
fi

@CUDA_DEMO@
if [ "$vulkan" = 1 ]; then
    step "demo --backend vulkan" ./capture demo --backend vulkan
else
    skip "demo --backend vulkan" "libvulkan.so.1 not found"
fi

echo
if [ "$failed" -gt 0 ]; then
    echo "failed: ${failures#, }"
fi
echo "bundle: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
"#;

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
  capture-mock-it                the scenario suite on the mock, against snapshots/ (an
                                 altered snapshot fails here, on any machine)
  capture-cuda-it --show-output  the same suite on CUDA (CAPTURE_REQUIRE_CUDA=1: no
                                 driver or no device is a failure), printing the device
  capture-vulkan-it              the suite on Vulkan in both memory modes, when
                                 libvulkan.so.1 is present (CAPTURE_REQUIRE_VULKAN=1
                                 when the Khronos validation layer is installed too)
  capture demo --backend cuda    eager vs replayed kernel chain, results checked equal
  capture demo --backend vulkan  the same, when libvulkan.so.1 is present
and ends with `bundle: N passed, M failed` (exit status non-zero on any failure).
{note}
Needs: x86-64 Linux with a glibc no older than the build machine's; the NVIDIA driver
(libcuda.so.1). NVRTC is not needed (the kernels ship as PTX; capture-cuda's NVRTC test
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

    fn message(crate_dir: &str, name: &str, kind: &str, test: bool) -> Value {
        json::parse(&format!(
            r#"{{"reason":"compiler-artifact","manifest_path":"/w/crates/{crate_dir}/Cargo.toml","target":{{"kind":["{kind}"],"name":"{name}"}},"profile":{{"test":{test}}},"executable":"/w/target/release/deps/{name}-1"}}"#
        ))
        .unwrap()
    }

    #[test]
    fn only_the_it_test_binaries_of_the_three_crates_are_taken() {
        assert_eq!(
            test_binary(&message("capture-cuda", "it", "test", true)),
            Some(("capture-cuda", PathBuf::from("/w/target/release/deps/it-1")))
        );
        assert_eq!(
            test_binary(&message("capture-core", "it", "test", true)),
            None
        );
        assert_eq!(
            test_binary(&message("capture-mock", "capture_mock", "lib", true)),
            None
        );
        assert_eq!(
            test_binary(&message("capture-mock", "it", "test", false)),
            None
        );
        let fresh = json::parse(r#"{"reason":"build-finished","success":true}"#).unwrap();
        assert_eq!(test_binary(&fresh), None);
        assert_eq!(
            artifact(
                &message("capture", "capture", "bin", false),
                "capture",
                "bin"
            ),
            Some(PathBuf::from("/w/target/release/deps/capture-1"))
        );
    }

    #[test]
    fn run_sh_runs_the_cuda_demo_unless_told_why_not() {
        let dir = Path::new("/w/crates/capture-mock/snapshots");
        let with = run_sh(dir, None);
        assert!(with.contains("step \"demo --backend cuda\" ./capture demo --backend cuda"));
        assert!(with.contains("if ls '/w/crates/capture-mock/snapshots'/*.snap >/dev/null"));
        let placeholder = with
            .split('@')
            .any(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_uppercase() || c == '_'));
        assert!(!placeholder, "a placeholder is left:\n{with}");
        let without = run_sh(dir, Some("it's not built"));
        assert!(without.contains(r#"skip "demo --backend cuda" 'it'\''s not built'"#));
        assert!(!without.contains("./capture demo --backend cuda"));
    }

    #[test]
    fn a_directory_that_is_not_a_bundle_is_not_replaced() {
        let dir = std::env::temp_dir().join(format!("xtask-bundle-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
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
