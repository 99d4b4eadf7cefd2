//! `CudaStream`: the core's per-stream state beside a non-blocking CUDA stream (the
//! backend's own, or one a caller lent), and `CudaFence`, an event recorded on it.

use std::sync::Arc;

use capture_core::ServerError;
use capture_core::backend::{DeviceStream, Fence, StreamState};

use crate::gpu::Gpu;
use crate::raw;
use crate::read_staging::ReadStaging;
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
