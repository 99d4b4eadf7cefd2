//! Backend-agnostic graph capture of GPU compute streams.
//!
//! Record a fixed sequence of kernel launches on one stream once, replay it many times as
//! one dispatch, and keep every byte of memory honest while doing so.
//!
//! A runtime author needs what is at this crate's root: a [`Device`] over a backend,
//! [`Buffer`]s and [`Arg`]s, [`KernelHandle`]s, the capture lifecycle on the device
//! (`prepare`, `begin`, `end`, `abort`, [`Device::capture`]), replays, the reports and
//! ledgers, [`ServerError`], and [`Backend`], the bound to write on code generic over
//! backends. A backend author also needs [`backend`]: the traits a driver implements and
//! the per-stream state it embeds.
//!
//! Most users reach all of it through the facade, `capture-graphs`, which re-exports
//! this crate's root and each enabled backend; the examples here use its paths.
//!
//! Design choices:
//! - **Rules live here.** Every rule a capture keeps is enforced by this crate
//!   (`docs/rules.md` lists them); a backend translates driver calls and never adds or
//!   bends a rule. That includes the launch check: a launch that does not fit its
//!   kernel's [`KernelSignature`] or the device's limits is refused here, the same on
//!   every backend.
//! - **No unsafe, no GPU dependency.** Driver traits have safe methods; the core
//!   guarantees the lifecycle facts a backend relies on.
//! - **Logical ids only.** Streams, graphs, buffers and failures are numbered in creation
//!   order, so traces and errors read the same on every backend.
//! - **Memory is honest.** A read of bytes that nothing successfully wrote fails with
//!   [`ServerError::Unwritten`], naming the failure, its cause and the chain of skipped
//!   launches behind it.
//!
//! One feature, off by default: `bench-internals` exposes the crate-private bookkeeping
//! (the taint ledger, the order tracks) to the microbenchmarks in `benches/`, as the
//! hidden module `internals`. It is not an API.

#![forbid(unsafe_code)]

mod arg_value;
pub mod backend;
mod branch_refusal;
mod builtin;
mod capture;
mod driver;
mod drop_queue;
mod error;
mod id_hash;
mod ids;
mod info_cache;
#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub mod internals;
mod kernel;
mod label;
mod lock_order;
mod memory;
mod op;
mod range;
mod read_staging;
mod report;
mod runtime;
mod scalar_type;
mod slot_table;
mod stop_flag;
mod stream_state;
mod subject;
mod taint;
mod trace;

pub use arg_value::ArgValue;
pub use branch_refusal::{BranchRace, BranchReason, BranchRefused, MAX_WINDOW_LANES, RaceSide};
pub use builtin::{Builtin, Builtins};
pub use capture::CaptureStatus;
pub use driver::Backend;
pub use drop_queue::FlushingPolicy;
pub use error::{
    Chain, FailureCause, OutOfMemory, PostMortem, ServerError, Skipped, Unavailable, Unwritten,
};
pub use ids::{FailureId, GraphId, GraphPoolId, MemoryId, PageId, StreamId};
pub use info_cache::CachePolicy;
pub use kernel::{
    Dims, GraphUpdates, Grid, KernelSignature, MAX_KERNEL_PARAMS, MAX_LAUNCH_BUFFERS,
    MAX_SCALAR_BYTES, Param, ProgrammaticLaunch,
};
pub use label::MAX_LABEL_BYTES;
pub use memory::{
    Access, AllocationMode, CleanupReport, MAX_ALLOCATION_BYTES, MemoryConfig, MemoryKind,
    MemoryReport, PoolKind, PoolName, PoolUsage, SLICE_ALIGNMENT,
};
pub use op::{Op, ReadBy};
pub use range::{ByteRange, InvalidRange};
pub use report::{GraphLedger, GraphPoolLedger};
pub use runtime::{
    Arg, Branch, Buffer, BufferSlot, CapturePhase, Capturing, Device, DeviceConfig, DeviceReport,
    GraphHandle, GraphPool, GridSlot, KernelHandle, MAX_REPLAYS_PER_CALL, Slot, SlotSet,
    StreamReport,
};
pub use scalar_type::{ScalarParam, ScalarType};
pub use slot_table::{MAX_SLOT_NAME, SlotInfo, SlotKind, SlotMismatch, SlotName, SlotRefused};
pub use stop_flag::{DeviceLoops, LoopMismatch, LoopRefused, STOP_FLAG_BYTES};
pub use subject::Subject;
pub use trace::{Event, KernelId, SlotChange, Trace, WorkId};

/// The plain-old-data bounds of the typed host I/O ([`Device::write_values`],
/// [`Device::read_values`]): `f32`, `u32`, arrays of them, and a `#[repr(C)]` type of
/// your own that derives them (with bytemuck's `derive` feature in your crate).
pub use bytemuck::{Pod, Zeroable};

/// What every fallible call of this crate returns.
pub type Result<T, E = ServerError> = std::result::Result<T, E>;
