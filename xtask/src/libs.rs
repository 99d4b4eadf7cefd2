//! Whether this machine has a shared library (the CUDA driver, the Vulkan loader) or the
//! Khronos validation layer, asked the way the dynamic loader would find them.

use std::path::Path;
use std::process::Command;

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

/// Where the Khronos validation layer's manifest may be installed.
const LAYER_DIRS: [&str; 3] = [
    "/usr/share/vulkan/explicit_layer.d",
    "/etc/vulkan/explicit_layer.d",
    "/usr/local/share/vulkan/explicit_layer.d",
];

/// Whether `name` (such as `libcuda.so.1`) is in the loader cache, in a directory of
/// `LD_LIBRARY_PATH`, or in one of the usual library directories.
pub(crate) fn has_library(name: &str) -> bool {
    let cached = Command::new("ldconfig")
        .arg("-p")
        .output()
        .is_ok_and(|o| in_ldconfig_listing(&String::from_utf8_lossy(&o.stdout), name));
    if cached {
        return true;
    }
    let ld_path = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    ld_path
        .split(':')
        .filter(|d| !d.is_empty())
        .chain(LIB_DIRS)
        .any(|dir| Path::new(dir).join(name).exists())
}

/// Whether an `ldconfig -p` listing names exactly `name` (not a longer name it prefixes).
fn in_ldconfig_listing(listing: &str, name: &str) -> bool {
    listing
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .any(|lib| lib == name)
}

/// Whether the Khronos validation layer's manifest is installed (or `VK_LAYER_PATH`
/// names a directory holding it).
pub(crate) fn has_validation_layer() -> bool {
    let layer_path = std::env::var("VK_LAYER_PATH").unwrap_or_default();
    layer_path
        .split(':')
        .filter(|d| !d.is_empty())
        .chain(LAYER_DIRS)
        .any(|dir| {
            Path::new(dir)
                .join("VkLayer_khronos_validation.json")
                .exists()
        })
}

#[cfg(test)]
mod tests {
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
}
