//! The benchmark's hand-written eager floor (`capture_cuda::Floor`): on a GPU, an eager
//! pass adds exactly K to every element of A, its times are non-zero with the enqueue
//! inside the total; without a driver it says `SKIP:` (unless `CAPTURE_REQUIRE_CUDA=1`).
//! The shape checks run everywhere: they come before the driver is touched.

use capture_cuda::{Floor, FloorError};

use crate::support;

/// The floor on device 0; `None` after a `SKIP:` line when CUDA is missing and not
/// required.
fn floor(test: &str, elements: u64, kernels: usize) -> Option<Floor> {
    match Floor::new(0, elements, kernels) {
        Ok(f) => Some(f),
        Err(FloorError::Unavailable(e)) if !support::cuda_required() => {
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
    let values: Vec<f32> = (0..elements).map(|i| (i % 1000) as f32 - 500.0).collect();
    for round in 0..3 {
        f.reset(&values).expect("reset");
        let pass = f.eager_pass().expect("pass");
        assert!(pass.enqueue > std::time::Duration::ZERO, "{test}: {pass:?}");
        assert!(pass.enqueue <= pass.total, "{test}: {pass:?}");
        assert_eq!(f.output().len(), elements as usize);
        if let Some(i) = (0..values.len()).find(|&i| f.output()[i] != values[i] + kernels as f32) {
            panic!(
                "{test} round {round}: element {i} is {}, expected {}",
                f.output()[i],
                values[i] + kernels as f32
            );
        }
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
