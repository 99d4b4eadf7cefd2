//! `LaneOrder`: where a window's secondary needs a barrier once the window forked
//! branches (rule 28). Until the first fork every operation is followed by a full
//! barrier; from then on, an operation gets one before it only when something recorded
//! since the last barrier is on a lane it follows (its own lane's earlier work, its
//! parent's work before the fork, a branch joined into it). Operations of unjoined
//! branches recorded between two barriers may run at once; the core has refused any two
//! of them that touch the same bytes, one writing (rule 29).
//!
//! Happens-before is a vector clock per lane, as the core keeps it: a fork copies the
//! parent's clock, a join merges the branch's into the lane it joins, an operation ticks
//! its own lane.

use capture_core::backend::Lane;

#[derive(Debug, Default)]
pub(crate) struct LaneOrder {
    /// Whether the window forked: barriers go before operations only from then on.
    active: bool,
    current: usize,
    /// Per lane, what it has seen of each lane's ticks.
    clocks: Vec<Vec<u32>>,
    /// The operations recorded since the last barrier: lane and tick.
    since: Vec<(usize, u32)>,
    /// Barriers recorded since the first fork.
    taken: u32,
}

impl LaneOrder {
    /// Whether operations carry their own barrier after them (no fork yet).
    pub(crate) fn trailing(&self) -> bool {
        !self.active
    }

    /// Opens lane `to` off `from`.
    pub(crate) fn fork(&mut self, from: Lane, to: Lane) {
        let (from, to) = (from.index(), to.index());
        self.active = true;
        let width = from.max(to) + 1;
        if self.clocks.len() < width {
            self.clocks.resize_with(width, Vec::new);
        }
        let mut clock = self.clocks[from].clone();
        clock.resize(width.max(clock.len()), 0);
        self.clocks[to] = clock;
    }

    /// Joins lane `from` into `into`.
    pub(crate) fn join(&mut self, from: Lane, into: Lane) {
        let (from, into) = (from.index(), into.index());
        let width = from.max(into) + 1;
        if self.clocks.len() < width {
            self.clocks.resize_with(width, Vec::new);
        }
        let seen = self.clocks[from].clone();
        let target = &mut self.clocks[into];
        if target.len() < seen.len() {
            target.resize(seen.len(), 0);
        }
        for (t, s) in target.iter_mut().zip(&seen) {
            *t = (*t).max(*s);
        }
    }

    /// The next operation is on `lane`.
    pub(crate) fn enter(&mut self, lane: Lane) {
        self.current = lane.index();
        if self.clocks.len() <= self.current {
            self.clocks.resize_with(self.current + 1, Vec::new);
        }
    }

    /// Whether a barrier must come before the next operation.
    pub(crate) fn needs_barrier(&self) -> bool {
        let Some(clock) = self.clocks.get(self.current) else {
            return !self.since.is_empty();
        };
        self.since
            .iter()
            .any(|&(lane, tick)| clock.get(lane).copied().unwrap_or(0) >= tick)
    }

    /// Whether anything was recorded since the last barrier.
    pub(crate) fn pending(&self) -> bool {
        !self.since.is_empty()
    }

    /// A barrier was recorded: everything before it is ordered before what follows.
    pub(crate) fn barrier(&mut self) {
        self.since.clear();
        if self.active {
            self.taken += 1;
        }
    }

    /// Barriers recorded since the first fork.
    #[cfg(test)]
    pub(crate) fn taken(&self) -> u32 {
        self.taken
    }

    /// An operation was recorded on the current lane.
    pub(crate) fn recorded(&mut self) {
        if !self.active {
            return;
        }
        let lane = self.current;
        let clock = &mut self.clocks[lane];
        if clock.len() <= lane {
            clock.resize(lane + 1, 0);
        }
        clock[lane] += 1;
        self.since.push((lane, clock[lane]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lanes() -> [Lane; 3] {
        [0, 1, 2].map(|i| Lane::nth(i).expect("a lane"))
    }

    #[test]
    fn siblings_share_a_barrier_interval_and_a_join_orders_what_follows() {
        let [o, a, b] = lanes();
        let mut order = LaneOrder::default();
        assert!(order.trailing());
        order.fork(o, a);
        order.fork(o, b);
        assert!(!order.trailing());
        order.enter(a);
        assert!(!order.needs_barrier());
        order.recorded();
        // b does not follow a: no barrier between them.
        order.enter(b);
        assert!(!order.needs_barrier());
        order.recorded();
        // a's second operation follows its first.
        order.enter(a);
        assert!(order.needs_barrier());
        order.barrier();
        order.recorded();
        // The origin did nothing since the fork and saw nothing of a: free to go.
        order.enter(o);
        assert!(!order.needs_barrier());
        order.recorded();
        // After a's join the origin follows a's last operation.
        order.join(a, o);
        assert!(order.needs_barrier());
        order.barrier();
        order.recorded();
        assert!(order.pending());
    }
}
