//! `Branches`: which streams are branches of a window now (rule 28), so their work
//! goes to the window's pooled stream, and which pooled streams are lent to a window,
//! so their other streams are refused as neighbours (rule 13).
//!
//! An entry lives from the fork until its window ends (aborted, sealed or refused), a
//! joined branch included: the stream belongs to the window all that time. The table
//! ([`BranchTable`]) is a leaf lock, taken briefly; [`Branches`] owns it with the flag
//! that says it may hold an entry, kept true exactly while it does, so while no window
//! forked nothing takes the lock.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::ids::StreamId;
use crate::lock_order::{Level, Ordered};

/// The device's branch table and its lock-free "any branch" flag (rule 28).
#[derive(Debug, Default)]
pub(crate) struct Branches {
    table: Mutex<BranchTable>,
    /// Whether `table` may hold an entry: what finding a branch's pooled stream reads,
    /// so a device that never forks takes no lock. Written under the table's lock.
    forked: AtomicBool,
}

impl Branches {
    /// Whether any stream may be a branch now (no lock taken).
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.forked.load(Ordering::Acquire)
    }

    fn lock(&self) -> Ordered<'_, BranchTable> {
        Ordered::lock(&self.table, Level::Branches)
    }

    /// The entry of `stream`, while it is a branch of a window.
    pub(crate) fn entry(&self, stream: StreamId) -> Option<BranchEntry> {
        if !self.any() {
            return None;
        }
        self.lock().entry(stream)
    }

    /// The origin of the window pooled stream `home` is lent to as a branch's.
    pub(crate) fn lent(&self, home: usize) -> Option<StreamId> {
        if !self.any() {
            return None;
        }
        self.lock().lent(home)
    }

    /// Adds `entry` (a fork's reservation of the branch and its home), unless its
    /// stream or its home is taken: then the origin of the window that holds it.
    pub(crate) fn add(&self, entry: BranchEntry) -> Result<(), StreamId> {
        let mut table = self.lock();
        let added = table.add(entry);
        self.forked.store(!table.is_empty(), Ordering::Release);
        added
    }

    /// Removes `entry` (a fork that did not go through).
    pub(crate) fn remove(&self, entry: BranchEntry) {
        let mut table = self.lock();
        table.remove(entry);
        self.forked.store(!table.is_empty(), Ordering::Release);
    }

    /// Releases every branch of the window on pooled stream `pooled` (it ended).
    pub(crate) fn release(&self, pooled: usize) {
        if !self.any() {
            return;
        }
        let mut table = self.lock();
        let left = table.release(pooled);
        self.forked.store(left, Ordering::Release);
    }
}

/// A stream forked into a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BranchEntry {
    /// The branch.
    pub(crate) branch: StreamId,
    /// The window's origin.
    pub(crate) origin: StreamId,
    /// The window's pooled stream, where the branch's work goes.
    pub(crate) pooled: usize,
    /// The branch's own pooled stream, lent to the window.
    pub(crate) home: usize,
}

/// The entries, under [`Branches`]' lock.
#[derive(Debug, Default)]
pub(crate) struct BranchTable {
    entries: Vec<BranchEntry>,
}

impl BranchTable {
    /// The entry of `stream`, when it is a branch of a window now.
    pub(crate) fn entry(&self, stream: StreamId) -> Option<BranchEntry> {
        self.entries.iter().copied().find(|r| r.branch == stream)
    }

    /// The window pooled stream `home` is lent to, by its origin.
    pub(crate) fn lent(&self, home: usize) -> Option<StreamId> {
        self.entries
            .iter()
            .find(|r| r.home == home)
            .map(|r| r.origin)
    }

    /// Adds `entry`, unless its stream or its home is taken: then the origin of the
    /// window that holds it.
    pub(crate) fn add(&mut self, entry: BranchEntry) -> Result<(), StreamId> {
        if let Some(r) = self
            .entries
            .iter()
            .find(|r| r.branch == entry.branch || r.home == entry.home)
        {
            return if *r == entry { Ok(()) } else { Err(r.origin) };
        }
        self.entries.push(entry);
        Ok(())
    }

    /// Removes `entry` (a fork that did not go through).
    pub(crate) fn remove(&mut self, entry: BranchEntry) {
        self.entries.retain(|r| *r != entry);
    }

    /// Releases every branch of the window on pooled stream `pooled`; whether any is
    /// left on the device.
    pub(crate) fn release(&mut self, pooled: usize) -> bool {
        self.entries.retain(|r| r.pooled != pooled);
        !self.entries.is_empty()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_home_is_lent_to_one_window_and_released_with_it() {
        let (o, a, b, n) = (
            StreamId::new(0),
            StreamId::new(1),
            StreamId::new(2),
            StreamId::new(5),
        );
        let mut t = BranchTable::default();
        let ra = BranchEntry {
            branch: a,
            origin: o,
            pooled: 0,
            home: 1,
        };
        t.add(ra).unwrap();
        t.add(ra).unwrap();
        assert_eq!(t.entry(a), Some(ra));
        assert_eq!(t.lent(1), Some(o));
        // Another stream of the same home, for another window: taken.
        let rn = BranchEntry {
            branch: n,
            origin: b,
            pooled: 2,
            home: 1,
        };
        assert_eq!(t.add(rn), Err(o));
        assert!(!t.release(0));
        assert!(t.is_empty());
        assert_eq!(t.entry(a), None);
        t.add(rn).unwrap();
        assert!(t.release(0));
    }
}
