//! Hot-path allocation checks: memory.

pub(crate) const CHECKS: &[crate::Check] = &[];
