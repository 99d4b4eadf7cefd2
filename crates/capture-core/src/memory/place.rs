//! `ArenaPlace`: where an allocation of a graph pool's memory lies (rule 23), and the
//! byte-interval arithmetic the ledger counts such places with, each byte once.

use crate::ids::{GraphPoolId, StorageId};
use crate::range::ByteRange;

/// Where an allocation of a graph pool's arena lives: the pool, the page's storage
/// (stable for the page's life, unlike its number) and the slice's bytes in the page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ArenaPlace {
    /// The graph pool.
    pub(crate) pool: GraphPoolId,
    /// The page's storage.
    pub(crate) storage: StorageId,
    /// The slice's bytes within the page.
    pub(crate) bytes: ByteRange,
}

/// The number of bytes `ranges` cover, each byte once.
pub(crate) fn union_len(ranges: &mut [ByteRange]) -> u64 {
    ranges.sort_by_key(|r| r.start());
    let (mut total, mut reach) = (0, 0);
    for r in ranges.iter() {
        let start = r.start().max(reach);
        if r.end() > start {
            total += r.end() - start;
        }
        reach = reach.max(r.end());
    }
    total
}

/// The parts of `bytes` that none of `covering` covers.
pub(crate) fn subtract(bytes: ByteRange, covering: &mut [ByteRange]) -> Vec<ByteRange> {
    covering.sort_by_key(|r| r.start());
    let mut parts = Vec::new();
    let mut at = bytes.start();
    for c in covering.iter().filter(|c| c.overlaps(bytes)) {
        if c.start() > at {
            parts.push(ByteRange::from_bounds(at, c.start()));
        }
        at = at.max(c.end());
    }
    if at < bytes.end() {
        parts.push(ByteRange::from_bounds(at, bytes.end()));
    }
    parts
}
