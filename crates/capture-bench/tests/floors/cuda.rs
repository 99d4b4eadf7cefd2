//! The CUDA floor on device 0 (a GPU, or the CUDA driver model): an eager pass adds
//! exactly K to every element of A. The shape checks run everywhere: they come before
//! the driver is touched.

use capture_bench::floor::FloorError;
use capture_bench::floor::cuda::Floor;

use super::{check_output, check_pass, start};

fn required() -> bool {
    std::env::var("CAPTURE_REQUIRE_CUDA").is_ok_and(|v| v == "1")
}

/// The floor on device 0; `None` after a `SKIP:` line when CUDA is missing and not
/// required.
fn floor(test: &str, elements: u64, kernels: usize) -> Option<Floor> {
    match Floor::new(0, elements, kernels) {
        Ok(f) => Some(f),
        Err(FloorError::Unavailable(e)) if !required() => {
            println!("SKIP: {test}: {e}");
            None
        }
        Err(e) => panic!("{test}: {e}"),
    }
}

/// Eager passes, each from a reset, then one more without: A ends as start + K, then
/// start + 2K.
fn runs_exactly(test: &str, elements: u64, kernels: usize) {
    let Some(mut f) = floor(test, elements, kernels) else {
        return;
    };
    assert_eq!(f.grid(), [elements.div_ceil(256) as u32, 1, 1]);
    let values = start(elements);
    let expected: Vec<f32> = values.iter().map(|v| v + kernels as f32).collect();
    for round in 0..3 {
        f.reset(&values).expect("reset");
        let what = format!("{test} round {round}");
        check_pass(&what, f.eager_pass().expect("pass"));
        check_output(&what, f.output(), &expected);
    }
    f.eager_pass().expect("pass");
    assert_eq!(f.output()[0], values[0] + 2.0 * kernels as f32, "{test}");
}

#[test]
fn cuda_floor_adds_k_exactly_launch_bound() {
    runs_exactly("cuda floor E=64 K=150", 64, 150);
}

#[test]
fn cuda_floor_adds_k_exactly_over_many_blocks() {
    runs_exactly("cuda floor E=65536 K=4", 65_536, 4);
}

#[test]
fn cuda_floor_refuses_a_chain_that_does_not_end_in_a() {
    for kernels in [0, 3] {
        let err = Floor::new(0, 64, kernels).unwrap_err();
        assert!(matches!(err, FloorError::Failed { .. }), "{kernels}: {err}");
        assert!(err.to_string().contains("kernel count"), "{err}");
    }
    let err = Floor::new(0, 0, 2).unwrap_err();
    assert!(err.to_string().contains("element count"), "{err}");
    let Some(mut f) = floor("cuda floor reset length", 64, 2) else {
        return;
    };
    let err = f.reset(&[0.0; 63]).unwrap_err();
    assert!(err.to_string().contains("63 floats"), "{err}");
}
