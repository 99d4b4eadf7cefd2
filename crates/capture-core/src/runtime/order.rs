//! Cross-stream order (rule 18) and what each pooled stream wrote since its last good
//! fence (rule 15), device-wide so any thread that waits on a stream's fence can settle
//! or taint that stream's work.
//!
//! Every pooled stream counts its fences: its *epoch* is the generation of work since
//! the last fence taken of it ([`Tracks::seal`]), and every tracked operation it
//! enqueues is stamped with it. Per allocation, [`Tracks`] keeps the last stream that
//! wrote it and the streams that read it since, each with the epoch of that use, so
//! the same use again before the next fence changes nothing (the launch path's
//! `UseMemo` skips it). Before a stream touches an allocation it
//! follows the other streams' uses that it must come after: a write after the last
//! write and every read since, a read after the last write. A use is already followed
//! when the host saw a good fence covering it (`done`) or when the stream enqueued a
//! device-side wait for a fence covering it (`after`). Order is kept per allocation,
//! not per byte range: two streams writing disjoint halves of one buffer are ordered
//! too, which costs a wait, never correctness.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::use_memo::UseMemo;
use crate::id_hash::IdMap;
use crate::ids::MemoryId;
use crate::lock_order::{Level, Ordered};
use crate::memory::ClaimKey;
use crate::range::ByteRange;

/// Past this many ranges of one allocation noted on a stream, the settled ones are
/// dropped (a buffer written row by row, as a KV cache is).
const RANGES_COMPACT: usize = 32;

/// One pooled stream's counters.
#[derive(Debug, Default)]
struct Lane {
    /// The generation the stream's next tracked operation is stamped with: a fence
    /// taken of the stream seals it ([`Tracks::seal`]), so every use stamped with it
    /// was enqueued before that fence, and later uses get the next one.
    epoch: u64,
    /// Every operation up to this epoch is known complete (a good fence covered it).
    done: u64,
    /// `after[q]`: this stream's queue already waits, on the device, for stream `q`'s
    /// operations up to that epoch.
    after: Vec<u64>,
    /// Ranges written here, per allocation, each with the epoch of its latest write:
    /// the ones past `done` are the ranges written since the last good fence (rule 15
    /// claims only those). Settled entries stay until the range is written again (its
    /// epoch moves, nothing allocates), the allocation is forgotten, or its list is
    /// compacted: the lists hold only live allocations' ranges, however long the stream
    /// goes unread.
    written: IdMap<MemoryId, Vec<(ByteRange, u64)>>,
}

/// The uses of one allocation the next user on another stream may have to follow.
#[derive(Debug, Default)]
struct Uses {
    writer: Option<(usize, u64)>,
    /// One entry per pooled stream that read it since the last write, with the epoch of
    /// its latest read.
    readers: Vec<(usize, u64)>,
}

/// The device's [`Tracks`] under their lock, owned with the version every lock bumps:
/// a pooled stream's uses memo is good while it reads what that stream's own last lock
/// left (`use_memo.rs`).
#[derive(Debug)]
pub(crate) struct Order {
    tracks: Mutex<Tracks>,
    version: AtomicU64,
}

impl Order {
    /// Tracks for `streams` pooled streams.
    pub(crate) fn new(streams: usize) -> Self {
        Self {
            tracks: Mutex::new(Tracks::new(streams)),
            version: AtomicU64::new(0),
        }
    }

    /// The tracks, locked: whatever the caller does with them, every pooled stream's
    /// uses memo is stale after it.
    pub(crate) fn lock(&self) -> Ordered<'_, Tracks> {
        let order = Ordered::lock(&self.tracks, Level::Order);
        self.version.fetch_add(1, Ordering::AcqRel);
        order
    }

    /// The tracks, locked for a launch's ordering or stamps on the pooled stream that
    /// owns `memo`: the memo stays good when this stream's own last lock was the last
    /// one (`UseMemo::carry`).
    pub(crate) fn lock_for(&self, memo: &mut UseMemo) -> Ordered<'_, Tracks> {
        let order = Ordered::lock(&self.tracks, Level::Order);
        memo.carry(self.version.fetch_add(1, Ordering::AcqRel));
        order
    }

    /// The version the last lock left, for a memo's check.
    pub(crate) fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }
}

/// The device-wide order tracks.
#[derive(Debug)]
pub(crate) struct Tracks {
    lanes: Vec<Lane>,
    uses: IdMap<MemoryId, Uses>,
}

impl Tracks {
    pub(crate) fn new(streams: usize) -> Self {
        Self {
            lanes: (0..streams)
                .map(|_| Lane {
                    // Generation 0 is the one nothing was stamped with: `done` and
                    // `after` start there.
                    epoch: 1,
                    after: vec![0; streams],
                    ..Lane::default()
                })
                .collect(),
            uses: IdMap::default(),
        }
    }

