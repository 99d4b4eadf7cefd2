//! Cross-stream order (rule 18) and what each pooled stream wrote since its last good
//! fence (rule 15), device-wide so any thread that waits on a stream's fence can settle
//! or taint that stream's work.
//!
//! Every pooled stream counts the tracked operations it enqueued (its *epoch*). Per
//! allocation, [`Tracks`] keeps the last stream that wrote it and the streams that read
//! it since, each with the epoch of that use. Before a stream touches an allocation it
//! follows the other streams' uses that it must come after: a write after the last
//! write and every read since, a read after the last write. A use is already followed
//! when the host saw a good fence covering it (`done`) or when the stream enqueued a
//! device-side wait for a fence covering it (`after`). Order is kept per allocation,
//! not per byte range: two streams writing disjoint halves of one buffer are ordered
//! too, which costs a wait, never correctness.

use std::collections::HashMap;

use crate::ids::MemoryId;
use crate::memory::ClaimKey;

/// Past this many noted ranges, [`Tracks::wrote`] deduplicates a stream's list.
const SINCE_FENCE_COMPACT: usize = 1024;

/// One pooled stream's counters.
#[derive(Debug, Default)]
struct Lane {
    /// Tracked operations enqueued so far.
    epoch: u64,
    /// Every operation up to this epoch is known complete (a good fence covered it).
    done: u64,
    /// `after[q]`: this stream's queue already waits, on the device, for stream `q`'s
    /// operations up to that epoch.
    after: Vec<u64>,
    /// Ranges written here since the last good fence that covered everything.
    since_fence: Vec<ClaimKey>,
}

/// The uses of one allocation the next user on another stream may have to follow.
#[derive(Debug, Default)]
struct Uses {
    writer: Option<(usize, u64)>,
    /// One entry per pooled stream that read it since the last write, with the epoch of
    /// its latest read.
    readers: Vec<(usize, u64)>,
}

/// The device-wide order tracks.
#[derive(Debug)]
pub(crate) struct Tracks {
    lanes: Vec<Lane>,
    uses: HashMap<MemoryId, Uses>,
}

impl Tracks {
    pub(crate) fn new(streams: usize) -> Self {
        Self {
            lanes: (0..streams)
                .map(|_| Lane {
                    after: vec![0; streams],
                    ..Lane::default()
                })
                .collect(),
            uses: HashMap::new(),
        }
    }

    /// Pooled stream `q`'s epoch: everything it enqueued so far is at or below it.
    pub(crate) fn epoch(&self, q: usize) -> u64 {
        self.lanes[q].epoch
    }

    fn followed(&self, on: usize, q: usize, epoch: u64) -> bool {
        q == on || self.lanes[q].done >= epoch || self.lanes[on].after[q] >= epoch
    }

    /// The other pooled streams `on` must follow before it reads `reads` and writes
    /// `writes`, each with the epoch of the latest use to follow, in stream order.
    pub(crate) fn deps(
        &self,
        on: usize,
        reads: impl IntoIterator<Item = MemoryId>,
        writes: impl IntoIterator<Item = MemoryId>,
        out: &mut Vec<(usize, u64)>,
    ) {
        out.clear();
        let need = |q: usize, epoch: u64, out: &mut Vec<(usize, u64)>| {
            if self.followed(on, q, epoch) {
                return;
            }
            match out.iter_mut().find(|(s, _)| *s == q) {
                Some(entry) => entry.1 = entry.1.max(epoch),
                None => out.push((q, epoch)),
            }
        };
        for id in reads {
            if let Some((q, epoch)) = self.uses.get(&id).and_then(|u| u.writer) {
                need(q, epoch, out);
            }
        }
        for id in writes {
            if let Some(uses) = self.uses.get(&id) {
                if let Some((q, epoch)) = uses.writer {
                    need(q, epoch, out);
                }
                for &(q, epoch) in &uses.readers {
                    need(q, epoch, out);
                }
            }
        }
        out.sort_unstable();
    }

    /// `on` now waits on the device for stream `q`'s work up to `epoch`.
    pub(crate) fn ordered(&mut self, on: usize, q: usize, epoch: u64) {
        let after = &mut self.lanes[on].after[q];
        *after = (*after).max(epoch);
    }

