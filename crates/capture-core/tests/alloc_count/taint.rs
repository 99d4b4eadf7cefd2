//! Hot-path allocation checks: taint.

pub(crate) const CHECKS: &[crate::Check] = &[];
