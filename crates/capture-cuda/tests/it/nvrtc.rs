//! The builtins' CUDA C compiles with NVRTC to PTX for compute_80 and compute_90 and to
//! cubins for sm_80 and sm_90, and the images the crate ships (and loads) are exactly
//! what the pinned NVRTC produces: a broken kernel fails CI without a GPU.
//! `CAPTURE_UPDATE_PTX=1` rewrites the shipped images from the compile instead.
//!
//! Only the pinned release's output is compared: another NVRTC (a system toolkit's, on a
//! GPU machine) emits other bytes, so the test says `SKIP:` there, unless NVRTC is
//! required (`CAPTURE_REQUIRE_NVRTC=1`, set by the README's test command after it
//! installed the pinned wheel and pointed `CAPTURE_NVRTC` at it).

use capture_cuda::{
    NVRTC_RELEASE, SHIPPED, SHIPPED_CUBINS, compile_builtins, compile_builtins_cubin, nvrtc_version,
};

use crate::support::nvrtc_required;

const KERNELS: [&str; 6] = [
    "fill",
    "add_scalar",
    "mul_scalar",
    "axpy",
    "copy",
    "row_bias",
];

#[test]
fn every_builtin_compiles_to_the_shipped_ptx_and_cubins() {
    let (library, version) = match nvrtc_version() {
        Ok(found) => found,
        Err(why) => {
            assert!(
                !nvrtc_required(),
                "CAPTURE_REQUIRE_NVRTC=1 but libnvrtc cannot be loaded: {why}"
            );
            println!(
                "SKIP: nvrtc: libnvrtc is not installed (the README's test command installs it)"
            );
            return;
        }
    };
    if version != NVRTC_RELEASE {
        assert!(
            !nvrtc_required(),
            "CAPTURE_REQUIRE_NVRTC=1 but {library} is NVRTC {}.{}, not the pinned {}.{}",
            version.0,
            version.1,
            NVRTC_RELEASE.0,
            NVRTC_RELEASE.1
        );
        println!(
            "SKIP: nvrtc: {library} is NVRTC {}.{}; the shipped images are the pinned {}.{}'s output",
            version.0, version.1, NVRTC_RELEASE.0, NVRTC_RELEASE.1
        );
        return;
    }
    let update = std::env::var("CAPTURE_UPDATE_PTX").is_ok_and(|v| v == "1");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/kernels");
    for (arch, shipped) in SHIPPED {
        let ptx = compile_builtins(arch).unwrap_or_else(|e| panic!("{arch}: {e}"));
        for kernel in KERNELS {
            assert!(
                ptx.contains(&format!(".visible .entry {kernel}(")),
                "{arch}: no entry {kernel}"
            );
        }
        assert!(
            !ptx.contains("fma.rn.f32"),
            "{arch}: FMA contraction must be off"
        );
        let sm = arch.trim_start_matches("compute_");
        if update {
            let path = format!("{dir}/builtins.sm_{sm}.ptx");
            std::fs::write(&path, &ptx).unwrap();
            println!("wrote {path}");
        } else {
            assert!(
                ptx == shipped,
                "{arch}: the shipped PTX is not NVRTC's output for kernels/builtins.cu \
                 (rerun with CAPTURE_UPDATE_PTX=1 and commit the images)"
            );
        }
    }
    for (arch, shipped) in SHIPPED_CUBINS {
        let cubin = compile_builtins_cubin(arch).unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert!(
            cubin.starts_with(b"\x7fELF"),
            "{arch}: a cubin is an ELF image"
        );
        for kernel in KERNELS {
            assert!(
                cubin.windows(kernel.len()).any(|w| w == kernel.as_bytes()),
                "{arch}: no symbol {kernel}"
            );
        }
        if update {
            let path = format!("{dir}/builtins.{arch}.cubin");
            std::fs::write(&path, &cubin).unwrap();
            println!("wrote {path}");
        } else {
            assert!(
                cubin == shipped,
                "{arch}: the shipped cubin is not NVRTC's output for kernels/builtins.cu \
                 (rerun with CAPTURE_UPDATE_PTX=1 and commit the images)"
            );
        }
    }
    println!(
        "nvrtc: every builtin compiled by {library} (NVRTC {}.{}) to the shipped PTX (compute_80, compute_90) and cubins (sm_80, sm_90)",
        version.0, version.1
    );
}

/// The name the probe's test runs under, for the child process's filter.
const PROBE: &str = "nvrtc::nvrtc_is_found_by_its_cuda_13_name";

#[test]
fn nvrtc_is_found_by_its_cuda_13_name() {
    if std::env::var_os("CAPTURE_NVRTC_PROBE").is_some() {
        // The child: only `libnvrtc.so.13` is where the loader looks.
        match nvrtc_version() {
            Ok((library, _)) => println!("nvrtc probe: found {library}"),
            Err(why) => panic!("NVRTC not found by its CUDA 13 name: {why}"),
        }
        return;
    }
    let Some(pinned) = std::env::var_os("CAPTURE_NVRTC").map(std::path::PathBuf::from) else {
        assert!(
            !nvrtc_required(),
            "CAPTURE_REQUIRE_NVRTC=1 but CAPTURE_NVRTC is not set"
        );
        println!("SKIP: nvrtc 13: CAPTURE_NVRTC names no NVRTC to offer under the CUDA 13 name");
        return;
    };
    // A machine with CUDA 13 alone: NVRTC answers to `libnvrtc.so.13` and nothing else.
    let dir = std::env::temp_dir().join(format!("capture-nvrtc13-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(&pinned, dir.join("libnvrtc.so.13")).unwrap();
    for entry in std::fs::read_dir(pinned.parent().unwrap())
        .unwrap()
        .flatten()
    {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with("libnvrtc-builtins") {
            std::os::unix::fs::symlink(entry.path(), dir.join(&name)).unwrap();
        }
    }
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([PROBE, "--exact", "--nocapture"])
        .env_remove("CAPTURE_NVRTC")
        .env("LD_LIBRARY_PATH", &dir)
        .env("CAPTURE_NVRTC_PROBE", "1")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("nvrtc probe: found libnvrtc.so.13"),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