    /// `on` enqueued one operation reading `reads` and writing `writes`.
    pub(crate) fn used(
        &mut self,
        on: usize,
        reads: impl IntoIterator<Item = MemoryId>,
        writes: impl IntoIterator<Item = MemoryId>,
    ) {
        let lane = &mut self.lanes[on];
        lane.epoch += 1;
        let epoch = lane.epoch;
        for id in writes {
            let uses = self.uses.entry(id).or_default();
            uses.writer = Some((on, epoch));
            uses.readers.clear();
        }
        for id in reads {
            let uses = self.uses.entry(id).or_default();
            match uses.readers.iter_mut().find(|(s, _)| *s == on) {
                Some(entry) => entry.1 = epoch,
                None => uses.readers.push((on, epoch)),
            }
        }
    }

    /// A fence of `q` stamped `epoch` was waited for on the host and reported no error.
    pub(crate) fn good(&mut self, q: usize, epoch: u64) {
        let lane = &mut self.lanes[q];
        lane.done = lane.done.max(epoch);
    }

    /// Everything `q` enqueued so far is known complete, with no error: its ranges
    /// written since its last good fence are settled.
    pub(crate) fn all_good(&mut self, q: usize) {
        let lane = &mut self.lanes[q];
        lane.done = lane.epoch;
        lane.since_fence.clear();
    }

    /// Notes ranges written on `q` since its last good fence. Writes repeat over a
    /// working set, so a long list is compacted in place rather than grown.
    pub(crate) fn wrote(&mut self, q: usize, keys: &[ClaimKey]) {
        let since = &mut self.lanes[q].since_fence;
        since.extend_from_slice(keys);
        if since.len() > SINCE_FENCE_COMPACT {
            since.sort_unstable();
            since.dedup();
        }
    }

    /// Takes the ranges written on `q` since its last good fence: an asynchronous error
    /// claims them all (rule 15).
    pub(crate) fn take_since_fence(&mut self, q: usize, into: &mut Vec<ClaimKey>) {
        into.append(&mut self.lanes[q].since_fence);
    }

    /// Forgets an allocation its pool took back.
    pub(crate) fn forget(&mut self, id: MemoryId) {
        self.uses.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u64) -> MemoryId {
        MemoryId::new(n)
    }

    #[test]
    fn a_read_follows_the_last_writer_on_another_stream_only() {
        let mut t = Tracks::new(2);
        let mut deps = Vec::new();
        t.used(0, [], [id(1)]);
        t.deps(0, [id(1)], [], &mut deps);
        assert!(deps.is_empty(), "the writer's own stream is in order");
        t.deps(1, [id(1)], [], &mut deps);
        assert_eq!(deps, vec![(0, 1)]);
        t.ordered(1, 0, 1);
        t.deps(1, [id(1)], [], &mut deps);
        assert!(deps.is_empty(), "a device-side wait covers it");
    }

    #[test]
    fn a_write_follows_every_reader_since_the_last_write() {
        let mut t = Tracks::new(3);
        let mut deps = Vec::new();
        t.used(0, [], [id(1)]);
        t.good(0, 1);
        t.used(1, [id(1)], []);
        t.used(2, [id(1)], []);
        t.deps(0, [], [id(1)], &mut deps);
        assert_eq!(deps, vec![(1, 1), (2, 1)]);
        t.deps(0, [id(1)], [], &mut deps);
        assert!(deps.is_empty(), "the write was seen complete");
    }

    #[test]
    fn an_error_takes_every_range_since_the_last_good_fence() {
        let mut t = Tracks::new(1);
        let key = |n| ClaimKey {
            memory: id(n),
            range: crate::range::ByteRange::from_bounds(0, 4),
        };
        t.wrote(0, &[key(1), key(2)]);
        let mut out = Vec::new();
        t.take_since_fence(0, &mut out);
        assert_eq!(out, vec![key(1), key(2)]);
        t.wrote(0, &[key(3)]);
        t.all_good(0);
        out.clear();
        t.take_since_fence(0, &mut out);
        assert!(out.is_empty());
    }
}
