//! The capture lifecycle: each pooled stream's [`StreamCapture`], the device-wide
//! [`CaptureStatus`], and the [`Window`] that drives a backend through one capture.

mod status;
mod stream_capture;
mod window;

pub use status::{CaptureStatus, DeviceCaptures};
pub use stream_capture::{CaptureEnd, StreamCapture, TouchedPage};
pub use window::{Graph, Refused, Window};
