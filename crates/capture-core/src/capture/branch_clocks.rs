//! `BranchClocks`: the branches of one window (rule 28) and the race check between them
//! (rule 29).
//!
//! The window's origin records on lane 0; each fork opens one more lane, whose work the
//! backend may run beside its parent's until it is joined. Happens-before is kept with a
//! vector clock per lane: a fork copies its parent's clock, a join merges the branch's
//! into the lane it joins, and each recorded operation ticks its own lane. An operation
//! recorded earlier on another lane is ordered before the current one exactly when the
//! current lane's clock has seen its tick; two unordered operations that use the same
//! bytes, one of them writing, race, and the second is refused before it is recorded.
//! While no branch is open every earlier operation is ordered before everything after, so
//! nothing is logged.
//!
//! The sealed graph keeps what the check needs (rule 27: a rule checked while recording
//! is checked again on every update): each stretch of the recording during which a
//! branch was open and a slot was used, every use in it with its lane, its tick and its
//! lane's clock ([`RaceRecord`]). A rebind of a buffer slot moves its uses to new bytes;
//! [`RaceRecord::check_rebind`] finds a use of another lane it is not ordered with that
//! now touches them, one of the two writing.

use std::sync::Arc;

use crate::branch_refusal::{BranchReason, MAX_WINDOW_LANES, RaceSide};
use crate::ids::StreamId;
use crate::memory::{Access, ClaimKey};
use crate::op::Op;
use crate::slot_table::SlotName;

/// A lane of a window's recording: the origin's own work is [`Lane::ORIGIN`], each fork
/// opens one more. A backend is handed the lane of every operation it records as the
/// `lane` argument of [`Backend::launch`](crate::Backend::launch), `run_work` and
/// `write`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lane(u32);

impl Lane {
    /// The window's origin.
    pub const ORIGIN: Lane = Lane(0);

    /// Lane `index` (0 the origin), below [`MAX_WINDOW_LANES`](crate::MAX_WINDOW_LANES):
    /// what a backend's own tests hand to its lane bookkeeping.
    pub fn nth(index: usize) -> Option<Lane> {
        (index < MAX_WINDOW_LANES).then_some(Lane(index as u32))
    }

    /// Its index, from 0 (the origin) in fork order; below
    /// [`MAX_WINDOW_LANES`](crate::MAX_WINDOW_LANES).
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl std::fmt::Display for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "lane#{}", self.0)
    }
}

#[derive(Debug)]
struct LaneState {
    stream: StreamId,
    open: bool,
    /// What this lane has seen of each lane's ticks, by lane index.
    clock: Vec<u32>,
}

/// One recorded use of bytes while a branch was open.
#[derive(Clone, Debug)]
struct Use {
    lane: u32,
    tick: u32,
    /// Its lane's clock when it was recorded: what of each other lane it follows.
    clock: Arc<[u32]>,
    key: ClaimKey,
    /// The slot it was given as, whose value a rebind changes.
    slot: Option<SlotName>,
    side: RaceSide,
}

impl Use {
    /// Whether `self`, recorded before `later`, is ordered before it.
    fn before(&self, later: &Use) -> bool {
        self.lane == later.lane
            || later.clock.get(self.lane as usize).copied().unwrap_or(0) >= self.tick
    }
}

/// A race found by [`BranchClocks::check`]: the earlier use, and the range both use.
#[derive(Debug)]
pub(crate) struct Race {
    pub(crate) first: RaceSide,
    pub(crate) key: ClaimKey,
}

/// The lanes of one window phase.
#[derive(Debug, Default)]
pub(crate) struct BranchClocks {
    current: Lane,
    /// Every lane opened so far, by index; empty until the first fork.
    lanes: Vec<LaneState>,
    open_branches: usize,
    log: Vec<Use>,
    /// The logs of the stretches closed so far that used a slot, for the sealed graph.
    sealed: Vec<Vec<Use>>,
}

impl BranchClocks {
    /// The lane the next recorded operation goes to.
    pub(crate) fn current(&self) -> Lane {
        self.current
    }

    /// The open lane `stream` records on: the origin's, or an unjoined branch's.
    pub(crate) fn lane_of(&self, stream: StreamId, origin: StreamId) -> Option<Lane> {
        if stream == origin {
            return Some(Lane::ORIGIN);
        }
        self.lanes
            .iter()
            .position(|l| l.open && l.stream == stream)
            .map(|i| Lane(i as u32))
    }

    /// The first branch still open, if any.
    pub(crate) fn first_open(&self) -> Option<StreamId> {
        self.lanes.iter().skip(1).find(|l| l.open).map(|l| l.stream)
    }

    /// Every branch opened so far, in fork order (each stream once).
    pub(crate) fn branches(&self) -> Vec<StreamId> {
        let mut out: Vec<StreamId> = Vec::new();
        for lane in self.lanes.iter().skip(1) {
            if !out.contains(&lane.stream) {
                out.push(lane.stream);
            }
        }
        out
    }

    /// Moves the recording to `lane`.
    pub(crate) fn enter(&mut self, lane: Lane) {
        self.current = lane;
    }

