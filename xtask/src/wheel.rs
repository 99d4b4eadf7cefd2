//! NVIDIA's PyPI wheels, fetched with pip once into a directory under `target/` and
//! unpacked there: NVRTC (`nvrtc.rs`) and the CUDA runtime's headers (`cuda.h`, which the
//! CUDA driver model is compiled against, `cuda_model.rs`). A wheel is pinned exactly;
//! a stamp file says which version is unpacked, so a changed pin fetches again. Progress
//! goes to stderr.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// Records which version the unpacked files are.
const STAMP: &str = "VERSION";

/// One pinned wheel, and what of it is kept.
pub(crate) struct Wheel {
    /// The PyPI package.
    pub(crate) package: &'static str,
    /// Its exact version.
    pub(crate) version: &'static str,
    /// What it brings, for messages (`NVRTC`, `cuda.h`).
    pub(crate) what: &'static str,
    /// The download's size, for the message before it.
    pub(crate) size: &'static str,
    /// The directory inside the wheel that is used (`nvidia/cuda_nvrtc/lib`); its first
    /// component is what is kept.
    pub(crate) keep: &'static str,
    /// The file in `keep` that must be there.
    pub(crate) marker: &'static str,
    /// Who needs it, for the message when pip is missing.
    pub(crate) needed_by: &'static str,
}

impl Wheel {
    /// Where `keep` lies once unpacked into `dir`.
    pub(crate) fn kept(&self, dir: &Path) -> PathBuf {
        dir.join(self.keep)
    }

    /// Whether `dir` already holds this wheel's pinned version.
    pub(crate) fn is_installed(&self, dir: &Path) -> bool {
        self.kept(dir).join(self.marker).is_file()
            && fs::read_to_string(dir.join(STAMP)).is_ok_and(|v| v.trim() == self.version)
    }

    /// The directory `keep` names, downloading and unpacking the wheel into `dir` the
    /// first time; `prune` may delete what is not needed of `keep` before it is moved
    /// into place and returns how many files it deleted.
    pub(crate) fn ensure_in(
        &self,
        dir: &Path,
        prune: impl Fn(&Path) -> Result<usize>,
    ) -> Result<PathBuf> {
        let kept = self.kept(dir);
        if self.is_installed(dir) {
            eprintln!(
                "xtask: {} {} is in {}",
                self.what,
                self.version,
                kept.display()
            );
            return Ok(kept);
        }
        let started = Instant::now();
        let spec = format!("{}=={}", self.package, self.version);
        eprintln!(
            "xtask: fetching {} ({spec}, {}) into {}",
            self.what,
            self.size,
            dir.display()
        );
        if !has_pip() && crate::libs::is_root() {
            // A fresh Debian machine: the README promises its commands install what they
            // need. A failure shows in the check below.
            let _ = crate::libs::apt_install(&["python3-pip"]);
        }
        if !has_pip() {
            bail!(
                "{} needs {spec}, fetched with pip, and `python3 -m pip` is not available \
                 (install python3-pip; or unpack that wheel into {} by hand and write {} \
                 into {}/{STAMP})",
                self.needed_by,
                dir.display(),
                self.version,
                dir.display()
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
        let wheel = self.find(&wheels)?;

        // Unpack beside the destination and move into place only when complete, so an
        // interrupted run never leaves files that `is_installed` would accept.
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
        let removed = prune(&self.kept(&staging))?;
        if !self.kept(&staging).join(self.marker).is_file() {
            bail!(
                "{} holds no {}/{}; found: {}",
                wheel.display(),
                self.keep,
                self.marker,
                listing(&self.kept(&staging))
            );
        }
        let top = self.keep.split('/').next().unwrap_or(self.keep);
        let dest = dir.join(top);
        remove_dir_if_present(&dest)?;
        fs::rename(staging.join(top), &dest)
            .with_context(|| format!("moving the unpacked wheel into {}", dest.display()))?;
        remove_dir_if_present(&staging)?;
        fs::write(dir.join(STAMP), format!("{}\n", self.version))?;
        // What is kept is what the tests need; the wheel is not.
        fs::remove_file(&wheel).with_context(|| format!("removing {}", wheel.display()))?;
        eprintln!(
            "xtask: {} {} ready in {:.1} s ({removed} file(s) pruned): {}",
            self.what,
            self.version,
            started.elapsed().as_secs_f64(),
            kept.display()
        );
        Ok(kept)
    }

    /// The pinned wheel pip saved into `wheels`.
    fn find(&self, wheels: &Path) -> Result<PathBuf> {
        let prefix = format!("{}-{}-", self.package.replace('-', "_"), self.version);
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
}

fn has_pip() -> bool {
    Command::new("python3")
        .args(["-m", "pip", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn remove_dir_if_present(dir: &Path) -> Result<()> {
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    Ok(())
}

/// The file names in `dir`, for an error message.
pub(crate) fn listing(dir: &Path) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    const TEST: Wheel = Wheel {
        package: "nvidia-thing-cu12",
        version: "1.2.3",
        what: "thing",
        size: "tiny",
        keep: "nvidia/thing/lib",
        marker: "libthing.so",
        needed_by: "a test",
    };

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-wheel-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn an_installed_wheel_is_used_as_it_is() {
        let dir = scratch("installed");
        let kept = TEST.kept(&dir);
        fs::create_dir_all(&kept).unwrap();
        fs::write(kept.join(TEST.marker), "").unwrap();
        assert!(!TEST.is_installed(&dir), "no stamp yet");
        fs::write(dir.join(STAMP), "1.0.0\n").unwrap();
        assert!(!TEST.is_installed(&dir), "another version");
        fs::write(dir.join(STAMP), "1.2.3\n").unwrap();
        assert!(TEST.is_installed(&dir));
        // Nothing is fetched: no pip runs, the directory is returned.
        assert_eq!(TEST.ensure_in(&dir, |_| Ok(0)).unwrap(), kept);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_pinned_wheel_is_found() {
        let dir = scratch("wheel");
        fs::write(dir.join("other-1.0-py3-none-any.whl"), "").unwrap();
        assert!(TEST.find(&dir).is_err());
        let name = "nvidia_thing_cu12-1.2.3-py3-none-manylinux2010_x86_64.whl";
        fs::write(dir.join(name), "").unwrap();
        assert_eq!(TEST.find(&dir).unwrap(), dir.join(name));
        fs::remove_dir_all(&dir).unwrap();
    }
}
