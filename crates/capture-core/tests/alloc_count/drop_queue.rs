//! Hot-path allocation checks: drop_queue.

pub(crate) const CHECKS: &[crate::Check] = &[];
