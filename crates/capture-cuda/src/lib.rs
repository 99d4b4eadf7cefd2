//! capture-cuda: CUDA graphs through cudarc (loaded at run time).
//!
//! **Not implemented yet.** This crate compiles empty until its issue lands; it offers
//! nothing and claims nothing. See `docs/architecture.md` for what exists today.
