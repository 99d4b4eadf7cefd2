//! `LaunchScratch`: every vector a launch or a replay fills and empties on each call, in
//! one place beside its pooled stream, so the hot paths allocate nothing once warm.
//!
//! A launch takes the whole scratch out of its pooled stream when it starts and puts it
//! back when it ends (`Inner::launch_on`): its halves borrow the scratch and the stream
//! apart, with no vector swapped in and out around each call.

use crate::driver::{LaunchBuffer, LaunchParam};
use crate::ids::StreamId;
use crate::memory::Access;
use crate::memory::ClaimKey;

/// One buffer argument of a launch, resolved once for both halves: the bytes it names,
/// what the launch does to them, and whose memory they are.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BoundArg {
    /// The argument's index among the launch's arguments (scalars included).
    pub(crate) arg: usize,
    /// The allocation and the bytes of it.
    pub(crate) key: ClaimKey,
    pub(crate) access: Access,
    /// The stream that owns the allocation.
    pub(crate) owner: StreamId,
    /// The pooled stream whose memory manager holds it.
    pub(crate) pooled: usize,
}

/// The launch path's scratch (see the module docs). `R` is the backend's resource type.
pub(crate) struct LaunchScratch<R> {
    /// Each buffer argument, in argument order.
    pub(crate) args: Vec<BoundArg>,
    /// The bytes the launch (or replay) reads.
    pub(crate) inputs: Vec<ClaimKey>,
    /// The bytes it writes.
    pub(crate) outputs: Vec<ClaimKey>,
    /// The parts of one recorded launch's input its window did not write first.
    pub(crate) unwritten: Vec<ClaimKey>,
    /// A kernel launch's parameters, resolved for the driver.
    pub(crate) params: Vec<LaunchParam<R>>,
    /// The user's work's buffers, resolved for the driver.
    pub(crate) buffers: Vec<LaunchBuffer<R>>,
}

impl<R> Default for LaunchScratch<R> {
    fn default() -> Self {
        Self {
            args: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            unwritten: Vec::new(),
            params: Vec::new(),
            buffers: Vec::new(),
        }
    }
}

impl<R> LaunchScratch<R> {
    /// Empties every vector, keeping what each has allocated.
    pub(crate) fn clear(&mut self) {
        self.args.clear();
        self.inputs.clear();
        self.outputs.clear();
        self.unwritten.clear();
        self.params.clear();
        self.buffers.clear();
    }
}