    /// Seals pooled stream `q`'s generation for a fence about to be taken of it (or a
    /// wait for everything it enqueued): everything it enqueued so far is stamped at or
    /// below the epoch returned, and what it enqueues from now on is stamped above it.
    pub(crate) fn seal(&mut self, q: usize) -> u64 {
        let lane = &mut self.lanes[q];
        let epoch = lane.epoch;
        lane.epoch += 1;
        epoch
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

    /// The other streams whose work `q` waits for on the device that no good fence has
    /// covered yet: an asynchronous error a fence of `q` reports may be theirs (rule
    /// 15), met through the wait.
    pub(crate) fn followed_unconfirmed(&self, q: usize, out: &mut Vec<usize>) {
        let lane = &self.lanes[q];
        for (p, &upto) in lane.after.iter().enumerate() {
            if p != q && upto > self.lanes[p].done && !out.contains(&p) {
                out.push(p);
            }
        }
    }

    /// `on` now waits on the device for stream `q`'s work up to `epoch`.
    pub(crate) fn ordered(&mut self, on: usize, q: usize, epoch: u64) {
        let after = &mut self.lanes[on].after[q];
        *after = (*after).max(epoch);
    }

    /// `on` enqueued one operation reading `reads` and writing `writes`, stamped with its
    /// current generation.
    pub(crate) fn used(
        &mut self,
        on: usize,
        reads: impl IntoIterator<Item = MemoryId>,
        writes: impl IntoIterator<Item = MemoryId>,
    ) {
        let epoch = self.lanes[on].epoch;
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

    /// A fence of `q` stamped `epoch` was waited for on the host and reported no error,
    /// wherever it was met (a read or sync of `q`, another stream's wait, a drop-queue
    /// flush, `begin`): what `q` wrote up to that epoch is settled.
    pub(crate) fn good(&mut self, q: usize, epoch: u64) {
        let lane = &mut self.lanes[q];
        lane.done = lane.done.max(epoch);
    }

    /// Everything `q` enqueued so far is known complete, with no error: its ranges
    /// written since its last good fence are settled.
    pub(crate) fn all_good(&mut self, q: usize) {
        let epoch = self.seal(q);
        self.good(q, epoch);
    }

    /// Notes ranges written on `q` by its latest operation (at its current epoch). A
    /// range written again only moves its epoch.
    pub(crate) fn wrote(&mut self, q: usize, keys: &[ClaimKey]) {
        let lane = &mut self.lanes[q];
        let (epoch, done) = (lane.epoch, lane.done);
        for key in keys {
            let ranges = lane.written.entry(key.memory).or_default();
            match ranges.iter_mut().find(|(r, _)| *r == key.range) {
                Some(entry) => entry.1 = epoch,
                None => {
                    if ranges.len() >= RANGES_COMPACT {
                        ranges.retain(|&(_, written)| written > done);
                    }
                    ranges.push((key.range, epoch));
                }
            }
        }
    }

    /// Takes the ranges written on `q` since its last good fence: an asynchronous error
    /// claims them all (rule 15).
    pub(crate) fn take_since_fence(&mut self, q: usize, into: &mut Vec<ClaimKey>) {
        let lane = &mut self.lanes[q];
        let done = lane.done;
        for (&memory, ranges) in &mut lane.written {
            for &(range, _) in ranges.iter().filter(|&&(_, written)| written > done) {
                into.push(ClaimKey { memory, range });
            }
            ranges.retain(|&(_, written)| written <= done);
        }
    }

    /// Forgets an allocation its pool took back: its order, and what any stream noted
    /// writing to it (there is nothing left to claim).
    pub(crate) fn forget(&mut self, id: MemoryId) {
        self.uses.remove(&id);
        for lane in &mut self.lanes {
            lane.written.remove(&id);
        }
    }

    /// How many ranges `q` wrote since its last good fence.
    #[cfg(test)]
    pub(crate) fn since_fence_len(&self, q: usize) -> usize {
        let lane = &self.lanes[q];
        lane.written
            .values()
            .flatten()
            .filter(|&&(_, written)| written > lane.done)
            .count()
    }

    /// How many ranges `q` holds noted, settled or not (what the lists cost).
    #[cfg(test)]
    pub(crate) fn noted_len(&self, q: usize) -> usize {
        self.lanes[q].written.values().map(Vec::len).sum()
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
    fn a_stream_waiting_on_unconfirmed_work_names_it() {
        let mut t = Tracks::new(3);
        let mut out = Vec::new();
        t.used(0, [], [id(1)]);
        let sealed = t.seal(0);
        t.ordered(1, 0, sealed);
        t.followed_unconfirmed(1, &mut out);
        assert_eq!(
            out,
            vec![0],
            "a device-side wait on work no fence confirmed"
        );
        t.good(0, sealed);
        out.clear();
        t.followed_unconfirmed(1, &mut out);
        assert!(out.is_empty(), "a good fence confirmed it");
        t.followed_unconfirmed(2, &mut out);
        assert!(out.is_empty(), "stream 2 waited for nobody");
    }

    #[test]
    fn an_error_takes_every_range_since_the_last_good_fence() {
        let mut t = Tracks::new(1);
        let key = |n| ClaimKey {
            memory: id(n),
            range: crate::range::ByteRange::from_bounds(0, 4),
        };
        t.used(0, [], [id(1), id(2)]);
        t.wrote(0, &[key(1), key(2)]);
        let mut out = Vec::new();
        t.take_since_fence(0, &mut out);
        out.sort_unstable();
        assert_eq!(out, vec![key(1), key(2)]);
        t.used(0, [], [id(3)]);
        t.wrote(0, &[key(3)]);
        t.all_good(0);
        out.clear();
        t.take_since_fence(0, &mut out);
        assert!(out.is_empty());
    }

    fn key(n: u64) -> ClaimKey {
        ClaimKey {
            memory: id(n),
            range: crate::range::ByteRange::from_bounds(0, 4),
        }
    }

    #[test]
    fn a_good_fence_settles_what_it_covers_and_nothing_after() {
        let mut t = Tracks::new(2);
        t.used(0, [], [id(1)]);
        t.wrote(0, &[key(1)]);
        // A fence taken after the first write, met anywhere.
        let first = t.seal(0);
        t.used(0, [], [id(2)]);
        t.wrote(0, &[key(2)]);
        t.good(0, first);
        let mut out = Vec::new();
        t.take_since_fence(0, &mut out);
        assert_eq!(out, vec![key(2)]);
    }

    #[test]
    fn a_range_written_again_stays_until_a_fence_covers_its_last_write() {
        let mut t = Tracks::new(1);
        t.used(0, [], [id(1)]);
        t.wrote(0, &[key(1)]);
        let first = t.seal(0);
        t.used(0, [], [id(1)]);
        t.wrote(0, &[key(1)]);
        t.good(0, first);
        assert_eq!(t.since_fence_len(0), 1, "rewritten after the first fence");
        let second = t.seal(0);
        t.good(0, second);
        assert_eq!(t.since_fence_len(0), 0);
    }

    #[test]
    fn a_use_repeated_before_the_next_fence_is_stamped_alike_and_one_after_it_is_not() {
        let mut t = Tracks::new(2);
        let mut deps = Vec::new();
        t.used(0, [], [id(1)]);
        t.used(0, [id(2)], [id(1)]);
        t.used(0, [id(2)], [id(1)]);
        t.deps(1, [id(1)], [id(2)], &mut deps);
        assert_eq!(deps, vec![(0, 1)], "one generation: every use stamped 1");
        let sealed = t.seal(0);
        assert_eq!(sealed, 1);
        t.used(0, [], [id(1)]);
        t.deps(1, [id(1)], [], &mut deps);
        assert_eq!(
            deps,
            vec![(0, 2)],
            "a use after the fence needs a later one"
        );
        t.ordered(1, 0, sealed);
        t.deps(1, [id(1)], [], &mut deps);
        assert_eq!(
            deps,
            vec![(0, 2)],
            "a wait for the sealed fence does not cover it"
        );
        t.all_good(0);
        t.deps(1, [id(1)], [id(2)], &mut deps);
        assert!(deps.is_empty());
    }

    #[test]
    fn a_stream_never_read_holds_only_what_is_live_and_unsettled() {
        let mut t = Tracks::new(2);
        // A producer writes a fresh temporary per step and frees the last but one.
        for n in 0..10_000u64 {
            t.used(1, [], [id(n)]);
            t.wrote(1, &[key(n)]);
            if n > 0 {
                t.forget(id(n - 1));
            }
        }
        assert_eq!(t.since_fence_len(1), 1);
        assert_eq!(t.noted_len(1), 1);
        // Another stream's host wait on a fence of it settles the rest.
        let epoch = t.seal(1);
        t.good(1, epoch);
        assert_eq!(t.since_fence_len(1), 0);
    }

    #[test]
    fn one_buffer_written_range_by_range_keeps_a_bounded_list() {
        let mut t = Tracks::new(1);
        for row in 0..1_000u64 {
            t.used(0, [], [id(1)]);
            t.wrote(
                0,
                &[ClaimKey {
                    memory: id(1),
                    range: crate::range::ByteRange::from_bounds(row * 4, row * 4 + 4),
                }],
            );
            let epoch = t.seal(0);
            t.good(0, epoch);
        }
        assert!(t.noted_len(0) <= RANGES_COMPACT, "{}", t.noted_len(0));
        assert_eq!(t.since_fence_len(0), 0);
    }
}