    /// Opens a lane for `branch`, forked off `parent`'s lane, in the window of `origin`.
    pub(crate) fn fork(
        &mut self,
        origin: StreamId,
        parent: StreamId,
        branch: StreamId,
    ) -> Result<(Lane, Lane), BranchReason> {
        let from = self
            .lane_of(parent, origin)
            .ok_or(BranchReason::ParentNotInWindow { origin })?;
        if branch == origin || self.lane_of(branch, origin).is_some() {
            return Err(BranchReason::AlreadyBranch { origin });
        }
        if self.lanes.is_empty() {
            self.lanes.push(LaneState {
                stream: origin,
                open: true,
                clock: vec![0],
            });
        }
        if self.lanes.len() >= MAX_WINDOW_LANES {
            return Err(BranchReason::TooManyLanes);
        }
        let to = Lane(self.lanes.len() as u32);
        let mut clock = self.lanes[from.index()].clock.clone();
        clock.resize(to.index() + 1, 0);
        self.lanes.push(LaneState {
            stream: branch,
            open: true,
            clock,
        });
        self.open_branches += 1;
        Ok((from, to))
    }

    /// Joins `lane` into `into`: everything recorded on `into` after this is ordered
    /// after everything `lane` recorded.
    pub(crate) fn join(&mut self, lane: Lane, into: Lane) -> Result<(), BranchReason> {
        match self.lanes.get(lane.index()) {
            Some(l) if l.open && lane != Lane::ORIGIN => {}
            _ => return Err(BranchReason::Joined),
        }
        if !self.lanes.get(into.index()).is_some_and(|l| l.open) {
            return Err(BranchReason::ParentJoined);
        }
        let seen = std::mem::take(&mut self.lanes[lane.index()].clock);
        let target = &mut self.lanes[into.index()].clock;
        if target.len() < seen.len() {
            target.resize(seen.len(), 0);
        }
        for (t, s) in target.iter_mut().zip(&seen) {
            *t = (*t).max(*s);
        }
        self.lanes[lane.index()].clock = seen;
        self.lanes[lane.index()].open = false;
        self.open_branches -= 1;
        if self.open_branches == 0 {
            // Every lane is joined into the origin: all that was logged is ordered
            // before whatever comes next. The graph keeps a stretch a rebind may change.
            if self.log.iter().any(|u| u.slot.is_some()) {
                self.sealed.push(std::mem::take(&mut self.log));
            } else {
                self.log.clear();
            }
        }
        if self.current == lane {
            self.current = into;
        }
        Ok(())
    }

    /// What the sealed graph keeps for its rebinds: the stretches logged while a
    /// branch was open that used a slot. Leaves the lanes empty of them.
    pub(crate) fn take_record(&mut self) -> RaceRecord {
        let mut segments = std::mem::take(&mut self.sealed);
        if self.log.iter().any(|u| u.slot.is_some()) {
            segments.push(std::mem::take(&mut self.log));
        }
        RaceRecord { segments }
    }

    /// Checks an operation on the current lane that uses `uses` (each with its slot,
    /// when it is one) against everything recorded on other lanes it is not ordered
    /// after (rule 29), and logs it when it passes. `side` names it; its access is set
    /// per use.
    pub(crate) fn check(
        &mut self,
        uses: impl Iterator<Item = (ClaimKey, Access, Option<SlotName>)> + Clone,
        stream: StreamId,
        op: Op,
        node: u64,
    ) -> Result<(), Box<(Race, RaceSide)>> {
        if self.open_branches == 0 {
            return Ok(());
        }
        let lane = self.current.index();
        let clock = &self.lanes[lane].clock;
        for (key, access, _) in uses.clone() {
            for e in &self.log {
                if e.lane as usize == lane
                    || clock.get(e.lane as usize).copied().unwrap_or(0) >= e.tick
                    || e.key.memory != key.memory
                    || !(e.side.access.writes() || access.writes())
                {
                    continue;
                }
                if let Some(range) = e.key.range.intersection(key.range) {
                    let side = RaceSide {
                        stream,
                        op,
                        node,
                        access,
                    };
                    let key = ClaimKey {
                        memory: key.memory,
                        range,
                    };
                    return Err(Box::new((
                        Race {
                            first: e.side.clone(),
                            key,
                        },
                        side,
                    )));
                }
            }
        }
        let state = &mut self.lanes[lane];
        state.clock[lane] += 1;
        let tick = state.clock[lane];
        let clock: Arc<[u32]> = state.clock.as_slice().into();
        for (key, access, slot) in uses {
            self.log.push(Use {
                lane: lane as u32,
                tick,
                clock: Arc::clone(&clock),
                key,
                slot,
                side: RaceSide {
                    stream,
                    op: op.clone(),
                    node,
                    access,
                },
            });
        }
        Ok(())
    }
}

