//! The CUDA examples' shipped PTX is exactly what the pinned NVRTC makes of their CUDA C,
//! so a kernel edited without recompiling fails CI without a GPU. `SKIP:` where NVRTC is
//! missing or another release, unless `CAPTURE_REQUIRE_NVRTC=1` (set by the README's
//! test command). `CAPTURE_UPDATE_PTX=1` rewrites the shipped file instead.

use capture_cuda::{NVRTC_RELEASE, compile_ptx, nvrtc_version};

/// Compiles `examples/{name}.cu`, checks it has each of `entries`, and compares it with
/// the shipped `examples/{name}.compute_80.ptx` (or rewrites that file).
fn ships_what_nvrtc_makes(name: &str, source: &str, shipped: &str, entries: &[&str]) {
    let required = std::env::var("CAPTURE_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
    match nvrtc_version() {
        Ok((_, version)) if version == NVRTC_RELEASE => {}
        found => {
            assert!(!required, "CAPTURE_REQUIRE_NVRTC=1 but NVRTC: {found:?}");
            println!("SKIP: nvrtc: not the pinned NVRTC {NVRTC_RELEASE:?}: {found:?}");
            return;
        }
    }
    let ptx = compile_ptx(source, &format!("{name}.cu"), "compute_80").unwrap();
    for entry in entries {
        assert!(
            ptx.contains(&format!(".entry {entry}(")),
            "{entry} in {ptx}"
        );
    }
    let file = format!("examples/{name}.compute_80.ptx");
    if std::env::var("CAPTURE_UPDATE_PTX").is_ok_and(|v| v == "1") {
        std::fs::write(format!("{}/{file}", env!("CARGO_MANIFEST_DIR")), &ptx).unwrap();
        return;
    }
    assert_eq!(
        ptx, shipped,
        "{file} is stale: rerun with CAPTURE_UPDATE_PTX=1"
    );
}

#[test]
fn the_cuda_example_ships_the_ptx_nvrtc_makes_of_its_source() {
    ships_what_nvrtc_makes(
        "square_plus",
        include_str!("../examples/square_plus.cu"),
        include_str!("../examples/square_plus.compute_80.ptx"),
        &["square_plus"],
    );
}

#[test]
fn the_engine_example_ships_the_ptx_nvrtc_makes_of_its_source() {
    ships_what_nvrtc_makes(
        "engine_step",
        include_str!("../examples/engine_step.cu"),
        include_str!("../examples/engine_step.compute_80.ptx"),
        &["engine_affine", "engine_gemv", "engine_temperature"],
    );
}

#[test]
fn the_paged_example_ships_the_ptx_nvrtc_makes_of_its_source() {
    ships_what_nvrtc_makes(
        "paged_step",
        include_str!("../examples/paged_step.cu"),
        include_str!("../examples/paged_step.compute_80.ptx"),
        &["paged_append", "paged_attend"],
    );
}

#[test]
fn the_decode_until_example_ships_the_ptx_nvrtc_makes_of_its_source() {
    ships_what_nvrtc_makes(
        "decode_until",
        include_str!("../examples/decode_until.cu"),
        include_str!("../examples/decode_until.compute_80.ptx"),
        &["toy_logits", "toy_sample"],
    );
}
