//! The reference model of a window's branches (rules 28 and 29): which streams it
//! forked, which are still unjoined, and, while it records, the order its recorded
//! operations are in, as a graph of happens-before edges.
//!
//! The device keeps a vector clock per lane; the model keeps the graph itself (each
//! recorded use, fork and join a node, with an edge from what it follows) and asks
//! whether one node reaches another, so the two agree only when both are right.

use std::sync::atomic::{AtomicU64, Ordering};

use super::span::Span;

/// Phases, numbered program-wide (across threads too): a token of one is stale in any
/// other.
static PHASES: AtomicU64 = AtomicU64::new(0);

/// One lane of a window: the origin's (lane 0) or a branch's.
#[derive(Clone, Debug)]
struct Lane {
    stream: u8,
    /// The lane it was forked off (lane 0 names itself).
    parent: usize,
    open: bool,
    /// The last node on the lane, once something happened on it.
    last: Option<usize>,
}

/// A recorded operation, fork or join: what it follows, and the bytes it uses.
#[derive(Clone, Debug)]
struct Node {
    after: Vec<usize>,
    uses: Vec<(Span, bool)>,
}

/// Why a fork or join the model predicts is refused, as
/// `capture_core::BranchReason` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    SamePooled,
    HasWindow,
    Lent,
    AlreadyBranch,
    Stale,
    ParentJoined,
}

/// The branches of one window phase (a prepare, or a begin, starts a new one).
#[derive(Clone, Debug)]
pub(crate) struct Forks {
    /// Which phase this is, program-wide, for the tokens forked in it.
    pub(crate) phase: u64,
    lanes: Vec<Lane>,
    nodes: Vec<Node>,
    /// Every stream forked in the window (its entry lives until the window ends), and
    /// the pooled stream it belongs to.
    pub(crate) entries: Vec<(u8, usize)>,
    /// The node of each recorded operation, in recording order (the window's `recs`).
    recs: Vec<usize>,
}

impl Forks {
    pub(crate) fn new(origin: u8) -> Self {
        Self {
            phase: PHASES.fetch_add(1, Ordering::Relaxed),
            lanes: vec![Lane {
                stream: origin,
                parent: 0,
                open: true,
                last: None,
            }],
            nodes: Vec::new(),
            entries: Vec::new(),
            recs: Vec::new(),
        }
    }

    /// A new phase of the same window: the entries stay, the lanes start again.
    pub(crate) fn next_phase(&mut self) {
        let origin = self.lanes[0].stream;
        let entries = std::mem::take(&mut self.entries);
        *self = Forks::new(origin);
        self.entries = entries;
    }

    /// The open lane `stream` records on.
    pub(crate) fn lane_of(&self, stream: u8) -> Option<usize> {
        self.lanes.iter().position(|l| l.open && l.stream == stream)
    }

    /// Whether `stream` was forked into this window (joined or not).
    pub(crate) fn is_branch(&self, stream: u8) -> bool {
        self.entries.iter().any(|&(s, _)| s == stream)
    }

    /// Whether pooled stream `home` is lent to this window by a stream other than
    /// `except`.
    pub(crate) fn lends(&self, home: usize, except: Option<u8>) -> bool {
        self.entries
            .iter()
            .any(|&(s, h)| h == home && Some(s) != except)
    }

    /// The first unjoined branch.
    pub(crate) fn unjoined(&self) -> Option<u8> {
        self.lanes.iter().skip(1).find(|l| l.open).map(|l| l.stream)
    }

    /// Forks `branch` (on pooled stream `home`) off `parent`'s open lane; the new lane.
    pub(crate) fn fork(&mut self, parent: u8, branch: u8, home: usize) -> Result<usize, Refusal> {
        let from = self.lane_of(parent).ok_or(Refusal::Stale)?;
        if self.lane_of(branch).is_some() {
            return Err(Refusal::AlreadyBranch);
        }
        let node = self.node(self.lanes[from].last.into_iter().collect(), Vec::new());
        self.lanes[from].last = Some(node);
        self.lanes.push(Lane {
            stream: branch,
            parent: from,
            open: true,
            last: Some(node),
        });
        if !self.is_branch(branch) {
            self.entries.push((branch, home));
        }
        Ok(self.lanes.len() - 1)
    }

    /// Joins `lane` into the open lane of the stream it was forked from.
    pub(crate) fn join(&mut self, lane: usize) -> Result<(), Refusal> {
        let parent = self.lanes[self.lanes[lane].parent].stream;
        let into = self.lane_of(parent).ok_or(Refusal::ParentJoined)?;
        if !self.lanes[lane].open {
            return Err(Refusal::Stale);
        }
        let after = self.lanes[into]
            .last
            .into_iter()
            .chain(self.lanes[lane].last)
            .collect();
        let node = self.node(after, Vec::new());
        self.lanes[into].last = Some(node);
        self.lanes[lane].open = false;
        Ok(())
    }

    /// The lane a branch's token names, when it is of this phase.
    pub(crate) fn token_lane(&self, phase: u64, lane: usize) -> Option<usize> {
        (phase == self.phase && lane < self.lanes.len()).then_some(lane)
    }

    /// Whether a recorded operation on `stream`'s lane using `uses` (each span, and
    /// whether it writes) races with one recorded on a lane it does not follow.
    pub(crate) fn races(&self, stream: u8, uses: &[(Span, bool)]) -> bool {
        let Some(lane) = self.lane_of(stream) else {
            return false;
        };
        let mut seen = vec![false; self.nodes.len()];
        let mut stack: Vec<usize> = self.lanes[lane].last.into_iter().collect();
        while let Some(n) = stack.pop() {
            if !std::mem::replace(&mut seen[n], true) {
                stack.extend(&self.nodes[n].after);
            }
        }
        self.nodes.iter().enumerate().any(|(i, node)| {
            !seen[i]
                && node
                    .uses
                    .iter()
                    .any(|(a, aw)| uses.iter().any(|(b, bw)| (*aw || *bw) && a.overlaps(b)))
        })
    }

    /// Notes an operation recorded on `stream`'s lane.
    pub(crate) fn recorded(&mut self, stream: u8, uses: Vec<(Span, bool)>) {
        let Some(lane) = self.lane_of(stream) else {
            self.recs.push(usize::MAX);
            return;
        };
        let node = self.node(self.lanes[lane].last.into_iter().collect(), uses);
        self.lanes[lane].last = Some(node);
        self.recs.push(node);
    }

    /// Whether recorded operations `a` and `b` (by their place in the recording) are
    /// ordered, one before the other, by the lanes, forks and joins: what a sealed
    /// graph's rebind is checked against (rule 29, again on every update).
    pub(crate) fn ordered(&self, a: usize, b: usize) -> bool {
        let known = |r: usize| self.recs.get(r).copied().filter(|&n| n != usize::MAX);
        let (Some(na), Some(nb)) = (known(a), known(b)) else {
            // An operation the model did not see on a lane: nothing to order.
            return true;
        };
        self.reaches(na, nb) || self.reaches(nb, na)
    }

    /// Whether node `to` follows node `from`.
    fn reaches(&self, from: usize, to: usize) -> bool {
        let mut seen = vec![false; self.nodes.len()];
        let mut stack = vec![to];
        while let Some(n) = stack.pop() {
            if n == from {
                return true;
            }
            if !std::mem::replace(&mut seen[n], true) {
                stack.extend(&self.nodes[n].after);
            }
        }
        false
    }

    fn node(&mut self, after: Vec<usize>, uses: Vec<(Span, bool)>) -> usize {
        self.nodes.push(Node { after, uses });
        self.nodes.len() - 1
    }
}
