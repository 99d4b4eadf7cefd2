//! `CudaStream`: the core's per-stream state beside a non-blocking CUDA stream (the
//! backend's own, or one a caller lent), and `CudaFence`, an event recorded on it.

use std::sync::{Arc, Mutex};

use capture_core::ServerError;
use capture_core::backend::{DeviceStream, Fence, Lane, StreamState};

use crate::gpu::Gpu;
use crate::loops::LoopPool;
use crate::raw;
use crate::read_staging::ReadStaging;
use crate::shape::GraphShape;
use crate::storage::CudaStorage;

/// A CUDA stream.
pub struct CudaStream {
    pub(crate) gpu: Arc<Gpu>,
    pub(crate) stream: usize,
    /// The stream is the caller's, lent by `from_raw_context`: finished, not destroyed,
    /// at drop, and handed back for the next pooled stream 0.
    pub(crate) lent: bool,
    /// The pinned page reads go through, kept from one read to the next (freed as the
    /// stream drops, after the stream finished).
    pub(crate) read_staging: ReadStaging,
    pub(crate) state: StreamState<CudaStorage, CudaStorage>,
    /// While a window records: the graph node each recorded launch made (`None` for
    /// work), handed to the executable for slot updates.
    pub(crate) nodes: Vec<Option<usize>>,
    /// The streams a forked window records its branches on (rule 28): `lanes[i]` runs
    /// lane `i + 1`, made at the first fork that needs it and kept for later windows
    /// (a stream outside a capture holds nothing of one).
    pub(crate) lanes: Vec<usize>,
    /// The events the window recording now ordered its lanes with, one per fork and
    /// join: handed to its executable, destroyed if the window ends without one; never
    /// shared with another capture.
    pub(crate) edges: Vec<usize>,
    /// Where the shape of the graph a window seals goes (the backend's
    /// `last_graph_shape`).
    pub(crate) shape: Arc<Mutex<Option<GraphShape>>>,
    /// The device's loop pool (rule 30: the setter and the words loops read), taken at
    /// the stream's first kernel load where loops run; let go as the stream drops.
    pub(crate) loops: Option<Arc<LoopPool>>,
}

impl CudaStream {
    /// The CUDA stream lane `lane` of the recording window records on.
    pub(crate) fn lane_stream(&self, lane: Lane) -> usize {
        match lane.index() {
            0 => self.stream,
            i => self.lanes[i - 1],
        }
    }

    /// Where the operation being enqueued now goes: the stream of `lane` (the core's
    /// argument) while a window records, the stream itself otherwise.
    pub(crate) fn target(&mut self, lane: Lane) -> usize {
        if self.capturing().is_recording() {
            self.lane_stream(lane)
        } else {
            self.stream
        }
    }

    /// Joins every lane stream the driver reports capturing back into the origin (an
    /// event recorded on it, waited on by the origin), so the origin's end leaves none of
    /// them in the capture: what a doomed window with an unjoined branch does before it
    /// ends. A failure is logged: the capture ends, and its graph is destroyed, anyway.
    pub(crate) fn join_back(&mut self) {
        for i in 0..self.lanes.len() {
            let lane = self.lanes[i];
            match raw::is_capturing(lane) {
                Ok(true) => match raw::capture_edge(lane, self.stream) {
                    Ok(event) => self.edges.push(event),
                    Err(error) => {
                        tracing::warn!(target: "capture", %error, "joining a branch back before a doomed window's end failed");
                    }
                },
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(target: "capture", %error, "a branch's capture state is unknown");
                }
            }
        }
    }

    /// Destroys the events of a window that ended without an executable to keep them.
    pub(crate) fn drop_edges(&mut self) {
        for event in self.edges.drain(..) {
            raw::event_destroy(event);
        }
    }
}

