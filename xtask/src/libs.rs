//! What this machine has, asked the way the dynamic loader would look: a shared library
//! (the CUDA driver, the Vulkan loader), a file in a search path; and whether xtask may
//! install packages.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Directories drivers install into on the distributions and containers we meet, beyond
/// what `ldconfig -p` lists (a container's NVIDIA runtime mounts, WSL).
const LIB_DIRS: [&str; 8] = [
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/lib64",
    "/usr/local/nvidia/lib64",
    "/usr/local/nvidia/lib",
    "/usr/lib/wsl/lib",
];

/// Whether `name` (such as `libcuda.so.1`) is in the loader cache, in a directory of
/// `LD_LIBRARY_PATH`, or in one of the usual library directories.
pub(crate) fn has_library(name: &str) -> bool {
    let cached = Command::new("ldconfig")
        .arg("-p")
        .output()
        .is_ok_and(|o| in_ldconfig_listing(&String::from_utf8_lossy(&o.stdout), name));
    cached
        || search_path(
            &std::env::var("LD_LIBRARY_PATH").unwrap_or_default(),
            &LIB_DIRS,
            name,
        )
}

/// Whether `file` is in a directory of `path` (colon-separated, as `LD_LIBRARY_PATH`) or
/// of `dirs`.
pub(crate) fn search_path(path: &str, dirs: &[&str], file: &str) -> bool {
    path.split(':')
        .filter(|d| !d.is_empty())
        .chain(dirs.iter().copied())
        .any(|dir| Path::new(dir).join(file).exists())
}

/// Whether an `ldconfig -p` listing names exactly `name` (not a longer name it prefixes).
fn in_ldconfig_listing(listing: &str, name: &str) -> bool {
    listing
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .any(|lib| lib == name)
}

/// Installs `packages` with apt-get, after an `apt-get update`; apt's output goes to
/// stderr (`cargo xtask nvrtc` prints only a path on stdout).
pub(crate) fn apt_install(packages: &[&str]) -> Result<()> {
    eprintln!("xtask: installing {}", packages.join(" "));
    let install = [&["install", "-y", "-qq"][..], packages].concat();
    for args in [&["update", "-qq"][..], &install] {
        let status = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(std::io::stderr())
            .status()
            .with_context(|| format!("running apt-get {}", args[0]))?;
        if !status.success() {
            bail!("apt-get {} failed ({status})", args[0]);
        }
    }
    Ok(())
}

/// Whether xtask runs as root (and so may install packages with apt).
pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn an_ldconfig_listing_is_matched_by_exact_name() {
        let listing = "1234 libs found in cache `/etc/ld.so.cache'
\tlibvulkan.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libvulkan.so.1
\tlibcuda.so.12 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcuda.so.12
";
        assert!(in_ldconfig_listing(listing, "libvulkan.so.1"));
        assert!(!in_ldconfig_listing(listing, "libcuda.so.1"));
        assert!(!in_ldconfig_listing(listing, "libvulkan.so"));
    }

    #[test]
    fn a_search_path_is_looked_through_before_the_usual_directories() {
        let dir = std::env::temp_dir().join(format!("xtask-libs-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("VkLayer_khronos_validation.json"), "{}").unwrap();
        let here = dir.to_str().unwrap();
        let file = "VkLayer_khronos_validation.json";
        assert!(search_path(&format!("/nonexistent::{here}"), &[], file));
        assert!(search_path("", &["/nonexistent", here], file));
        assert!(!search_path("/nonexistent", &["/nonexistent/too"], file));
        assert!(!search_path(here, &[], "libcuda.so.1"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
