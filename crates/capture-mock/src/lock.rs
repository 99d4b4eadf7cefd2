//! The one way the mock takes a lock: a panic on another thread (a user kernel that
//! panicked, say) never poisons the mock's own state.

use std::sync::{Mutex, MutexGuard};

/// `m`'s guard, even when a panicking thread held it last.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
