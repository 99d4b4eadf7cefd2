//! Missing CUDA is a typed error saying why, never a panic.

use capture_cuda::CudaBackend;

use crate::support::try_new;

#[test]
fn without_a_driver_opening_is_a_typed_error_not_a_panic() {
    match try_new(0).1 {
        Ok(b) => println!("cuda device present: {}", b.device_name()),
        Err(e) => {
            assert!(e.to_string().starts_with("CUDA unavailable: "), "{e}");
            println!("SKIP: cuda: {e}");
        }
    }
}

#[test]
fn a_device_that_does_not_exist_is_a_typed_error() {
    match try_new(1_000).1 {
        Ok(_) => panic!("device 1000 exists?"),
        Err(e) => assert!(e.to_string().starts_with("CUDA unavailable: "), "{e}"),
    }
}

#[test]
fn a_null_context_handed_over_is_a_typed_error() {
    let (_suite, opened) = try_new(0);
    let usable = opened.is_ok();
    // SAFETY: a null context is refused before the driver sees it (and without a driver,
    // before any call at all).
    match unsafe { CudaBackend::from_raw_context(std::ptr::null_mut(), None) } {
        Ok(_) => panic!("a null context was taken"),
        Err(e) => {
            assert!(e.to_string().starts_with("CUDA unavailable: "), "{e}");
            if usable {
                assert_eq!(e.why(), "the context handed over is null");
            } else {
                // The driver's own absence comes first, as for `CudaBackend::new`.
                assert_eq!(e.why(), opened.unwrap_err().why(), "{e}");
            }
        }
    }
}
