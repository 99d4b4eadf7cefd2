//! The benchmark's hand-written floors: the work of the library's chain benchmark done
//! straight on the driver, no runtime in between, for `capture bench` to measure the
//! library against. `vulkan::Floor` (feature `vulkan`) records the add-one chain by
//! hand with ash on a Vulkan backend's device (eager and replayed); `cuda::Floor`
//! (feature `cuda`) is a bare `cuLaunchKernel` loop over the driver API loaded at run
//! time (eager only). Each talks to its driver through its own FFI module
//! (`vulkan/raw.rs`, `cuda/raw.rs`), the only unsafe code here, and takes from the
//! backends only their public API: the builtins' shipped sources and, on Vulkan, what
//! the backend offers any caller for objects of its own.

use std::time::Duration;

#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "vulkan")]
pub mod vulkan;

/// One pass's host times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FloorPass {
    /// From the start of the pass through its last submission or launch (eager: the
    /// recording too).
    pub enqueue: Duration,
    /// From the start of the pass through the wait and the read-back of A.
    pub total: Duration,
}

/// What went wrong making or running a floor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FloorError {
    /// The driver (or the device asked for) cannot be used here: why.
    Unavailable(String),
    /// A step of the floor failed.
    Failed {
        /// What the floor was doing.
        step: &'static str,
        /// Why it failed.
        why: String,
    },
}

impl std::fmt::Display for FloorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FloorError::Unavailable(why) => f.write_str(why),
            FloorError::Failed { step, why } => write!(f, "the floor failed {step}: {why}"),
        }
    }
}

impl std::error::Error for FloorError {}
