//! Making NVRTC available without a GPU or a CUDA toolkit: NVIDIA's PyPI wheel, fetched
//! with pip once into `target/nvrtc`, whose `libnvrtc.so.12` capture-cuda's NVRTC test
//! loads through `LD_LIBRARY_PATH`. Everything but the returned path is printed to
//! stderr, so `cargo xtask nvrtc` prints only the directory on stdout.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::cargo::workspace_root;

pub(crate) const HELP: &str = "usage: cargo xtask nvrtc

Makes NVRTC available without a GPU or a CUDA toolkit: when target/nvrtc holds no
libnvrtc.so.12 of the pinned release, downloads the wheel nvidia-cuda-nvrtc-cu12==12.9.86
with `python3 -m pip download` and unpacks it there. Prints the directory holding
libnvrtc.so.12 (and nothing else on stdout), so that

  LD_LIBRARY_PATH=$(cargo xtask nvrtc) CAPTURE_REQUIRE_NVRTC=1 cargo test -p capture-cuda nvrtc

runs capture-cuda's NVRTC test. `cargo xtask test` does this itself.";

/// The wheel, pinned exactly: the shipped PTX is compared byte for byte with what this
/// NVRTC emits, so a different release would fail that test.
const PACKAGE: &str = "nvidia-cuda-nvrtc-cu12";
/// See [`PACKAGE`].
pub(crate) const VERSION: &str = "12.9.86";
/// The library capture-cuda loads (by the path in `CAPTURE_NVRTC`).
pub(crate) const LIB: &str = "libnvrtc.so.12";
/// Records which [`VERSION`] the unpacked library is, so a changed pin fetches again.
const STAMP: &str = "VERSION";

/// The directory holding `libnvrtc.so.12`, downloading and unpacking the wheel into
/// `target/nvrtc` under the workspace root the first time.
pub(crate) fn ensure() -> Result<PathBuf> {
    ensure_in(&workspace_root().join("target").join("nvrtc"))
}

/// Where the wheel unpacks its libraries below `dir`.
fn lib_dir(dir: &Path) -> PathBuf {
    dir.join("nvidia").join("cuda_nvrtc").join("lib")
}

/// Whether `dir` already holds the pinned NVRTC.
fn is_installed(dir: &Path) -> bool {
    lib_dir(dir).join(LIB).is_file()
        && fs::read_to_string(dir.join(STAMP)).is_ok_and(|v| v.trim() == VERSION)
}

fn ensure_in(dir: &Path) -> Result<PathBuf> {
    let lib = lib_dir(dir);
    if is_installed(dir) {
        eprintln!("xtask: NVRTC {VERSION} is in {}", lib.display());
        return Ok(lib);
    }
    let started = Instant::now();
    let spec = format!("{PACKAGE}=={VERSION}");
    eprintln!(
        "xtask: fetching NVRTC ({spec}, about 90 MB) into {}",
        dir.display()
    );
    if !has_pip() && crate::libs::is_root() {
        // A fresh Debian machine: the README promises its commands install what they need.
        eprintln!("xtask: installing python3-pip");
        let _ = Command::new("apt-get")
            .args(["update", "-qq"])
            .stdout(std::io::stderr())
            .status();
        let _ = Command::new("apt-get")
            .args(["install", "-y", "-qq", "python3-pip"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(std::io::stderr())
            .status();
    }
    if !has_pip() {
        bail!(
            "capture-cuda's NVRTC test needs {spec}, fetched with pip, and `python3 -m pip` \
             is not available (install python3-pip; or unpack that wheel into target/nvrtc by \
             hand and write {VERSION} into target/nvrtc/{STAMP})"
        );
    }
    let wheels = dir.join("wheels");
    fs::create_dir_all(&wheels).with_context(|| format!("creating {}", wheels.display()))?;
    let status = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--progress-bar",
            "off",
            "-d",
        ])
        .arg(&wheels)
        .arg(&spec)
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .stdout(std::io::stderr())
        .status()
        .context("running python3 -m pip download")?;
    if !status.success() {
        bail!("`pip download {spec}` failed ({status}); is PyPI reachable?");
    }
    let wheel = find_wheel(&wheels)?;

    // Unpack beside the destination and move into place only when complete, so an
    // interrupted run never leaves a library that `is_installed` would accept.
    let staging = dir.join("unpacking");
    remove_dir_if_present(&staging)?;
    let status = Command::new("python3")
        .args(["-m", "zipfile", "-e"])
        .arg(&wheel)
        .arg(&staging)
        .stdout(std::io::stderr())
        .status()
        .context("running python3 -m zipfile")?;
    if !status.success() {
        bail!("unpacking {} failed ({status})", wheel.display());
    }
    let removed = remove_alt_variants(&lib_dir(&staging))?;
    if !lib_dir(&staging).join(LIB).is_file() {
        bail!(
            "{} holds no nvidia/cuda_nvrtc/lib/{LIB}; found: {}",
            wheel.display(),
            listing(&lib_dir(&staging))
        );
    }
    let dest = dir.join("nvidia");
    remove_dir_if_present(&dest)?;
    fs::rename(staging.join("nvidia"), &dest)
        .with_context(|| format!("moving the unpacked wheel into {}", dest.display()))?;
    remove_dir_if_present(&staging)?;
    fs::write(dir.join(STAMP), format!("{VERSION}\n"))?;
    // The libraries are what the tests need; the 90 MB wheel is not kept.
    fs::remove_file(&wheel).with_context(|| format!("removing {}", wheel.display()))?;
    eprintln!(
        "xtask: NVRTC {VERSION} ready in {:.1} s ({removed} .alt variant(s) deleted): {}",
        started.elapsed().as_secs_f64(),
        lib.display()
    );
    Ok(lib)
}

