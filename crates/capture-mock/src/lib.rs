//! capture-mock: a deterministic fake GPU driver for CI, a fault-injecting wrapper for
//! any backend, and the scenario suite every backend runs.
//!
//! **Not implemented yet.** This crate compiles empty until its issue lands; it offers
//! nothing and claims nothing. See `docs/architecture.md` for what exists today.

#![forbid(unsafe_code)]
