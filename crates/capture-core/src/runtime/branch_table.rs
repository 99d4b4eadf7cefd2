//! `BranchTable`: which streams are branches of a window now (rule 28), so their work
//! goes to the window's pooled stream, and which pooled streams are lent to a window,
//! so their other streams are refused as neighbours (rule 13).
//!
//! An entry lives from the fork until its window ends (aborted, sealed or refused), a
//! joined branch included: the stream belongs to the window all that time. The table
//! is a leaf lock, taken briefly; while it is empty (no window forked) nothing takes it.

use crate::ids::StreamId;

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
