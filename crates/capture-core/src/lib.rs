//! Backend-agnostic graph capture of GPU compute streams.
//!
//! Record a fixed sequence of kernel launches on one stream once, replay it many times as
//! one dispatch, and keep every byte of memory honest while doing so.
//!
//! Design choices:
//! - **Rules live here.** Every rule a capture keeps is enforced by this crate; a backend
//!   translates driver calls and never adds or bends a rule.
//! - **No unsafe, no GPU dependency.** Driver traits have safe methods; the core
//!   guarantees the lifecycle facts a backend relies on.
//! - **Logical ids only.** Streams, graphs, buffers and failures are numbered in creation
//!   order, so traces and errors read the same on every backend.
//! - **Memory is honest.** A read of bytes that nothing successfully wrote fails with
//!   [`ServerError::Unwritten`], naming the failure, its cause and the chain of skipped
//!   launches behind it.
//!
//! This crate has no features.

#![forbid(unsafe_code)]

pub mod capture;
pub mod driver;
pub mod drop_queue;
pub mod error;
pub mod ids;
pub mod info_cache;
pub mod memory;
pub mod range;
pub mod report;
pub mod runtime;
pub mod taint;
pub mod trace;

pub use error::ServerError;
