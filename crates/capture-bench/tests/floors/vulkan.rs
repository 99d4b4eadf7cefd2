//! The Vulkan floor on a backend's device (the one `CAPTURE_VULKAN_DEVICE` names, else
//! the best-ranked): eager and replay passes add exactly K to every element, in mapped
//! and in staged memory, at every submission cadence, with the validation layer silent.

use capture_bench::floor::FloorError;
use capture_bench::floor::vulkan::Floor;
use capture_graphs::vulkan::{MemoryMode, VulkanBackend, VulkanOptions};

use super::{check_output, check_pass, start};

fn required() -> bool {
    std::env::var("CAPTURE_REQUIRE_VULKAN").is_ok_and(|v| v == "1")
}

/// The backend the environment names in `memory`, validation on; `None` after a
/// `SKIP:` line when Vulkan is missing and not required.
fn backend(test: &str, memory: MemoryMode) -> Option<VulkanBackend> {
    let options = VulkanOptions {
        validation: true,
        memory,
        ..VulkanOptions::from_env()
    };
    match VulkanBackend::new(options) {
        Ok(b) => {
            println!(
                "floor device: {}, {}, validation {}",
                b.device_name(),
                b.memory_choice(),
                if b.validation_enabled() { "on" } else { "off" }
            );
            if required() {
                assert!(
                    b.validation_enabled(),
                    "CAPTURE_REQUIRE_VULKAN=1 but the Khronos validation layer is not enabled"
                );
            }
            Some(b)
        }
        Err(e) if !required() => {
            println!("SKIP: {test}: {e}");
            None
        }
        Err(e) => panic!("{test}: {e}"),
    }
}

/// Eager, replay, eager again and replay again, each from a reset: A ends as start + K;
/// then every cadence; the validation layer says nothing, the floor's teardown included.
fn runs_exactly(test: &str, memory: MemoryMode, elements: u64, kernels: usize) {
    let Some(backend) = backend(test, memory) else {
        return;
    };
    let mut f = Floor::new(&backend, elements, kernels).unwrap_or_else(|e| panic!("{test}: {e}"));
    assert_eq!(f.placement(), backend.memory_choice().placement());
    assert_eq!(f.grid(), [elements.div_ceil(256) as u32, 1, 1]);
    let values = start(elements);
    let expected: Vec<f32> = values.iter().map(|v| v + kernels as f32).collect();
    for (round, replay) in [false, true, false, true].into_iter().enumerate() {
        f.reset(&values).expect("reset");
        let pass = if replay {
            f.replay_pass()
        } else {
            f.eager_pass()
        }
        .expect("pass");
        let what = format!(
            "{test} round {round} ({})",
            if replay { "replay" } else { "eager" }
        );
        check_pass(&what, pass);
        check_output(&what, f.output(), &expected);
    }
    // A pass with no reset between continues from what the last one left.
    f.eager_pass().expect("pass");
    assert_eq!(f.output()[0], values[0] + 2.0 * kernels as f32);
    // An eager pass split into submissions at any cadence, even one that leaves a short
    // last submission, adds exactly K too: the barriers order work across submissions.
    let mut cadences = f.cadences();
    assert_eq!(cadences[0], kernels, "the whole pass comes first");
    cadences.extend([1, 7, kernels + 5]);
    for every in cadences {
        f.set_submit_every(every).expect("cadence");
        assert_eq!(f.submit_every(), every.min(kernels));
        f.reset(&values).expect("reset");
        let what = format!("{test}, eager submitting every {every}");
        check_pass(&what, f.eager_pass().expect("pass"));
        check_output(&what, f.output(), &expected);
    }
    let messages = backend.take_validation_messages();
    assert!(messages.is_empty(), "{test}:\n{}", messages.join("\n"));
    drop(f);
    let messages = backend.take_validation_messages();
    assert!(
        messages.is_empty(),
        "{test}: tearing the floor down:\n{}",
        messages.join("\n")
    );
}

#[test]
fn vulkan_floor_passes_add_k_exactly_launch_bound() {
    runs_exactly("vulkan floor E=64 K=150", MemoryMode::Auto, 64, 150);
}

#[test]
fn vulkan_floor_passes_add_k_exactly_over_many_workgroups() {
    runs_exactly("vulkan floor E=65536 K=4", MemoryMode::Auto, 65_536, 4);
}

#[test]
fn vulkan_floor_passes_add_k_exactly_with_staging() {
    let mode = MemoryMode::ForcedStaging;
    runs_exactly("vulkan floor staged E=64 K=150", mode, 64, 150);
    runs_exactly("vulkan floor staged E=65536 K=4", mode, 65_536, 4);
}

#[test]
fn vulkan_floor_refuses_a_chain_that_does_not_end_in_a() {
    let Some(backend) = backend("vulkan floor shapes", MemoryMode::Auto) else {
        return;
    };
    for kernels in [0, 3] {
        let err = Floor::new(&backend, 64, kernels).unwrap_err();
        assert!(
            matches!(err, FloorError::Failed { .. }),
            "{kernels}: {err:?}"
        );
        assert!(err.to_string().contains("kernel count"), "{err}");
    }
    for elements in [0, 1 << 26] {
        let err = Floor::new(&backend, elements, 2).unwrap_err();
        assert!(err.to_string().contains("element count"), "{err}");
    }
    let mut f = Floor::new(&backend, 64, 2).expect("floor");
    let err = f.reset(&[0.0; 63]).unwrap_err();
    assert!(err.to_string().contains("63 floats"), "{err}");
    let err = f.set_submit_every(0).unwrap_err();
    assert!(
        err.to_string().contains("dispatches per submission"),
        "{err}"
    );
    assert_eq!(f.submit_every(), 2, "a refused cadence changes nothing");
}
