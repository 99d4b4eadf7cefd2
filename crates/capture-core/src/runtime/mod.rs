//! The generic runtime: a [`Device`] over any [`Backend`](crate::driver::Backend), with
//! a pool of streams onto which logical streams fold, eager work inside taint scopes, the
//! capture lifecycle, replays, graph drops, cleanup and memory reports.

mod buffer;
mod cell;
mod config;
mod device;
mod launch;
mod lifecycle;
mod pooled;
mod report;
mod setup;

pub use buffer::{Arg, Buffer};
pub use config::DeviceConfig;
pub use device::Device;
pub use launch::KernelHandle;
pub use report::{DeviceReport, StreamReport};
pub use setup::StreamSetup;
