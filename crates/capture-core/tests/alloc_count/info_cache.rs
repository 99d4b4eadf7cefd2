//! Hot-path allocation checks: info_cache.

pub(crate) const CHECKS: &[crate::Check] = &[];
