//! The benchmark's hand-written floor (`capture_vulkan::Floor`): eager and replay passes
//! add exactly K to every element, in mapped and in staged memory, with the validation
//! layer silent (objects left alive included: its log is read after the device is gone),
//! and each pass's times are non-zero with the enqueue inside the total.

use capture_vulkan::{Floor, FloorError, FloorPass, MemoryMode, VulkanOptions};

use crate::support;

/// The floor on the device the environment names, validation on; `None` after a
/// `SKIP:` line when Vulkan is missing and not required.
fn floor(test: &str, memory: MemoryMode, elements: u64, kernels: usize) -> Option<Floor> {
    let options = VulkanOptions {
        validation: true,
        memory,
        ..VulkanOptions::from_env()
    };
    match Floor::new(&options, elements, kernels) {
        Ok(f) => {
            println!(
                "floor device: {}, {}, validation {}",
                f.device_name(),
                f.memory_choice(),
                if f.validation_enabled() { "on" } else { "off" }
            );
            if support::required() {
                assert!(
                    f.validation_enabled(),
                    "CAPTURE_REQUIRE_VULKAN=1 but the Khronos validation layer is not enabled"
                );
            }
            Some(f)
        }
        Err(FloorError::Unavailable(e)) if !support::required() => {
            println!("SKIP: {test}: {e}");
            None
        }
        Err(e) => panic!("{test}: {e}"),
    }
}

/// Integers (exact in `f32` through any count of +1 here), different per element.
fn start(elements: u64) -> Vec<f32> {
    (0..elements).map(|i| (i % 1000) as f32 - 500.0).collect()
}

fn check_pass(what: &str, pass: FloorPass) {
    assert!(pass.enqueue > std::time::Duration::ZERO, "{what}: {pass:?}");
    assert!(pass.enqueue <= pass.total, "{what}: {pass:?}");
}

/// Eager, replay, eager again and replay again, each from a reset: A ends as start + K.
fn runs_exactly(test: &str, memory: MemoryMode, elements: u64, kernels: usize) {
    let Some(mut f) = floor(test, memory, elements, kernels) else {
        return;
    };
    assert_eq!(f.grid(), [elements.div_ceil(256) as u32, 1, 1]);
    let log = f.validation_log();
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
        if let Some(i) = (0..f.output().len()).find(|&i| f.output()[i] != expected[i]) {
            panic!(
                "{what}: element {i} is {}, expected {}",
                f.output()[i],
                expected[i]
            );
        }
        assert_eq!(f.output().len(), elements as usize);
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
        if let Some(i) = (0..f.output().len()).find(|&i| f.output()[i] != expected[i]) {
            panic!(
                "{what}: element {i} is {}, expected {}",
                f.output()[i],
                expected[i]
            );
        }
    }
    let messages = f.take_validation_messages();
    assert!(messages.is_empty(), "{test}:\n{}", messages.join("\n"));
    drop(f);
    let messages = log.take();
    assert!(
        messages.is_empty(),
        "{test}: after the device is gone:\n{}",
        messages.join("\n")
    );
}

#[test]
fn floor_passes_add_k_exactly_launch_bound() {
    runs_exactly("floor E=64 K=150", MemoryMode::Auto, 64, 150);
}

#[test]
fn floor_passes_add_k_exactly_over_many_workgroups() {
    runs_exactly("floor E=65536 K=4", MemoryMode::Auto, 65_536, 4);
}

#[test]
fn floor_passes_add_k_exactly_with_staging() {
    runs_exactly(
        "floor staged E=64 K=150",
        MemoryMode::ForcedStaging,
        64,
        150,
    );
    runs_exactly(
        "floor staged E=65536 K=4",
        MemoryMode::ForcedStaging,
        65_536,
        4,
    );
}

#[test]
fn floor_refuses_a_chain_that_does_not_end_in_a() {
    for kernels in [0, 3] {
        let err = Floor::new(&VulkanOptions::from_env(), 64, kernels).unwrap_err();
        assert!(
            matches!(err, FloorError::Failed { .. }),
            "{kernels}: {err:?}"
        );
        assert!(err.to_string().contains("kernel count"), "{err}");
    }
    let Some(mut f) = floor("floor reset length", MemoryMode::Auto, 64, 2) else {
        return;
    };
    let err = f.reset(&[0.0; 63]).unwrap_err();
    assert!(err.to_string().contains("63 floats"), "{err}");
    let err = f.set_submit_every(0).unwrap_err();
    assert!(
        err.to_string().contains("dispatches per submission"),
        "{err}"
    );
    assert_eq!(f.submit_every(), 2, "a refused cadence changes nothing");
}
