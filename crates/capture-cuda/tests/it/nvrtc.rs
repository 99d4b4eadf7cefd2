//! The builtins' CUDA C compiles with NVRTC for sm_80 and sm_90, and the PTX the crate
//! ships (and loads) is exactly what NVRTC produces: a broken kernel fails CI without a
//! GPU. `CAPTURE_UPDATE_PTX=1` rewrites the shipped PTX from the compile instead.

use capture_cuda::{SHIPPED, compile_builtins, nvrtc_present};

use crate::support::nvrtc_required;

#[test]
fn every_builtin_compiles_to_the_shipped_ptx() {
    if !nvrtc_present() {
        assert!(
            !nvrtc_required(),
            "CAPTURE_REQUIRE_NVRTC=1 but libnvrtc cannot be loaded"
        );
        println!("SKIP: nvrtc: libnvrtc is not installed (the README's test command installs it)");
        return;
    }
    let update = std::env::var("CAPTURE_UPDATE_PTX").is_ok_and(|v| v == "1");
    for (arch, shipped) in SHIPPED {
        let ptx = compile_builtins(arch).unwrap_or_else(|e| panic!("{arch}: {e}"));
        for kernel in [
            "fill",
            "add_scalar",
            "mul_scalar",
            "axpy",
            "copy",
            "row_bias",
        ] {
            assert!(
                ptx.contains(&format!(".visible .entry {kernel}(")),
                "{arch}: no entry {kernel}"
            );
        }
        assert!(
            !ptx.contains("fma.rn.f32"),
            "{arch}: FMA contraction must be off"
        );
        if update {
            let sm = arch.trim_start_matches("compute_");
            let path = format!(
                "{}/kernels/builtins.sm_{sm}.ptx",
                env!("CARGO_MANIFEST_DIR")
            );
            std::fs::write(&path, &ptx).unwrap();
            println!("wrote {path}");
        } else {
            assert!(
                ptx == shipped,
                "{arch}: the shipped PTX is not NVRTC's output for kernels/builtins.cu \
                 (rerun with CAPTURE_UPDATE_PTX=1 and commit the PTX)"
            );
        }
    }
    println!("nvrtc: every builtin compiled to PTX for sm_80 and sm_90");
}
