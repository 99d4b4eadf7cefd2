//! `Claims`: the memory a recording's operations were given, in order, each claim with
//! the operation that first read and first wrote it. A window builds it as it records;
//! the graph it seals into keeps it, so the inputs a replay must find written (rule 14)
//! are computed again when a slot's buffer is rebound (rule 27).
//!
//! A buffer given as a slot is kept as a claim of its own per use, never merged with
//! another: a rebind moves exactly the slot's uses to the new buffer.

use crate::id_hash::KeyedMap;
use crate::memory::{BufferBinding, ClaimKey};
use crate::range::ByteRange;
use crate::slot_table::SlotName;

/// One claim: the binding (its access merged over every operation given it), which
/// recorded operation first read and first wrote it, and its slot, for a slot's use.
#[derive(Clone)]
struct Claim {
    binding: BufferBinding,
    first_read: Option<u64>,
    first_write: Option<u64>,
    slot: Option<SlotName>,
}

/// What a recording's operations were given. See the module docs.
#[derive(Clone, Default)]
pub(crate) struct Claims {
    recorded: Vec<Claim>,
    /// Claims by key, slots' uses left out: a key's range is the caller's choice, so
    /// hashed with a key.
    index: KeyedMap<ClaimKey, usize>,
}

impl Claims {
    /// Notes that recorded operation `op` was given `b` (as slot `slot`, when it is one).
    /// A claim is kept once per key (a decode step records hundreds of launches over a
    /// few buffers), with the position of its first read and first write.
    pub(crate) fn record(&mut self, op: u64, b: BufferBinding, slot: Option<SlotName>) {
        let (reads, writes) = (b.access().reads(), b.access().writes());
        if slot.is_none()
            && let Some(&i) = self.index.get(&b.claim_key())
        {
            let claim = &mut self.recorded[i];
            let access = claim.binding.access().merge(b.access());
            if access != claim.binding.access() {
                claim.binding = b.with_access(access);
            }
            if reads {
                claim.first_read.get_or_insert(op);
            }
            if writes {
                claim.first_write.get_or_insert(op);
            }
            return;
        }
        if slot.is_none() {
            self.index.insert(b.claim_key(), self.recorded.len());
        }
        self.recorded.push(Claim {
            first_read: reads.then_some(op),
            first_write: writes.then_some(op),
            binding: b,
            slot,
        });
    }

    /// How many claims there are.
    pub(crate) fn len(&self) -> usize {
        self.recorded.len()
    }

    /// Forgets every claim.
    pub(crate) fn clear(&mut self) {
        self.recorded.clear();
        self.index.clear();
    }

    /// The memory, each claim key named once (write winning over read), leaving out
    /// memory already gone, in key order.
    pub(crate) fn merged(&self) -> Vec<BufferBinding> {
        let mut merged: Vec<BufferBinding> = self
            .recorded
            .iter()
            .map(|c| c.binding.clone())
            .filter(BufferBinding::is_live)
            .collect();
        merged.sort_unstable_by_key(BufferBinding::claim_key);
        let mut out: Vec<BufferBinding> = Vec::with_capacity(merged.len());
        for b in merged {
            match out.last_mut() {
                Some(last) if last.claim_key() == b.claim_key() => {
                    let access = last.access().merge(b.access());
                    *last = b.with_access(access);
                }
                _ => out.push(b),
            }
        }
        out
    }

    /// The bytes the recording reads before its operations wrote them, in first-read
    /// order, each named once: what a replay must find written before it runs. A read
    /// partly written first leaves only its unwritten parts as inputs.
    pub(crate) fn inputs(&self) -> Vec<ClaimKey> {
        let mut inputs: Vec<(u64, ClaimKey)> = Vec::new();
        for c in &self.recorded {
            let Some(read) = c.first_read else { continue };
            self.each_uncovered(c.binding.claim_key(), Some(read), |part| {
                inputs.push((read, part));
            });
        }
        inputs.sort_by_key(|&(read, key)| (read, key));
        inputs.into_iter().map(|(_, key)| key).collect()
    }

    /// The parts of `key` that no claim writes, appended to `out` in address order.
    pub(crate) fn unwritten_parts(&self, key: ClaimKey, out: &mut Vec<ClaimKey>) {
        self.each_uncovered(key, None, |part| out.push(part));
    }

    /// Whether the claims write every byte of `key`.
    pub(crate) fn writes_all(&self, key: ClaimKey) -> bool {
        // Extends the covered prefix of `key` with any write that starts inside it, until
        // no write extends it further; allocates nothing (this runs per recorded input).
        let mut reached = key.range.start();
        loop {
            let next = self
                .writes_to(key, None)
                .filter(|r| r.start() <= reached && r.end() > reached)
                .map(|r| r.end())
                .max();
            match next {
                Some(end) if end >= key.range.end() => return true,
                Some(end) => reached = end,
                None => return false,
            }
        }
    }

    /// Moves every use of `slot` to `to`, each keeping the access its launch gave it.
    pub(crate) fn rebind(&mut self, slot: SlotName, to: &BufferBinding) {
        for c in &mut self.recorded {
            if c.slot == Some(slot) {
                c.binding = to.clone().with_access(c.binding.access());
            }
        }
    }

    /// The ranges of `key`'s memory that claims first written before operation `before`
    /// (every claim, for `None`) write.
    fn writes_to(
        &self,
        key: ClaimKey,
        before: Option<u64>,
    ) -> impl Iterator<Item = ByteRange> + '_ {
        self.recorded
            .iter()
            .filter(move |c| {
                c.first_write
                    .is_some_and(|wrote| before.is_none_or(|read| wrote < read))
                    && c.binding.memory() == key.memory
            })
            .map(|c| c.binding.range())
    }

    /// Calls `f` on each maximal part of `key` that no claim first written before
    /// operation `before` (every claim, for `None`) writes, in address order. Allocates
    /// nothing.
    fn each_uncovered(&self, key: ClaimKey, before: Option<u64>, mut f: impl FnMut(ClaimKey)) {
        let end = key.range.end();
        let mut at = key.range.start();
        while at < end {
            // The written run starting at `at`, if any.
            let mut reached = at;
            while let Some(e) = self
                .writes_to(key, before)
                .filter(|r| r.start() <= reached && r.end() > reached)
                .map(|r| r.end())
                .max()
            {
                reached = e;
            }
            if reached > at {
                at = reached;
                continue;
            }
            // An unwritten run, up to the next write that starts inside `key`.
            let stop = self
                .writes_to(key, before)
                .map(|r| r.start())
                .filter(|&s| s > at)
                .min()
                .map_or(end, |s| s.min(end));
            let range = ByteRange::new(at, stop - at).expect("a non-empty run inside the key");
            f(ClaimKey {
                memory: key.memory,
                range,
            });
            at = stop;
        }
    }
}
