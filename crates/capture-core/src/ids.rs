//! Logical ids: the only names streams, graphs, buffers, pages and failures go by in
//! traces and errors.
//!
//! Every id is a number assigned by the core in creation order, so a trace or an error
//! message reads the same on every backend and every run: no pointers, native handles,
//! thread ids or times ever appear in one.

use std::fmt;

macro_rules! logical_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(u64);

        impl $name {
            /// The id numbered `index`.
            pub const fn new(index: u64) -> Self {
                Self(index)
            }

            /// The number behind the id.
            pub const fn index(self) -> u64 {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "#{}"), self.0)
            }
        }
    };
}

logical_id!(
    /// A logical stream. Many logical streams fold onto one pooled backend stream.
    StreamId,
    "stream"
);
logical_id!(
    /// A graph sealed from a capture window.
    GraphId,
    "graph"
);
logical_id!(
    /// A graph pool: graphs captured into one share the memory their windows allocate
    /// (rule 23).
    GraphPoolId,
    "pool"
);
logical_id!(
    /// One allocation handed out by a memory manager (a slice, for as long as it is held).
    ///
    /// A slice that returns to its pool and is handed out again gets a new id, so a
    /// stale reference to the old allocation can never be mistaken for the new one.
    MemoryId,
    "buf"
);
logical_id!(
    /// A page of a pool: one backend allocation that slices are carved from.
    PageId,
    "page"
);
logical_id!(
    /// A failure in the taint ledger: what the bytes a read overlaps are waiting for.
    FailureId,
    "failure"
);

/// A backend's name for one raw allocation (one page).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StorageId(pub u64);

impl fmt::Display for StorageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "storage#{}", self.0)
    }
}

/// An id shown with the label the user gave it, when it has one: `buf#6 "kv_cache"`
/// (see `label.rs`).
pub(crate) struct Named<'a, I>(pub(crate) I, pub(crate) Option<&'a str>);

impl<I: fmt::Display> fmt::Display for Named<'_, I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Some(label) => write!(f, "{} \"{label}\"", self.0),
            None => write!(f, "{}", self.0),
        }
    }
}

/// Hands out ids of one kind in creation order.
#[derive(Debug, Default, Clone)]
pub(crate) struct IdCounter {
    next: u64,
}

impl IdCounter {
    /// A counter whose first id is numbered 0.
    #[cfg(test)]
    pub(crate) const fn new() -> Self {
        Self { next: 0 }
    }

    /// The next number, counting from 0.
    pub(crate) fn next_index(&mut self) -> u64 {
        let index = self.next;
        self.next += 1;
        index
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_render_with_their_prefix() {
        assert_eq!(StreamId::new(0).to_string(), "stream#0");
        assert_eq!(GraphId::new(1).to_string(), "graph#1");
        assert_eq!(MemoryId::new(3).to_string(), "buf#3");
        assert_eq!(PageId::new(2).to_string(), "page#2");
        assert_eq!(FailureId::new(7).to_string(), "failure#7");
    }

    #[test]
    fn counter_counts_from_zero() {
        let mut c = IdCounter::new();
        assert_eq!((c.next_index(), c.next_index()), (0, 1));
    }
}

/// A kernel registered with a device, numbered in registration order by the device's
/// kernel registry (and by nothing else: foreign work is named by a [`WorkId`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KernelId(pub(crate) u32);

impl KernelId {
    /// The number behind the id.
    pub fn index(self) -> u32 {
        self.0
    }
}

/// The name of the user's own work ([`Device::foreign_work`](crate::Device::foreign_work)),
/// interned once per name in the trace: work names and kernel ids are numbered apart, so
/// work of a new name never moves a kernel's id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkId(pub(crate) u32);

impl WorkId {
    /// The number behind the id.
    pub fn index(self) -> u32 {
        self.0
    }
}
