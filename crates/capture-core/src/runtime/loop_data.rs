//! Data only: what rule 30 keeps of an open window (its stop flag, the first operation
//! a loop body cannot hold) and of a sealed graph (its flag and iteration counter); the
//! runtime's half is `loops.rs`.

use super::buffer::Buffer;
use crate::driver::{Backend, DeviceResource};
use crate::memory::ClaimKey;
use crate::op::Op;

/// A graph's stop flag: its bytes, and the resource the backend reads them through
/// (pinned by the graph as any recorded binding is).
pub(crate) struct StopFlag<B: Backend> {
    pub(crate) key: ClaimKey,
    pub(crate) resource: DeviceResource<B::Stream>,
}

/// What an open window recorded that rule 30 looks at.
pub(crate) struct WindowLoop<B: Backend> {
    /// The stop flag it named, once a launch naming it was recorded.
    pub(crate) flag: Option<StopFlag<B>>,
    /// The first operation it recorded that the device cannot put in a loop body, and
    /// why.
    pub(crate) blocker: Option<(Op, &'static str)>,
}

impl<B: Backend> Default for WindowLoop<B> {
    fn default() -> Self {
        Self {
            flag: None,
            blocker: None,
        }
    }
}

/// A sealed graph's loop: its stop flag, and the iteration counter, made at its first
/// loop replay.
pub(crate) struct GraphLoop<B: Backend> {
    pub(crate) flag: StopFlag<B>,
    pub(crate) counter: Option<Buffer>,
}

/// What a loop body may hold: a recorded copy, or the user's own work.
#[derive(Clone, Copy, Debug)]
pub(crate) enum BodyItem {
    Copy,
    Work,
}
