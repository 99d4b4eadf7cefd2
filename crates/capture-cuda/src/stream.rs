//! `CudaStream`: the core's per-stream state beside a non-blocking CUDA stream, and
//! `CudaFence`, an event recorded on it.

use std::sync::Arc;

use capture_core::ServerError;
use capture_core::backend::{DeviceStream, Fence, StreamState};

use crate::driver::Gpu;
use crate::raw;
use crate::storage::CudaStorage;

/// A CUDA stream.
pub struct CudaStream {
    pub(crate) gpu: Arc<Gpu>,
    pub(crate) stream: usize,
    pub(crate) state: StreamState<CudaStorage, CudaStorage>,
    pub(crate) began_on: Option<std::thread::ThreadId>,
}

impl Drop for CudaStream {
    fn drop(&mut self) {
        let _ = raw::make_current(self.gpu.context);
        let _ = raw::stream_sync(self.stream);
        raw::stream_destroy(self.stream);
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
            Some(event) => raw::stream_wait_event(self.context, stream, event),
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
            Some(event) => raw::event_wait(self.context, event),
            None => Ok(()),
        }
    }
}

impl Drop for CudaFence {
    fn drop(&mut self) {
        if let Some(event) = self.event.take() {
            let _ = raw::make_current(self.context);
            raw::event_destroy(event);
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
    fn fence((stream, context): (usize, usize)) -> CudaFence {
        match raw::make_current(context).and_then(|()| raw::event_record(stream)) {
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
