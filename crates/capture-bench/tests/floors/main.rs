//! The benchmark's hand-written floors (`capture_bench::floor`), each on its driver: on
//! Vulkan (lavapipe in CI) and on CUDA (a GPU, or the CUDA driver model), a pass adds
//! exactly K to every element of A and its times are non-zero with the enqueue inside
//! the total. A missing driver says `SKIP:` unless its backend is required
//! (`CAPTURE_REQUIRE_VULKAN=1`, `CAPTURE_REQUIRE_CUDA=1`), then it fails. Built with the
//! program's `vulkan` and `cuda` features (`cargo xtask test` runs it with both, and on
//! the driver model with `cuda`).

#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "vulkan")]
mod vulkan;

/// Integers (exact in `f32` through any count of +1 here), different per element.
#[cfg(any(feature = "vulkan", feature = "cuda"))]
fn start(elements: u64) -> Vec<f32> {
    (0..elements).map(|i| (i % 1000) as f32 - 500.0).collect()
}

/// A pass's times: non-zero, the enqueue inside the total.
#[cfg(any(feature = "vulkan", feature = "cuda"))]
fn check_pass(what: &str, pass: capture_bench::floor::FloorPass) {
    assert!(pass.enqueue > std::time::Duration::ZERO, "{what}: {pass:?}");
    assert!(pass.enqueue <= pass.total, "{what}: {pass:?}");
}

/// The first element of `got` that is not `want`'s, as a message.
#[cfg(any(feature = "vulkan", feature = "cuda"))]
fn check_output(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}");
    if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
        panic!("{what}: element {i} is {}, expected {}", got[i], want[i]);
    }
}