/// What a sealed graph keeps of its window's lanes, so that every rebind is checked
/// against rule 29 as the recording was (rule 27). Empty for a window that forked no
/// branch, or used no slot while one was open: then no rebind can make a race.
#[derive(Clone, Debug, Default)]
pub(crate) struct RaceRecord {
    /// Each stretch of the recording with a branch open, its uses in recording order.
    segments: Vec<Vec<Use>>,
}

impl RaceRecord {
    /// The race a rebind of buffer slot `slot` to `to` would make: a use of the slot and
    /// a use of another lane it is not ordered with, over common bytes, one of them
    /// writing; `value` gives every other slot's current bytes. The earlier use in the
    /// recording first, then the later, and the bytes both would use.
    pub(crate) fn check_rebind(
        &self,
        slot: SlotName,
        to: ClaimKey,
        value: impl Fn(SlotName) -> Option<ClaimKey>,
    ) -> Option<(RaceSide, RaceSide, ClaimKey)> {
        let key_of = |u: &Use| match u.slot {
            Some(s) if s == slot => to,
            Some(s) => value(s).unwrap_or(u.key),
            None => u.key,
        };
        for uses in &self.segments {
            for (i, first) in uses.iter().enumerate() {
                for second in &uses[i + 1..] {
                    if first.slot != Some(slot) && second.slot != Some(slot) {
                        continue;
                    }
                    if first.side.node == second.side.node
                        || first.before(second)
                        || !(first.side.access.writes() || second.side.access.writes())
                    {
                        continue;
                    }
                    let (a, b) = (key_of(first), key_of(second));
                    if a.memory != b.memory {
                        continue;
                    }
                    if let Some(range) = a.range.intersection(b.range) {
                        let key = ClaimKey {
                            memory: a.memory,
                            range,
                        };
                        return Some((first.side.clone(), second.side.clone(), key));
                    }
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::MemoryId;
    use crate::range::ByteRange;

    fn key(m: u64, start: u64, end: u64) -> ClaimKey {
        ClaimKey {
            memory: MemoryId::new(m),
            range: ByteRange::from_bounds(start, end),
        }
    }

    fn op(lanes: &mut BranchClocks, lane: Lane, uses: &[(ClaimKey, Access)]) -> bool {
        lanes.enter(lane);
        lanes
            .check(
                uses.iter().map(|&(k, a)| (k, a, None)),
                StreamId::new(0),
                Op::Call("k"),
                0,
            )
            .is_ok()
    }

    #[test]
    fn a_join_orders_what_follows_and_siblings_stay_unordered() {
        let (o, a, b) = (StreamId::new(0), StreamId::new(1), StreamId::new(2));
        let mut lanes = BranchClocks::default();
        let (_, la) = lanes.fork(o, o, a).unwrap();
        let (_, lb) = lanes.fork(o, o, b).unwrap();
        assert!(op(&mut lanes, la, &[(key(1, 0, 16), Access::Write)]));
        // A sibling reading the bytes a writes: a race.
        assert!(!op(&mut lanes, lb, &[(key(1, 8, 12), Access::Read)]));
        // Other bytes, or reads on both sides: none.
        assert!(op(&mut lanes, lb, &[(key(1, 16, 32), Access::Write)]));
        assert!(op(&mut lanes, lb, &[(key(2, 0, 4), Access::Read)]));
        assert!(op(&mut lanes, la, &[(key(2, 0, 4), Access::Read)]));
        // The origin, not joined with a: a race too.
        assert!(!op(
            &mut lanes,
            Lane::ORIGIN,
            &[(key(1, 0, 4), Access::Read)]
        ));
        lanes.join(la, Lane::ORIGIN).unwrap();
        assert!(op(
            &mut lanes,
            Lane::ORIGIN,
            &[(key(1, 0, 4), Access::Read)]
        ));
        // b never saw a's join.
        assert!(!op(&mut lanes, lb, &[(key(1, 0, 4), Access::ReadWrite)]));
        lanes.join(lb, la).unwrap_err();
        lanes.join(lb, Lane::ORIGIN).unwrap();
        assert_eq!(lanes.open_branches, 0);
        assert!(lanes.log.is_empty());
    }

    #[test]
    fn a_nested_branch_sees_what_its_parent_did_before_the_fork_only() {
        let (o, a, c) = (StreamId::new(0), StreamId::new(1), StreamId::new(2));
        let mut lanes = BranchClocks::default();
        let (_, la) = lanes.fork(o, o, a).unwrap();
        assert!(op(&mut lanes, la, &[(key(1, 0, 4), Access::Write)]));
        let (from, lc) = lanes.fork(o, a, c).unwrap();
        assert_eq!(from, la);
        assert!(op(&mut lanes, lc, &[(key(1, 0, 4), Access::Read)]));
        assert!(op(&mut lanes, la, &[(key(3, 0, 4), Access::Write)]));
        assert!(!op(&mut lanes, lc, &[(key(3, 0, 4), Access::Read)]));
        lanes.join(lc, la).unwrap();
        assert!(op(&mut lanes, la, &[(key(1, 0, 4), Access::Write)]));
        assert_eq!(lanes.first_open(), Some(a));
        assert_eq!(lanes.branches(), vec![a, c]);
    }
}
