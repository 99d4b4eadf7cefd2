//! capture-vulkan: Vulkan compute through ash (loaded at run time), replayed through
//! reusable secondary command buffers.
//!
//! **Not implemented yet.** This crate compiles empty until its issue lands; it offers
//! nothing and claims nothing. See `docs/architecture.md` for what exists today.
