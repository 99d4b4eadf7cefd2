//! `MemoryReport`: reserved and in-use bytes per pool.

use std::fmt;

use super::location::PoolName;

/// The figures of one pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolUsage {
    /// The pool.
    pub pool: PoolName,
    /// Pages the pool holds.
    pub pages: u64,
    /// Bytes of storage the pool holds (the sum of its page sizes).
    pub reserved: u64,
    /// Bytes of slices currently handed out (padded sizes).
    pub in_use: u64,
    /// Slices currently handed out.
    pub slices_in_use: u64,
}

impl fmt::Display for PoolUsage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} pages, {} B reserved, {} B in use in {} slices",
            self.pool, self.pages, self.reserved, self.in_use, self.slices_in_use
        )
    }
}

/// Reserved and in-use bytes of every pool of one memory manager.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryReport {
    /// One entry per pool, dynamic first.
    pub pools: Vec<PoolUsage>,
}

impl MemoryReport {
    /// Bytes of storage held by all pools.
    pub fn reserved(&self) -> u64 {
        self.pools.iter().map(|p| p.reserved).sum()
    }

    /// Bytes handed out by all pools.
    pub fn in_use(&self) -> u64 {
        self.pools.iter().map(|p| p.in_use).sum()
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
