//! The capture lifecycle: each pooled stream's [`StreamCapture`], the device-wide
//! [`CaptureStatus`], and the [`Window`] that drives a backend through one capture.

mod branch_clocks;
mod claims;
mod domain;
mod status;
mod stream_capture;
mod window;

pub use branch_clocks::Lane;
pub use domain::CaptureDomain;
pub(crate) use status::Recording;
pub use status::{CaptureStatus, DeviceCaptures};
pub use stream_capture::{CaptureEnd, StreamCapture, TouchedPage};
pub use window::{Graph, Refused, Window};
