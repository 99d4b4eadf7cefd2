//! `MemoryReport`: reserved and in-use bytes per pool.

use std::fmt;

use super::location::{PoolKind, PoolName};

/// The figures of one pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolUsage {
    /// The pool.
    pub pool: PoolName,
    /// Pages the pool holds: its live driver allocations (one per page).
    pub pages: u64,
    /// Bytes of storage the pool holds (the sum of its page sizes).
    pub reserved: u64,
    /// Bytes of slices currently handed out (padded sizes).
    pub in_use: u64,
    /// Slices currently handed out.
    pub slices_in_use: u64,
    /// Driver allocations the pool ever made (pages it grew by), over its life.
    pub allocations: u64,
    /// Driver allocations it gave back (pages released by cleanup); `allocations -
    /// frees` is `pages`.
    pub frees: u64,
}

impl fmt::Display for PoolUsage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pool.pool == PoolKind::Imported {
            return write!(
                f,
                "{}: {} imports of the caller's memory, {} B, {} B in use in {} slices",
                self.pool, self.pages, self.reserved, self.in_use, self.slices_in_use
            );
        }
        write!(
            f,
            "{}: {} pages, {} B reserved, {} B in use in {} slices; {} driver allocations, {} freed",
            self.pool,
            self.pages,
            self.reserved,
            self.in_use,
            self.slices_in_use,
            self.allocations,
            self.frees
        )
    }
}

/// Reserved and in-use bytes of every pool of one memory manager.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryReport {
    /// One entry per pool, dynamic first; the imported memory's last, once any was
    /// imported.
    pub pools: Vec<PoolUsage>,
}

impl MemoryReport {
    /// The pools of the library's own memory (every pool but the imported one).
    fn own(&self) -> impl Iterator<Item = &PoolUsage> {
        self.pools
            .iter()
            .filter(|p| p.pool.pool != PoolKind::Imported)
    }

    /// Bytes of storage held by all pools of the library's own memory.
    pub fn reserved(&self) -> u64 {
        self.own().map(|p| p.reserved).sum()
    }

    /// Bytes handed out by all pools.
    pub fn in_use(&self) -> u64 {
        self.pools.iter().map(|p| p.in_use).sum()
    }

    /// Pages held by all pools of the library's own memory: its live driver
    /// allocations (imported memory is the caller's).
    pub fn pages(&self) -> u64 {
        self.own().map(|p| p.pages).sum()
    }

    /// Slices handed out by all pools.
    pub fn slices_in_use(&self) -> u64 {
        self.pools.iter().map(|p| p.slices_in_use).sum()
    }

    /// Driver allocations all pools of the library's own memory ever made.
    pub fn allocations(&self) -> u64 {
        self.own().map(|p| p.allocations).sum()
    }

    /// Driver allocations they gave back.
    pub fn frees(&self) -> u64 {
        self.own().map(|p| p.frees).sum()
    }
}

impl fmt::Display for MemoryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.pools.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}
