//! Making sure the Vulkan tests can run: Mesa's lavapipe, the loader, and the Khronos
//! validation layer, installed with apt when missing.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

const PACKAGES: [&str; 3] = [
    "mesa-vulkan-drivers",
    "libvulkan1",
    "vulkan-validationlayers",
];

fn has_lavapipe() -> bool {
    std::fs::read_dir("/usr/share/vulkan/icd.d")
        .map(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("lvp_icd"))
        })
        .unwrap_or(false)
}

fn has_validation_layer() -> bool {
    Path::new("/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json").exists()
}

fn has_loader() -> bool {
    Command::new("ldconfig")
        .arg("-p")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("libvulkan.so.1"))
        .unwrap_or(false)
}

/// Whether xtask runs as root (and so may install packages with apt).
pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Installs lavapipe, the loader and the validation layer when any is missing.
pub(crate) fn ensure() -> Result<()> {
    if has_lavapipe() && has_validation_layer() && has_loader() {
        println!("xtask: lavapipe, the Vulkan loader and the validation layer are installed");
        return Ok(());
    }
    if !is_root() {
        bail!(
            "the Vulkan tests need {} and this user cannot install them (run as root, or install them)",
            PACKAGES.join(", ")
        );
    }
    println!("xtask: installing {}", PACKAGES.join(" "));
    let update = Command::new("apt-get")
        .args(["update", "-qq"])
        .status()
        .context("running apt-get update")?;
    if !update.success() {
        bail!("apt-get update failed ({update})");
    }
    let install = Command::new("apt-get")
        .args(["install", "-y", "-qq"])
        .args(PACKAGES)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .context("running apt-get install")?;
    if !install.success() || !has_lavapipe() || !has_validation_layer() {
        bail!("installing {} failed ({install})", PACKAGES.join(", "));
    }
    Ok(())
}
