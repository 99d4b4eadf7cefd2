//! `UseMemo`: the uses a pooled stream's eager launches stamped in the order tracks
//! since they last changed, so a launch that repeats them skips the tracks (rule 18's
//! waits and stamps) and the holds (rule 19) it would find already done.
//!
//! The tracks stamp each use with its stream's generation, which only a fence taken of
//! the stream moves on (`order.rs`). The same use again in the same generation, with
//! nothing else changed, finds no wait to add and leaves the tracks as they were: a
//! read of memory the stream read or wrote, a write of a range it wrote. So the memo
//! holds what the launch path's last full passes stamped, and is worth as much as the
//! tracks' *version* it was made at:
//!
//! - every lock of the tracks bumps the version (`Inner::order`), so any change made by
//!   any thread, a seal, a wait noted or a forgotten allocation, leaves the memo stale;
//! - the launch path's own locks carry it over (`Order::lock_for`): a full pass that
//!   finds the memo current (or starts it afresh at its first lock) notes its uses only
//!   if no other lock came between its ordering and its stamps;
//! - a pass that leaves a wait out (the other stream records) notes nothing;
//! - its buffers are held since the last flush, and clearing the holds clears it
//!   (`PooledStream::clear_held`).
//!
//! A launch reads the version with one atomic load: one whose last lock came after
//! that load is ordered after the launch, which is what the lock would have done.

use crate::ids::MemoryId;
use crate::memory::ClaimKey;

/// How many reads and how many writes a memo keeps; a launch past them takes the full
/// pass.
const MEMO_KEYS: usize = 16;

/// A version no lock of the tracks produces before the counter wraps.
const STALE: u64 = u64::MAX;

/// See the module docs.
#[derive(Debug)]
pub(crate) struct UseMemo {
    /// The tracks' version the memo is good for.
    version: u64,
    /// Memory read since (any range: order is per allocation).
    reads: Vec<MemoryId>,
    /// Ranges written since (the tracks note written ranges exactly, rule 15).
    writes: Vec<ClaimKey>,
    /// A full pass began and has not locked the tracks yet: its first lock may start the
    /// memo afresh.
    fresh: bool,
    /// The full pass under way may note its uses.
    noting: bool,
}

impl Default for UseMemo {
    fn default() -> Self {
        Self {
            version: STALE,
            reads: Vec::with_capacity(MEMO_KEYS),
            writes: Vec::with_capacity(MEMO_KEYS),
            fresh: false,
            noting: false,
        }
    }
}

impl UseMemo {
    /// Whether a launch reading `inputs` and writing `outputs` repeats uses the memo
    /// holds, with the tracks at `version`.
    pub(crate) fn covers(&self, version: u64, inputs: &[ClaimKey], outputs: &[ClaimKey]) -> bool {
        self.version == version
            && version != STALE
            && outputs.iter().all(|key| self.writes.contains(key))
            && inputs.iter().all(|key| {
                self.reads.contains(&key.memory)
                    || self.writes.iter().any(|w| w.memory == key.memory)
            })
    }

    /// A launch the memo does not cover takes the full pass.
    pub(crate) fn begin_pass(&mut self) {
        self.fresh = true;
        self.noting = true;
    }

    /// The launch path locked the tracks; `before` is the version that lock found.
    pub(crate) fn carry(&mut self, before: u64) {
        let first = std::mem::take(&mut self.fresh);
        if self.version == before {
            self.version = before.wrapping_add(1);
            return;
        }
        self.forget();
        if first {
            self.version = before.wrapping_add(1);
        } else {
            self.noting = false;
        }
    }

    /// The pass under way left a wait out: it notes nothing.
    pub(crate) fn spoil(&mut self) {
        self.forget();
        self.noting = false;
    }

    /// The full pass stamped these uses, under the lock that carried the memo last.
    pub(crate) fn note(&mut self, inputs: &[ClaimKey], outputs: &[ClaimKey]) {
        if !std::mem::take(&mut self.noting) || self.version == STALE {
            return;
        }
        for key in inputs {
            if !self.reads.contains(&key.memory) && self.reads.len() < MEMO_KEYS {
                self.reads.push(key.memory);
            }
        }
        for key in outputs {
            if !self.writes.contains(key) && self.writes.len() < MEMO_KEYS {
                self.writes.push(*key);
            }
        }
    }

    /// Empties the memo: nothing is covered until a full pass notes again.
    pub(crate) fn forget(&mut self) {
        self.version = STALE;
        self.reads.clear();
        self.writes.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range::ByteRange;

    fn key(n: u64) -> ClaimKey {
        ClaimKey {
            memory: MemoryId::new(n),
            range: ByteRange::from_bounds(0, 4),
        }
    }

    /// One full pass: two locks (ordering, then stamps) with nothing between them.
    fn pass(memo: &mut UseMemo, version: &mut u64, inputs: &[ClaimKey], outputs: &[ClaimKey]) {
        memo.begin_pass();
        memo.carry(*version);
        *version += 1;
        memo.carry(*version);
        *version += 1;
        memo.note(inputs, outputs);
    }

    #[test]
    fn a_ping_pong_is_covered_once_both_directions_were_noted() {
        let (mut memo, mut version) = (UseMemo::default(), 7);
        assert!(!memo.covers(version, &[], &[]), "a new memo covers nothing");
        pass(&mut memo, &mut version, &[key(1)], &[key(2)]);
        assert!(memo.covers(version, &[key(1)], &[key(2)]));
        assert!(
            !memo.covers(version, &[key(2)], &[key(1)]),
            "key 1 was never written"
        );
        pass(&mut memo, &mut version, &[key(2)], &[key(1)]);
        assert!(memo.covers(version, &[key(2)], &[key(1)]));
        assert!(memo.covers(version, &[key(1)], &[key(2)]));
        assert!(
            !memo.covers(version + 1, &[key(1)], &[key(2)]),
            "another lock since"
        );
    }

    #[test]
    fn a_lock_between_a_passs_ordering_and_its_stamps_notes_nothing() {
        let (mut memo, mut version) = (UseMemo::default(), 0);
        memo.begin_pass();
        memo.carry(version);
        version += 2; // another thread locked the tracks in between
        memo.carry(version);
        version += 1;
        memo.note(&[key(1)], &[key(2)]);
        assert!(!memo.covers(version, &[key(1)], &[key(2)]));
        assert!(!memo.covers(STALE, &[], &[]));
    }

    #[test]
    fn a_spoiled_pass_and_a_forgotten_memo_cover_nothing() {
        let (mut memo, mut version) = (UseMemo::default(), 0);
        pass(&mut memo, &mut version, &[key(1)], &[key(2)]);
        memo.begin_pass();
        memo.carry(version);
        version += 1;
        memo.spoil();
        memo.carry(version);
        version += 1;
        memo.note(&[key(3)], &[]);
        assert!(!memo.covers(version, &[key(1)], &[key(2)]));
        pass(&mut memo, &mut version, &[key(1)], &[key(2)]);
        memo.forget();
        assert!(!memo.covers(version, &[key(1)], &[key(2)]));
    }

    #[test]
    fn a_write_of_another_range_is_not_covered() {
        let (mut memo, mut version) = (UseMemo::default(), 0);
        pass(&mut memo, &mut version, &[], &[key(1)]);
        let other = ClaimKey {
            memory: MemoryId::new(1),
            range: ByteRange::from_bounds(4, 8),
        };
        assert!(!memo.covers(version, &[], &[other]));
        assert!(
            memo.covers(version, &[other], &[]),
            "a read of it is: order is per allocation"
        );
    }
}