fn has_pip() -> bool {
    Command::new("python3")
        .args(["-m", "pip", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The pinned wheel pip saved into `wheels`.
fn find_wheel(wheels: &Path) -> Result<PathBuf> {
    let prefix = format!("{}-{VERSION}-", PACKAGE.replace('-', "_"));
    fs::read_dir(wheels)?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".whl"))
        })
        .with_context(|| {
            format!(
                "pip reported success but {} holds no {prefix}*.whl; found: {}",
                wheels.display(),
                listing(wheels)
            )
        })
}

/// Deletes the `*.alt.so*` variants (half the unpacked size; cudarc never loads them),
/// returning how many there were.
fn remove_alt_variants(lib: &Path) -> Result<usize> {
    let mut removed = 0;
    for entry in fs::read_dir(lib).with_context(|| format!("listing {}", lib.display()))? {
        let path = entry?.path();
        if path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().contains(".alt.so"))
        {
            fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
            removed += 1;
        }
    }
    Ok(removed)
}

fn remove_dir_if_present(dir: &Path) -> Result<()> {
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    Ok(())
}

/// The file names in `dir`, for an error message.
fn listing(dir: &Path) -> String {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    if names.is_empty() {
        "nothing".to_string()
    } else {
        names.join(", ")
    }
}

/// `lib` prepended to `existing` (an `LD_LIBRARY_PATH` value), colon-separated.
pub(crate) fn prepend_path(lib: &Path, existing: Option<&str>) -> String {
    match existing.filter(|e| !e.is_empty()) {
        Some(rest) => format!("{}:{rest}", lib.display()),
        None => lib.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-nvrtc-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_library_directory_is_prepended() {
        let lib = Path::new("/t/nvrtc/lib");
        assert_eq!(prepend_path(lib, None), "/t/nvrtc/lib");
        assert_eq!(prepend_path(lib, Some("")), "/t/nvrtc/lib");
        assert_eq!(prepend_path(lib, Some("/a:/b")), "/t/nvrtc/lib:/a:/b");
    }

    #[test]
    fn an_installed_nvrtc_is_used_as_it_is() {
        let dir = scratch("installed");
        let lib = lib_dir(&dir);
        fs::create_dir_all(&lib).unwrap();
        fs::write(lib.join(LIB), "").unwrap();
        assert!(!is_installed(&dir), "no stamp yet");
        fs::write(dir.join(STAMP), "12.0.0\n").unwrap();
        assert!(!is_installed(&dir), "another version");
        fs::write(dir.join(STAMP), format!("{VERSION}\n")).unwrap();
        assert!(is_installed(&dir));
        // Nothing is fetched: no pip runs, the directory is returned.
        assert_eq!(ensure_in(&dir).unwrap(), lib);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn alt_variants_are_deleted_and_the_rest_kept() {
        let dir = scratch("alt");
        for name in [
            "libnvrtc.so.12",
            "libnvrtc.alt.so.12",
            "libnvrtc-builtins.so.12.9",
            "libnvrtc-builtins.alt.so.12.9",
        ] {
            fs::write(dir.join(name), "").unwrap();
        }
        assert_eq!(remove_alt_variants(&dir).unwrap(), 2);
        assert_eq!(listing(&dir), "libnvrtc-builtins.so.12.9, libnvrtc.so.12");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_pinned_wheel_is_found() {
        let dir = scratch("wheel");
        fs::write(dir.join("other-1.0-py3-none-any.whl"), "").unwrap();
        assert!(find_wheel(&dir).is_err());
        let name = format!("nvidia_cuda_nvrtc_cu12-{VERSION}-py3-none-manylinux2010_x86_64.whl");
        fs::write(dir.join(&name), "").unwrap();
        assert_eq!(find_wheel(&dir).unwrap(), dir.join(name));
        fs::remove_dir_all(&dir).unwrap();
    }
}
