//! The benchmark's hand-written eager floor (`capture_cuda::Floor`): on a GPU, an eager
//! pass adds exactly K to every element of A, its times are non-zero with the enqueue
//! inside the total; without a driver it says `SKIP:` (unless `CAPTURE_REQUIRE_CUDA=1`).
//! The shape checks run everywhere: they come before the driver is touched.

use capture_cuda::{Floor, FloorError};

use crate::support;

/// The floor on device 0; `None` after a `SKIP:` line when CUDA is missing and not
/// required.
fn floor(
    test: &str,
    elements: u64,
    kernels: usize,
) -> Option<(std::sync::MutexGuard<'static, ()>, Floor)> {
    let (suite, floor) = support::floor(elements, kernels);
    match floor {
        Ok(f) => Some((suite, f)),
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
    let Some((_suite, mut f)) = floor(test, elements, kernels) else {
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
        let err = support::floor(64, kernels).1.unwrap_err();
        assert!(matches!(err, FloorError::Failed { .. }), "{kernels}: {err}");
        assert!(err.to_string().contains("kernel count"), "{err}");
    }
    let err = support::floor(0, 2).1.unwrap_err();
    assert!(err.to_string().contains("element count"), "{err}");
    let Some((_suite, mut f)) = floor("cuda floor reset length", 64, 2) else {
        return;
    };
    let err = f.reset(&[0.0; 63]).unwrap_err();
    assert!(err.to_string().contains("63 floats"), "{err}");
}

#[test]
fn cuda_floor_is_made_and_freed_only_while_no_window_of_the_context_records() {
    use capture_core::{Arg, Builtin, Builtins, Device, DeviceConfig, StreamId};
    use capture_cuda::CudaBackend;

    let Some(cuda) = support::open("cuda floor beside a capture") else {
        return;
    };
    let dev = Device::new(cuda.backend.clone(), DeviceConfig::new()).unwrap();
    let s = StreamId::new(0);
    let fill = dev.kernel(<CudaBackend as Builtins>::builtin(Builtin::Fill));
    let x = dev.alloc(s, 256).unwrap();
    let launch = || {
        dev.launch(
            s,
            &fill,
            [1, 1, 1],
            &[Arg::write(&x)],
            &Builtin::Fill.info(64, 2.0),
        )
        .unwrap()
    };
    let window = || {
        dev.prepare(s).unwrap();
        launch();
        dev.begin(s).unwrap();
        launch();
    };
    // Made while a window records: a module load would break it, so it is refused.
    window();
    let err = support::floor_beside(&cuda, 64, 2).unwrap_err();
    assert!(err.to_string().contains("records"), "{err}");
    let g = dev.end(s).unwrap();
    dev.drop_graph(g).unwrap();

    let floor = support::floor_beside(&cuda, 64, 2).unwrap();
    // Dropped while a window records: its frees wait for the window to close.
    window();
    let before = crate::driver_model::counts();
    drop(floor);
    let during = crate::driver_model::counts();
    let g = dev.end(s).unwrap();
    let after = crate::driver_model::counts();
    if let (Some(before), Some(during), Some(after)) = (before, during, after) {
        assert_eq!(during.device_allocations, before.device_allocations);
        assert_eq!(after.device_allocations, before.device_allocations - 3);
    }
    dev.replay(s, &g, 1).unwrap();
}
