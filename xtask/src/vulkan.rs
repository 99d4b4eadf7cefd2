//! The one Vulkan probe (is the loader, Mesa's lavapipe, the Khronos validation layer
//! installed?), used by `cargo xtask test` and `cargo xtask bench`; and, for
//! `cargo xtask test`, installing what is missing with apt.

use std::path::Path;

use anyhow::{Result, bail};

use crate::libs::{apt_install, has_library, is_root, search_path};

/// The Vulkan loader ash loads.
const LOADER: &str = "libvulkan.so.1";

/// The Khronos validation layer's manifest.
const LAYER_MANIFEST: &str = "VkLayer_khronos_validation.json";

/// Where the validation layer's manifest may be installed, after `VK_LAYER_PATH`.
const LAYER_DIRS: [&str; 3] = [
    "/usr/share/vulkan/explicit_layer.d",
    "/etc/vulkan/explicit_layer.d",
    "/usr/local/share/vulkan/explicit_layer.d",
];

/// Where ICD manifests (lavapipe's `lvp_icd.*.json`) may be installed.
const ICD_DIRS: [&str; 3] = [
    "/usr/share/vulkan/icd.d",
    "/etc/vulkan/icd.d",
    "/usr/local/share/vulkan/icd.d",
];

/// The apt packages that provide lavapipe, the loader and the validation layer.
const PACKAGES: [&str; 3] = [
    "mesa-vulkan-drivers",
    "libvulkan1",
    "vulkan-validationlayers",
];

/// What of Vulkan this machine has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Probe {
    /// The loader, [`LOADER`], as the dynamic loader would find it.
    pub(crate) loader: bool,
    /// Mesa's CPU driver, lavapipe (what `cargo xtask test` runs the Vulkan suite on).
    pub(crate) lavapipe: bool,
    /// The Khronos validation layer (in `VK_LAYER_PATH` or an installed layer directory).
    pub(crate) validation_layer: bool,
}

impl Probe {
    /// Looks at this machine.
    pub(crate) fn detect() -> Self {
        let layer_path = std::env::var("VK_LAYER_PATH").unwrap_or_default();
        Self {
            loader: has_library(LOADER),
            lavapipe: has_lavapipe(ICD_DIRS.iter().map(Path::new)),
            validation_layer: search_path(&layer_path, &LAYER_DIRS, LAYER_MANIFEST),
        }
    }

    /// Whether the Vulkan tests of `cargo xtask test` can run.
    fn complete(&self) -> bool {
        self.loader && self.lavapipe && self.validation_layer
    }
}

/// Whether one of `dirs` holds lavapipe's ICD manifest (`lvp_icd.x86_64.json`, …).
fn has_lavapipe<'d>(dirs: impl IntoIterator<Item = &'d Path>) -> bool {
    dirs.into_iter().any(|dir| {
        std::fs::read_dir(dir).is_ok_and(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("lvp_icd"))
        })
    })
}

/// Installs lavapipe, the loader and the validation layer when any is missing.
pub(crate) fn ensure() -> Result<()> {
    if Probe::detect().complete() {
        println!("xtask: lavapipe, the Vulkan loader and the validation layer are installed");
        return Ok(());
    }
    if !is_root() {
        bail!(
            "the Vulkan tests need {} and this user cannot install them (run as root, or install them)",
            PACKAGES.join(", ")
        );
    }
    apt_install(&PACKAGES)?;
    let after = Probe::detect();
    if !after.complete() {
        bail!(
            "installing {} left Vulkan incomplete: {after:?}",
            PACKAGES.join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn lavapipe_is_found_by_its_icd_manifest() {
        let dir = std::env::temp_dir().join(format!("xtask-icd-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("radeon_icd.x86_64.json"), "{}").unwrap();
        let missing = dir.join("missing");
        assert!(!has_lavapipe([dir.as_path(), missing.as_path()]));
        fs::write(dir.join("lvp_icd.x86_64.json"), "{}").unwrap();
        assert!(has_lavapipe([missing.as_path(), dir.as_path()]));
        fs::remove_dir_all(&dir).unwrap();
    }
}
