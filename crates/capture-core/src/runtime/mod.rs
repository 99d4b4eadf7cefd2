//! The generic runtime: a [`Device`] over any [`Backend`](crate::backend::Backend), with
//! a pool of streams onto which logical streams fold, eager work inside taint scopes, the
//! capture lifecycle, replays, graph drops, cleanup and memory reports.

mod branch;
mod branch_table;
mod buffer;
mod capturing;
mod cell;
mod closure;
mod config;
mod device;
mod fault_counts;
mod graph_handle;
mod graph_owner;
mod graph_pool;
mod graph_registry;
mod graph_slots;
mod imports;
mod inner;
mod launch;
mod launch_eager;
mod launch_inputs;
mod launch_path;
mod launch_recorded;
mod lifecycle;
mod loop_data;
mod loops;
mod membership;
mod order;
mod pending;
mod pooled;
mod registry;
mod report;
mod scratch;
mod slot_handle;
mod slot_update;
mod stream_graphs;
mod use_memo;

pub use branch::Branch;
pub use buffer::{Arg, Buffer};
pub use capturing::{CapturePhase, Capturing};
pub use config::DeviceConfig;
pub use device::Device;
pub use graph_handle::GraphHandle;
pub use graph_pool::GraphPool;
pub use launch::KernelHandle;
pub use lifecycle::MAX_REPLAYS_PER_CALL;
pub use report::{DeviceReport, StreamReport};
pub use slot_handle::{BufferSlot, GridSlot, Slot, SlotSet};

/// For the microbenchmarks only (`crate::internals`).
#[cfg(feature = "bench-internals")]
pub(crate) use order::Tracks;

// The files import one way: `device` (the `Device` type and its eager calls), then
// `launch` and `lifecycle` (more `Device` calls; `lifecycle` hands the capture closure a
// `capturing` view), all over `inner` (the shared state and
// its helpers), `order`, `registry`, `pooled`, `cell`, `buffer`, `config` and `report`.
