//! The decoder's shipped PTX (`src/decode/decode.compute_80.ptx`) is exactly what the
//! pinned NVRTC makes of its CUDA C (`src/decode/decode.cu`), so a kernel edited
//! without recompiling fails CI without a GPU. `SKIP:` where NVRTC is missing or
//! another release, unless `CAPTURE_REQUIRE_NVRTC=1`. Either way every entry point's
//! parameters are checked against the signature it is registered with. `CAPTURE_UPDATE_PTX=1` rewrites
//! the shipped file instead.

use capture_cuda::{NVRTC_RELEASE, compile_ptx, nvrtc_version};
use capture_decode::Kernel;
use capture_graphs::Param;

const SOURCE: &str = include_str!("../src/decode.cu");
const SHIPPED: &str = include_str!("../src/decode.compute_80.ptx");

#[test]
fn the_decoder_ships_the_ptx_nvrtc_makes_of_its_source() {
    let required = std::env::var("CAPTURE_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
    match nvrtc_version() {
        Ok((_, version)) if version == NVRTC_RELEASE => {}
        found => {
            assert!(!required, "CAPTURE_REQUIRE_NVRTC=1 but NVRTC: {found:?}");
            has_every_entry(SHIPPED);
            println!("SKIP: nvrtc: not the pinned NVRTC {NVRTC_RELEASE:?}: {found:?}");
            return;
        }
    }
    let ptx = compile_ptx(SOURCE, "decode.cu", "compute_80").unwrap();
    has_every_entry(&ptx);
    if std::env::var("CAPTURE_UPDATE_PTX").is_ok_and(|v| v == "1") {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src/decode/decode.compute_80.ptx"
        );
        std::fs::write(path, &ptx).unwrap();
        return;
    }
    assert_eq!(
        ptx, SHIPPED,
        "src/decode/decode.compute_80.ptx is stale: rerun with CAPTURE_UPDATE_PTX=1"
    );
}

fn has_every_entry(ptx: &str) {
    for kernel in Kernel::ALL {
        let entry = format!(".entry decode_{}(", kernel.name());
        let at = ptx
            .find(&entry)
            .unwrap_or_else(|| panic!("the PTX lacks {entry}"));
        let params = &ptx[at..at + ptx[at..].find(')').expect("a parameter list")];
        // One 8-byte pointer per buffer, then each scalar at its size, in order.
        let want: Vec<u32> = kernel
            .signature()
            .params()
            .iter()
            .map(|p| match p {
                Param::Scalar { bytes, .. } => u32::from(*bytes),
                _ => 8,
            })
            .collect();
        let got: Vec<u32> = params
            .split(".param ")
            .skip(1)
            .map(|p| match p.split_whitespace().next().unwrap_or("") {
                ".u64" | ".b64" | ".f64" | ".s64" => 8,
                ".u32" | ".b32" | ".f32" | ".s32" => 4,
                other => panic!("{entry}: a parameter of type {other}"),
            })
            .collect();
        assert_eq!(
            got, want,
            "{entry} takes other parameters than its signature declares"
        );
    }
}
