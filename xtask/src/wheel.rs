//! NVIDIA's PyPI wheels, installed with `pip install --target` once into a directory
//! under `target/`: NVRTC (`nvrtc.rs`) and the CUDA runtime's headers (`cuda.h`, which
//! the CUDA driver model is compiled against, `cuda_model.rs`). A wheel is pinned
//! exactly, and its `*.dist-info` directory says which version is there, so a changed
//! pin installs again. Progress goes to stderr.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// One pinned wheel, and what of it is used.
pub(crate) struct Wheel {
    /// The PyPI package.
    pub(crate) package: &'static str,
    /// Its exact version.
    pub(crate) version: &'static str,
    /// What it brings, for messages (`NVRTC`, `cuda.h`).
    pub(crate) what: &'static str,
    /// The download's size, for the message before it.
    pub(crate) size: &'static str,
    /// The directory inside the wheel that is used (`nvidia/cuda_nvrtc/lib`).
    pub(crate) keep: &'static str,
    /// The file in `keep` that must be there.
    pub(crate) marker: &'static str,
    /// Who needs it, for the message when pip is missing.
    pub(crate) needed_by: &'static str,
}

impl Wheel {
    /// Where `keep` lies once installed into `dir`.
    pub(crate) fn kept(&self, dir: &Path) -> PathBuf {
        dir.join(self.keep)
    }

    /// The metadata directory pip writes for the pinned version
    /// (`nvidia_cuda_nvrtc_cu12-12.9.86.dist-info`).
    fn dist_info(&self, dir: &Path) -> PathBuf {
        let name = self.package.replace('-', "_");
        dir.join(format!("{name}-{}.dist-info", self.version))
    }

    /// Whether `dir` already holds this wheel's pinned version.
    pub(crate) fn is_installed(&self, dir: &Path) -> bool {
        self.kept(dir).join(self.marker).is_file() && self.dist_info(dir).is_dir()
    }

    /// The directory `keep` names, installing the wheel into `dir` the first time;
    /// `prune` may delete what is not needed of `keep` and returns how many files it
    /// deleted.
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
                "{} needs {spec}, installed with pip, and `python3 -m pip` is not available \
                 (install python3-pip, or run `pip install --no-deps --target {} {spec}`)",
                self.needed_by,
                dir.display()
            );
        }
        // Installed beside the destination and moved into place only when complete, so
        // an interrupted run never leaves files that `is_installed` would accept.
        let staging = dir.with_extension("installing");
        for old in [&staging, dir] {
            if old.exists() {
                fs::remove_dir_all(old).with_context(|| format!("removing {}", old.display()))?;
            }
        }
        let status = Command::new("python3")
            .args("-m pip install --no-deps --only-binary=:all: --progress-bar off".split(' '))
            .arg("--target")
            .arg(&staging)
            .arg(&spec)
            .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
            .env("PIP_ROOT_USER_ACTION", "ignore")
            .stdout(std::io::stderr())
            .status()
            .context("running python3 -m pip install")?;
        if !status.success() {
            bail!("`pip install {spec}` failed ({status}); is PyPI reachable?");
        }
        let removed = prune(&self.kept(&staging))?;
        if !self.is_installed(&staging) {
            bail!(
                "pip installed {spec} without {} or its {}",
                self.dist_info(&staging).display(),
                self.kept(&staging).join(self.marker).display()
            );
        }
        fs::rename(&staging, dir).with_context(|| format!("moving into {}", dir.display()))?;
        eprintln!(
            "xtask: {} {} ready in {:.1} s ({removed} file(s) pruned): {}",
            self.what,
            self.version,
            started.elapsed().as_secs_f64(),
            kept.display()
        );
        Ok(kept)
    }
}

fn has_pip() -> bool {
    Command::new("python3")
        .args(["-m", "pip", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
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
        assert!(!TEST.is_installed(&dir), "no metadata yet");
        fs::create_dir(dir.join("nvidia_thing_cu12-1.0.0.dist-info")).unwrap();
        assert!(!TEST.is_installed(&dir), "another version");
        fs::create_dir(dir.join("nvidia_thing_cu12-1.2.3.dist-info")).unwrap();
        assert!(TEST.is_installed(&dir));
        // Nothing is fetched: no pip runs, the directory is returned.
        assert_eq!(TEST.ensure_in(&dir, |_| Ok(0)).unwrap(), kept);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_pinned_version_is_named_as_pip_names_it() {
        let dir = Path::new("/t/thing");
        assert_eq!(
            TEST.dist_info(dir),
            dir.join("nvidia_thing_cu12-1.2.3.dist-info")
        );
        assert_eq!(TEST.kept(dir), dir.join("nvidia/thing/lib"));
    }
}