impl Drop for CudaStream {
    /// Ends a capture still open on the stream (its graph destroyed), waits for the
    /// stream, then destroys it (a lent stream: hands it back); a failure on the way is
    /// logged, as nobody can take it.
    fn drop(&mut self) {
        let _current = match raw::Current::enter(self.gpu.context) {
            Ok(current) => current,
            Err(error) => {
                tracing::warn!(target: "capture", %error, "a CUDA stream could not be torn down");
                return;
            }
        };
        match raw::is_capturing(self.stream) {
            Ok(false) => {}
            Ok(true) => match raw::end_capture(self.stream) {
                Ok(graph) => raw::graph_destroy(graph),
                Err(error) => {
                    tracing::warn!(target: "capture", %error, "ending a capture at teardown failed");
                }
            },
            Err(error) => {
                tracing::warn!(target: "capture", %error, "a stream's capture state is unknown at teardown");
            }
        }
        self.drop_edges();
        for lane in std::mem::take(&mut self.lanes) {
            // A branch a capture left behind (the driver leaves one the origin's end did
            // not join) ends its own capture first.
            if let Ok(true) = raw::is_capturing(lane) {
                match raw::end_capture(lane) {
                    Ok(graph) => raw::graph_destroy(graph),
                    Err(error) => {
                        tracing::warn!(target: "capture", %error, "ending a branch's capture at teardown failed");
                    }
                }
            }
            if let Err(error) = raw::stream_sync(lane) {
                tracing::warn!(target: "capture", %error, "a branch's CUDA stream failed to finish at teardown");
            }
            raw::stream_destroy(lane);
        }
        if let Err(error) = raw::stream_sync(self.stream) {
            tracing::warn!(target: "capture", %error, "a CUDA stream failed to finish at teardown");
        }
        if self.lent {
            *self.gpu.lent.lock().unwrap_or_else(|p| p.into_inner()) = Some(self.stream);
        } else {
            raw::stream_destroy(self.stream);
        }
    }
}

/// An event on a stream: signalled once everything enqueued before it has run.
#[derive(Debug)]
pub struct CudaFence {
    context: usize,
    event: Option<usize>,
    error: Option<ServerError>,
}

impl CudaFence {
    /// Makes `stream`'s later work wait for this event on the device.
    pub(crate) fn order(&self, stream: usize) -> Result<(), ServerError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        match self.event {
            Some(event) => {
                let _current = raw::Current::enter(self.context)?;
                raw::stream_wait_event(stream, event)
            }
            None => Ok(()),
        }
    }
}

impl Fence for CudaFence {
    fn wait(mut self) -> Result<(), ServerError> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        match self.event {
            Some(event) => {
                let _current = raw::Current::enter(self.context)?;
                raw::event_wait(event)
            }
            None => Ok(()),
        }
    }
}

impl Drop for CudaFence {
    fn drop(&mut self) {
        if let Some(event) = self.event.take() {
            match raw::Current::enter(self.context) {
                Ok(_current) => raw::event_destroy(event),
                Err(error) => {
                    tracing::warn!(target: "capture", %error, "a CUDA event could not be destroyed");
                }
            }
        }
    }
}

impl DeviceStream for CudaStream {
    type Fence = CudaFence;
    type DeviceStorage = CudaStorage;
    type HostStorage = CudaStorage;
    /// The stream handle and the context, as integers.
    type Signal = (usize, usize);

    fn state(&mut self) -> &mut StreamState<CudaStorage, CudaStorage> {
        &mut self.state
    }
    fn signal(&self) -> (usize, usize) {
        (self.stream, self.gpu.context)
    }
    fn read_staging_bytes(&self) -> u64 {
        self.read_staging.bytes()
    }
    fn fence((stream, context): (usize, usize)) -> CudaFence {
        let recorded = raw::Current::enter(context).and_then(|_current| raw::event_record(stream));
        match recorded {
            Ok(event) => CudaFence {
                context,
                event: Some(event),
                error: None,
            },
            Err(error) => CudaFence {
                context,
                event: None,
                error: Some(error),
            },
        }
    }
}
