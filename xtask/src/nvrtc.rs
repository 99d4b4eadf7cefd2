//! Making NVRTC available without a GPU or a CUDA toolkit: NVIDIA's PyPI wheel, installed
//! with pip once into `target/nvrtc`, whose `libnvrtc.so.12` capture-cuda's NVRTC test
//! loads through `LD_LIBRARY_PATH`. Everything but the returned path is printed to
//! stderr, so `cargo xtask nvrtc` prints only the directory on stdout.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::cargo::workspace_root;
use crate::wheel::Wheel;

pub(crate) const HELP: &str = "usage: cargo xtask nvrtc

Makes NVRTC available without a GPU or a CUDA toolkit: when target/nvrtc holds no
libnvrtc.so.12 of the pinned release, installs the wheel nvidia-cuda-nvrtc-cu12==12.9.86
there with `python3 -m pip install --target`. Prints the directory holding
libnvrtc.so.12 (and nothing else on stdout), so that

  LD_LIBRARY_PATH=$(cargo xtask nvrtc) CAPTURE_REQUIRE_NVRTC=1 cargo test -p capture-cuda nvrtc

runs capture-cuda's NVRTC test. `cargo xtask test` does this itself.";

/// The wheel, pinned exactly: the shipped PTX is compared byte for byte with what this
/// NVRTC emits, so a different release would fail that test.
const WHEEL: Wheel = Wheel {
    package: "nvidia-cuda-nvrtc-cu12",
    version: VERSION,
    what: "NVRTC",
    size: "about 90 MB",
    keep: "nvidia/cuda_nvrtc/lib",
    marker: LIB,
    needed_by: "capture-cuda's NVRTC test",
};
/// See [`WHEEL`].
pub(crate) const VERSION: &str = "12.9.86";
/// The library capture-cuda loads (by the path in `CAPTURE_NVRTC`).
pub(crate) const LIB: &str = "libnvrtc.so.12";

/// nvJitLink, pinned as NVRTC is: capture-cuda's loop setter test links NVRTC's
/// relocatable cubins against libcudadevrt.a with it and compares the result with the
/// shipped cubins byte for byte.
const NVJITLINK: Wheel = Wheel {
    package: "nvidia-nvjitlink-cu12",
    version: VERSION,
    what: "nvJitLink",
    size: "about 40 MB",
    keep: "nvidia/nvjitlink/lib",
    marker: NVJITLINK_LIB,
    needed_by: "capture-cuda's loop setter test",
};
/// The library the loop setter test loads (by the path in `CAPTURE_NVJITLINK`).
pub(crate) const NVJITLINK_LIB: &str = "libnvJitLink.so.12";

/// The directory holding `libnvJitLink.so.12`, installing the wheel into
/// `target/nvjitlink` under the workspace root the first time.
pub(crate) fn ensure_nvjitlink() -> Result<PathBuf> {
    NVJITLINK.ensure_in(&workspace_root().join("target").join("nvjitlink"), |_| {
        Ok(0)
    })
}

/// `cargo xtask nvrtc`: prints the directory holding `libnvrtc.so.12`.
pub(crate) fn run(args: &[String]) -> Result<()> {
    if let Some(arg) = args.first() {
        bail!("unknown option {arg:?}\n\n{HELP}");
    }
    println!("{}", ensure()?.display());
    Ok(())
}

/// The directory holding `libnvrtc.so.12`, installing the wheel into
/// `target/nvrtc` under the workspace root the first time.
pub(crate) fn ensure() -> Result<PathBuf> {
    WHEEL.ensure_in(
        &workspace_root().join("target").join("nvrtc"),
        remove_alt_variants,
    )
}

/// Deletes the `*.alt.so*` variants (half the unpacked size; nothing loads them),
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

    #[test]
    fn the_library_directory_is_prepended() {
        let lib = Path::new("/t/nvrtc/lib");
        assert_eq!(prepend_path(lib, None), "/t/nvrtc/lib");
        assert_eq!(prepend_path(lib, Some("")), "/t/nvrtc/lib");
        assert_eq!(prepend_path(lib, Some("/a:/b")), "/t/nvrtc/lib:/a:/b");
    }

    #[test]
    fn alt_variants_are_deleted_and_the_rest_kept() {
        let dir = std::env::temp_dir().join(format!("xtask-nvrtc-alt-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        for name in [
            "libnvrtc.so.12",
            "libnvrtc.alt.so.12",
            "libnvrtc-builtins.so.12.9",
            "libnvrtc-builtins.alt.so.12.9",
        ] {
            fs::write(dir.join(name), "").unwrap();
        }
        assert_eq!(remove_alt_variants(&dir).unwrap(), 2);
        let mut left: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["libnvrtc-builtins.so.12.9", "libnvrtc.so.12"]);
        fs::remove_dir_all(&dir).unwrap();
    }
}
