//! The CUDA examples' shipped PTX is exactly what the pinned NVRTC makes of their CUDA C,
//! so a kernel edited without recompiling fails CI without a GPU. `SKIP:` where NVRTC is
//! missing or another release, unless `CAPTURE_REQUIRE_NVRTC=1` (set by the README's
//! test command). `CAPTURE_UPDATE_PTX=1` rewrites the shipped file instead.

use capture_cuda::{NVRTC_RELEASE, compile_ptx, nvrtc_version};

const SOURCE: &str = include_str!("../examples/square_plus.cu");
const SHIPPED: &str = include_str!("../examples/square_plus.compute_80.ptx");

#[test]
fn the_cuda_example_ships_the_ptx_nvrtc_makes_of_its_source() {
    let required = std::env::var("CAPTURE_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
    match nvrtc_version() {
        Ok((_, version)) if version == NVRTC_RELEASE => {}
        found => {
            assert!(!required, "CAPTURE_REQUIRE_NVRTC=1 but NVRTC: {found:?}");
            println!("SKIP: nvrtc: not the pinned NVRTC {NVRTC_RELEASE:?}: {found:?}");
            return;
        }
    }
    let ptx = compile_ptx(SOURCE, "square_plus.cu", "compute_80").unwrap();
    assert!(ptx.contains(".entry square_plus"), "{ptx}");
    if std::env::var("CAPTURE_UPDATE_PTX").is_ok_and(|v| v == "1") {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/square_plus.compute_80.ptx"
        );
        std::fs::write(path, &ptx).unwrap();
        return;
    }
    assert_eq!(
        ptx, SHIPPED,
        "examples/square_plus.compute_80.ptx is stale: rerun with CAPTURE_UPDATE_PTX=1"
    );
}

const ENGINE_SOURCE: &str = include_str!("../examples/engine_step.cu");
const ENGINE_SHIPPED: &str = include_str!("../examples/engine_step.compute_80.ptx");

#[test]
fn the_engine_example_ships_the_ptx_nvrtc_makes_of_its_source() {
    let required = std::env::var("CAPTURE_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
    match nvrtc_version() {
        Ok((_, version)) if version == NVRTC_RELEASE => {}
        found => {
            assert!(!required, "CAPTURE_REQUIRE_NVRTC=1 but NVRTC: {found:?}");
            println!("SKIP: nvrtc: not the pinned NVRTC {NVRTC_RELEASE:?}: {found:?}");
            return;
        }
    }
    let ptx = compile_ptx(ENGINE_SOURCE, "engine_step.cu", "compute_80").unwrap();
    for entry in ["engine_affine", "engine_gemv", "engine_temperature"] {
        assert!(
            ptx.contains(&format!(".entry {entry}(")),
            "{entry} in {ptx}"
        );
    }
    if std::env::var("CAPTURE_UPDATE_PTX").is_ok_and(|v| v == "1") {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/engine_step.compute_80.ptx"
        );
        std::fs::write(path, &ptx).unwrap();
        return;
    }
    assert_eq!(
        ptx, ENGINE_SHIPPED,
        "examples/engine_step.compute_80.ptx is stale: rerun with CAPTURE_UPDATE_PTX=1"
    );
}
