//! Missing CUDA is a typed error saying why, never a panic.

use capture_cuda::CudaBackend;

#[test]
fn without_a_driver_opening_is_a_typed_error_not_a_panic() {
    match CudaBackend::new(0) {
        Ok(b) => println!("cuda device present: {}", b.device_name()),
        Err(e) => {
            assert!(e.to_string().starts_with("CUDA unavailable: "), "{e}");
            println!("SKIP: cuda: {e}");
        }
    }
}

#[test]
fn a_device_that_does_not_exist_is_a_typed_error() {
    match CudaBackend::new(1_000) {
        Ok(_) => panic!("device 1000 exists?"),
        Err(e) => assert!(e.to_string().starts_with("CUDA unavailable: "), "{e}"),
    }
}
