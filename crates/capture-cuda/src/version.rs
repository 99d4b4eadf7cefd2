//! The versions the shipped kernels pin: the PTX ISA NVRTC writes, the oldest driver
//! that loads it, and the NVRTC release the images come from.

/// The PTX ISA the shipped PTX declares (NVRTC 12.9).
pub const PTX_ISA: &str = "PTX ISA 8.8, from NVRTC 12.9";
/// The oldest driver that loads it.
pub const MIN_DRIVER: &str = "CUDA 12.9 PTX needs an NVIDIA driver of release 575 or newer";

/// The NVRTC release the shipped images come from: the byte-for-byte test runs only
/// against this one.
pub const NVRTC_RELEASE: (i32, i32) = (12, 9);
