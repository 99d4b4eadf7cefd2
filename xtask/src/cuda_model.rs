//! The CUDA driver model for the test command's `cuda-model` row: NVIDIA's `cuda.h` from
//! the pinned `nvidia-cuda-runtime-cu12` wheel (in `target/cuda-header`), the model
//! (`crates/capture-cuda-model/driver/model.c`) compiled against it by the C compiler
//! into `target/cuda-model/libcuda.so.1`, and its two kernel libraries built: the
//! library's (capture-cuda-model's `kernels` example) and the program's decoder kernels
//! (capture-decode's `cuda_model_kernels` example); and the environment a command needs to
//! run on it: the library's runs name the library's kernels alone, the program's both
//! (nothing of the library's tests depends on the program).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::cargo::{cargo, json_messages};
use crate::wheel::Wheel;

/// NVIDIA's headers, pinned: the model is compiled against this `cuda.h`, so the C
/// compiler checks every entry point it exports against NVIDIA's declaration.
const HEADER: Wheel = Wheel {
    package: "nvidia-cuda-runtime-cu12",
    version: "12.9.79",
    what: "cuda.h",
    size: "about 3 MB",
    keep: "nvidia/cuda_runtime/include",
    marker: "cuda.h",
    needed_by: "the CUDA driver model, compiled against NVIDIA's cuda.h,",
};

/// The device runtime (`libcudadevrt.a`, in the same wheel as the header) the loop
/// setter's cubins are linked against, fetching the wheel into `target/cuda-header` when
/// missing: capture-cuda's loop setter test links it again and compares.
pub(crate) fn devrt(root: &Path) -> Result<PathBuf> {
    let include = HEADER.ensure_in(&root.join("target").join("cuda-header"), |_| Ok(0))?;
    let devrt = include.with_file_name("lib").join("libcudadevrt.a");
    if !devrt.is_file() {
        bail!(
            "{} is missing from the unpacked {}",
            devrt.display(),
            HEADER.package
        );
    }
    Ok(devrt)
}

/// The model's source, relative to the workspace root.
const SOURCE: &str = "crates/capture-cuda-model/driver/model.c";

/// A built driver model.
pub(crate) struct Model {
    /// The directory holding `libcuda.so.1` (and `libcuda.so`, which cudarc asks for).
    pub(crate) dir: PathBuf,
    /// The library's kernel library (builtins, the examples' and tests' kernels).
    pub(crate) library: PathBuf,
    /// The program's kernel library (the decoder's kernels).
    pub(crate) program: PathBuf,
}

impl Model {
    /// Points a run at the model: first on `LD_LIBRARY_PATH` (before `ld_path`, the rest
    /// of it), expected by the tests (`CAPTURE_CUDA_MODEL=1`), CUDA required. A run of
    /// the library (capture-cuda's tests) names the library's kernel library alone; a run
    /// of the `program` (its tests, the bundle's decoder) the program's after it.
    pub(crate) fn apply(&self, command: &mut Command, ld_path: &str, program: bool) {
        let mut kernels = self.library.as_os_str().to_owned();
        if program {
            kernels.push(":");
            kernels.push(&self.program);
        }
        command
            .env(
                "LD_LIBRARY_PATH",
                crate::nvrtc::prepend_path(&self.dir, Some(ld_path)),
            )
            .env("CAPTURE_CUDA_MODEL", "1")
            .env("CAPTURE_REQUIRE_CUDA", "1")
            .env("CAPTURE_CUDA_MODEL_KERNELS", kernels);
    }
}

/// Fetches the header when missing, compiles the model and builds its kernel library.
pub(crate) fn build(root: &Path) -> Result<Model> {
    let include = HEADER.ensure_in(&root.join("target").join("cuda-header"), |_| Ok(0))?;
    let dir = root.join("target").join("cuda-model");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let library = dir.join("libcuda.so.1");
    let source = root.join(SOURCE);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    println!(
        "xtask: compiling the CUDA driver model against {}",
        include.join("cuda.h").display()
    );
    let status = Command::new(&cc)
        .args([
            "-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
        ])
        .arg("-I")
        .arg(&include)
        .arg("-o")
        .arg(&library)
        .arg(&source)
        .args(["-lpthread", "-ldl"])
        .status()
        .with_context(|| format!("starting the C compiler ({cc})"))?;
    if !status.success() {
        bail!("compiling {SOURCE} failed ({status})");
    }
    let link = dir.join("libcuda.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink("libcuda.so.1", &link)
        .with_context(|| format!("linking {}", link.display()))?;

    let library = cdylib("capture-cuda-model", "kernels")?;
    let program = cdylib("capture-decode", "cuda_model_kernels")?;
    Ok(Model {
        dir,
        library,
        program,
    })
}

/// Builds `package`'s cdylib example `example` (a kernel library) and returns its path.
fn cdylib(package: &str, example: &str) -> Result<PathBuf> {
    let what = format!("cargo build -p {package} --example {example}");
    let (ok, messages) = json_messages(
        &what,
        cargo(&format!("build -p {package} --example {example}")),
    )?;
    if !ok {
        bail!("building the driver model's kernel library failed ({what})");
    }
    messages
        .iter()
        .filter(|m| m["reason"] == "compiler-artifact")
        .filter(|m| m["target"]["name"] == example)
        .filter_map(|m| m["filenames"].as_array())
        .flatten()
        .filter_map(|f| f.as_str())
        .find(|f| f.ends_with(".so"))
        .map(PathBuf::from)
        .with_context(|| format!("cargo built no cdylib for {what}"))
}
