//! The one lock order of a device, written here alone and checked in debug builds.
//!
//! Every lock the runtime takes has a [`Level`] (the order, outermost first, is the
//! enum's); a thread may take a lock only at a level above every lock it already holds
//! (a pooled stream counts as held while a call runs on it, on the caller's thread or,
//! for a capture call, on the stream's worker). Beyond the levels: a thread holds at most
//! one pooled stream at a time, and waits on the host for another stream's fence only
//! while holding none (a read's wait for the streams that wrote what it reads). A debug
//! build panics, naming both levels, the moment a thread would break the order, so a test
//! that merely passes through the bad nesting fails, deadlock or not. Release builds keep
//! no record.

use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard};

/// Where a lock sits in the order, outermost first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    /// A pooled stream: its `Mutex`, or a capture call running on its worker.
    Stream = 1,
    /// The kernel registry.
    Kernels = 2,
    /// The device's capture status: lifecycle transitions, page decisions, kernel
    /// loads, fences recorded on another stream.
    Captures = 3,
    /// The capture domain every device on one driver context shares: which of its
    /// devices record (taken inside a device's capture status, never alone around it).
    Domain = 4,
    /// The graph registry.
    Graphs = 5,
    /// The cross-stream order tracks.
    Order = 6,
    /// The taint ledger.
    Taint = 7,
    /// The trace.
    Trace = 8,
    /// The labels of buffers and graphs (taken alone, briefly, to name an error or to
    /// set a label).
    Labels = 9,
    /// Which streams are branches of a window (rule 28): taken alone or innermost,
    /// briefly, to entry a call or to fork, join and release.
    Branches = 10,
    /// The device's live imports of the caller's memory: taken innermost, under the
    /// importing pooled stream (around the backend's adoption, so two threads cannot
    /// import the same bytes at once), or alone to forget imports taken back.
    Imports = 11,
    /// The streams an asynchronous error may have come from through a device-side wait
    /// (rule 15), to be asked once the call holds nothing: taken alone, briefly.
    Suspects = 12,
}

#[cfg(debug_assertions)]
thread_local! {
    static HELD: std::cell::RefCell<Vec<Level>> = const { std::cell::RefCell::new(Vec::new()) };
}

thread_local! {
    /// How many of the runtime's locks this thread holds, in every build: what a
    /// `GraphHandle` dropped inside the library (a user's work or kept object released
    /// while a stream drains) asks before it takes any lock itself.
    static DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Whether this thread holds any of the runtime's locks now.
pub(crate) fn holds_any() -> bool {
    DEPTH.with(|d| d.get() > 0)
}

/// A level this thread holds until the value drops.
#[derive(Debug)]
pub(crate) struct Held {
    #[cfg(debug_assertions)]
    level: Level,
}

impl Held {
    /// Notes that this thread takes a lock at `level`.
    ///
    /// # Panics
    ///
    /// In a debug build, when the thread already holds a lock at `level` or above.
    pub(crate) fn enter(level: Level) -> Self {
        DEPTH.with(|d| d.set(d.get() + 1));
        #[cfg(debug_assertions)]
        HELD.with(|held| {
            let mut held = held.borrow_mut();
            if let Some(&top) = held.last() {
                assert!(
                    top < level,
                    "lock order broken: taking {level:?} while holding {top:?} (see the lock order in lock_order.rs)"
                );
            }
            held.push(level);
        });
        #[cfg(not(debug_assertions))]
        let _ = level;
        Self {
            #[cfg(debug_assertions)]
            level,
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
        #[cfg(debug_assertions)]
        HELD.with(|held| {
            let mut held = held.borrow_mut();
            if let Some(i) = held.iter().rposition(|&l| l == self.level) {
                held.remove(i);
            }
        });
    }
}

/// A mutex guard taken at its level; the level is released after the lock.
pub(crate) struct Ordered<'a, T> {
    guard: MutexGuard<'a, T>,
    _held: Held,
}

impl<'a, T> Ordered<'a, T> {
    /// Locks `m` at `level`, recovering the data of a poisoned lock (every path keeps
    /// the state behind these locks consistent: transitions are single stores).
    pub(crate) fn lock(m: &'a Mutex<T>, level: Level) -> Self {
        let held = Held::enter(level);
        Self {
            guard: m.lock().unwrap_or_else(|p| p.into_inner()),
            _held: held,
        }
    }
}

impl<T> Deref for Ordered<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> DerefMut for Ordered<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::*;

    #[test]
    fn locks_taken_outermost_first_pass() {
        let a = Mutex::new(());
        let b = Mutex::new(());
        let _s = Ordered::lock(&a, Level::Stream);
        let _t = Ordered::lock(&b, Level::Taint);
    }

    #[test]
    #[should_panic(expected = "taking Captures while holding Taint")]
    fn a_lock_taken_inside_a_later_one_panics() {
        let a = Mutex::new(());
        let b = Mutex::new(());
        let _t = Ordered::lock(&a, Level::Taint);
        let _c = Ordered::lock(&b, Level::Captures);
    }

    #[test]
    fn a_level_is_released_with_its_lock() {
        let a = Mutex::new(());
        drop(Ordered::lock(&a, Level::Trace));
        let _g = Ordered::lock(&a, Level::Graphs);
    }
}
