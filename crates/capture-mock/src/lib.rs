//! capture-mock: a deterministic fake GPU driver for CI, and a fault-injecting wrapper
//! for any backend.
//!
//! Design choices:
//! - **Real bytes, deferred work.** Memory is host memory with real contents; nothing
//!   runs at enqueue. Queued work runs at a fence wait, a sync or a read, or at
//!   [`MockBackend::step`], so ordering and lifetime bugs show. A slice returned to its
//!   pool is poisoned at once ([`POISON`]).
//! - **Capture legality like CUDA's relaxed mode, per driver context.** One backend
//!   value is one context. While any of its streams records, a free or a kernel load
//!   from any of its streams invalidates every recording of the context (instantiate
//!   then fails as CUDA reports it); an allocation is tolerated; a sync, read, host wait
//!   or event on the capturing stream itself invalidates its capture; waiting on another,
//!   non-capturing stream is legal, from any thread; a capture may end on any thread
//!   ([`AffineMock`] keeps it on the thread that began it).
//! - **Faults are deterministic and backend-agnostic.** [`Faulty`] wraps any backend and
//!   fails the Nth call of any driver operation with a chosen error.
//! - **The builtins, in Rust.** [`MockBackend`] implements the core's
//!   [`Builtins`](capture_core::Builtins) with Rust kernels; any other kernel is a
//!   [`MockKernel`] (a name, a signature and a function), so tests can bring their own.
//!
//! This crate has no features and no unsafe code.

#![forbid(unsafe_code)]

mod backend;
mod context;
mod exec;
mod fault;
mod kernels;
mod lock;
mod queue;
mod recording;
mod storage;

use std::fmt;

pub use backend::{AffineMock, Mock, MockBackend, MockExecutable, MockStream};
pub use exec::launch_grid;
pub use fault::{FaultOp, FaultPlan, Faulty, FaultyFence, FaultyStream};
pub use kernels::{MOCK_MAX_BUFFERS, MockKernel, MockWork};
pub use queue::{MockFence, Queue};
pub use storage::{
    FRESH, MOCK_MEMORY_BYTES, MockExternal, MockMemory, MockResource, MockStorage, POISON,
};

/// What the mock driver (or an injected fault) reports: a message, as a driver's error
/// string would read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MockError(String);

impl MockError {
    /// An error saying `what`.
    pub fn new(what: impl Into<String>) -> Self {
        Self(what.into())
    }
}

impl fmt::Display for MockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for MockError {}
