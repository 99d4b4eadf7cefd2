//! `Capturing`: what the closure of [`Device::capture`] is handed on each of its two
//! calls: the device, and which call this is ([`CapturePhase`]).

use std::ops::Deref;

use super::device::Device;
use crate::driver::Backend;

/// Which of its two calls a [`Device::capture`] closure is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CapturePhase {
    /// The first call: executed eagerly, with the pools armed so the recording finds
    /// every kernel loaded and every buffer warm. Its results are what the outputs hold
    /// after `capture` returns.
    Warmup,
    /// The second call: recorded into the graph, not executed.
    Record,
}

/// The device as a [`Device::capture`] closure sees it: every `Device` call (through
/// `Deref`), and the [`phase`](Self::phase) it runs in.
///
/// Both calls must issue the same work: a closure that records something other than
/// what it warmed up records cold kernels and pools, which the core refuses inside the
/// window. Use the phase for what is not device work: logging, counting, timing.
pub struct Capturing<'a, B: Backend> {
    device: &'a Device<B>,
    phase: CapturePhase,
}

impl<'a, B: Backend> Capturing<'a, B> {
    pub(crate) fn new(device: &'a Device<B>, phase: CapturePhase) -> Self {
        Self { device, phase }
    }

    /// Which call this is: warmup (executed) or record (recorded).
    pub fn phase(&self) -> CapturePhase {
        self.phase
    }

    /// The device itself, for code that takes a `&Device<B>`.
    pub fn device(&self) -> &'a Device<B> {
        self.device
    }
}

impl<B: Backend> Deref for Capturing<'_, B> {
    type Target = Device<B>;

    fn deref(&self) -> &Device<B> {
        self.device
    }
}
