//! capture-graphs: graph capture of GPU compute streams. Record a fixed sequence of
//! kernel launches on one stream once, replay it many times as one dispatch, and keep
//! every byte of memory honest while doing so. The facade over `capture-core` and the
//! backends: depend on this crate alone.
//!
//! The user's view of the core is at this crate's root (with [`Backend`], the bound for
//! code generic over backends); each enabled backend is a module whose types are
//! documented here. Features pick backends, and are additive:
//! - `mock` (default): the deterministic mock backend, CI's backend (module `mock`).
//! - `vulkan`: the Vulkan backend, ash loaded at run time (module `vulkan`).
//! - `cuda`: the CUDA backend, the driver API loaded at run time (module `cuda`).
//! - `cudarc`: `cuda` plus `cuda::CudaBackend::from_cudarc` and `from_cudarc_stream`,
//!   the backend in a cudarc context.
//!
//! The `capture` program (demo, decode, trace) is the `capture-cli` crate, its decoder
//! the `capture-decode` crate and its benchmarks the `capture-bench` program, each a user
//! of this one.
//!
//! A whole program on the mock: warm up and record a two-kernel chain, replay it, read
//! the result; a read of bytes nothing wrote fails instead of returning them.
//!
//! ```
//! # #[cfg(feature = "mock")]
//! # fn main() -> capture_graphs::Result<()> {
//! use capture_graphs::mock::MockBackend;
//! use capture_graphs::{Arg, Builtin, Builtins, Device, DeviceConfig, ServerError, StreamId};
//!
//! let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
//! let s = StreamId::new(0);
//! let add = dev.kernel(MockBackend::builtin(Builtin::AddScalar));
//! let mul = dev.kernel(MockBackend::builtin(Builtin::MulScalar));
//! let n = 4;
//! let x = dev.alloc(s, n * 4)?;
//! let t = dev.alloc(s, n * 4)?;
//! let y = dev.alloc(s, n * 4)?;
//!
//! // Never written: reading it fails loudly.
//! assert!(matches!(dev.read(s, &y), Err(ServerError::Unwritten(_))));
//!
//! // Typed host I/O: any slice of plain-old-data values, borrowed.
//! dev.write_values(s, &x, 0, &[1.0f32, 2.0, 3.0, 4.0])?;
//! // Called twice: warmup (eager), then recorded into the graph.
//! let graph = dev.capture(s, |d| {
//!     d.launch(s, &add, [1, 1, 1], &[Arg::read(&x), Arg::write(&t)], &Builtin::AddScalar.info(n, 1.0))?;
//!     d.launch(s, &mul, [1, 1, 1], &[Arg::read(&t), Arg::write(&y)], &Builtin::MulScalar.info(n, 10.0))
//! })?;
//!
//! // A new input, one replay: y = (x + 1) * 10.
//! dev.write_values(s, &x, 0, &[5.0f32, 6.0, 7.0, 8.0])?;
//! dev.replay(s, &graph, 1)?;
//! let mut out = [0.0f32; 4]; // read into the caller's buffer: no allocation
//! dev.read_values_into(s, &y, 0, &mut out)?;
//! assert_eq!(out, [60.0, 70.0, 80.0, 90.0]);
//!
//! println!("{}", dev.memory_report());
//! dev.drop_graph(graph)?;
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "mock"))]
//! # fn main() {}
//! ```

#![forbid(unsafe_code)]

pub use capture_core::*;

/// The guide's Rust programs (`docs/guide.md`), compiled and run as doctests, so the
/// guide cannot drift from the API. Not part of the API.
#[cfg(all(doctest, feature = "mock"))]
#[doc = include_str!("../../../docs/guide.md")]
mod guide {}

/// The deterministic mock backend (feature `mock`, on by default): host memory with real
/// bytes, deferred per-stream execution, CUDA's relaxed-mode capture legality; and
/// [`Faulty`](mock::Faulty), which fails the Nth call of any driver operation on any
/// backend.
#[cfg(feature = "mock")]
pub mod mock {
    #[doc(inline)]
    pub use capture_mock::*;
}

/// The Vulkan backend (feature `vulkan`): compute through ash, loaded at run time;
/// graphs as simultaneous-use secondary command buffers.
#[cfg(feature = "vulkan")]
pub mod vulkan {
    #[doc(inline)]
    pub use capture_vulkan::*;
}

/// The CUDA backend (feature `cuda`): CUDA graphs through the driver API, loaded at run
/// time; relaxed-mode stream capture.
#[cfg(feature = "cuda")]
pub mod cuda {
    #[doc(inline)]
    pub use capture_cuda::*;
}
