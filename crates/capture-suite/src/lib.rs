//! capture-suite: the scenario suite every backend runs (the scenarios of
//! `capture-scenarios`, a `#[test]` each by the `suite!` macro), the trace snapshots
//! every backend shares (`snapshots/`), and the core's integration tests (rules, bad
//! input, threads, trace, allocation counts) on the mock, and the reference model with
//! its generic model-based test runner ([`model`]).
//!
//! Test tooling, never published (`publish = false`): backends take it as a
//! dev-dependency, so no published crate depends on insta or proptest.
//!
//! A backend runs the whole suite in one line, in one of its test files:
//! `capture_suite::suite!(MyBackend::new());`.
//!
//! This crate has no features and no unsafe code.

#![forbid(unsafe_code)]

pub mod hot_paths;
pub mod launch_check;
pub mod model;
pub mod reuse;
pub mod scenarios;
