//! What a refused fork, join or race says (rules 28 and 29): the typed halves of
//! [`ServerError::BranchRefused`](crate::ServerError::BranchRefused) and
//! [`ServerError::BranchRace`](crate::ServerError::BranchRace).

use std::fmt;
use std::sync::Arc;

use crate::ids::{MemoryId, StreamId};
use crate::memory::Access;
use crate::op::Op;
use crate::range::ByteRange;

/// The most lanes one window's recording holds: its origin and the branches forked from
/// it over the window's life (a branch forked again after its join takes a new lane).
pub const MAX_WINDOW_LANES: usize = 64;

/// A refused [`Device::fork`](crate::Device::fork) or
/// [`Device::join`](crate::Device::join), or a capture lifecycle call on a stream that is
/// a branch. Nothing was changed, unless the reason says the window was doomed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BranchRefused {
    /// The refused call (`fork`, `join`, `prepare`, `begin`, `end`, `abort`).
    pub op: &'static str,
    /// The stream the call named as the branch.
    pub branch: StreamId,
    /// The stream the branch was forked from (or was to be).
    pub parent: StreamId,
    /// What was wrong.
    pub reason: BranchReason,
}

/// Why a fork, a join or a branch's lifecycle call was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BranchReason {
    /// The branch maps to the same pooled stream as the window's origin: it is a
    /// neighbour of it, not another stream (rule 13).
    SamePooledStream {
        /// The window's origin.
        origin: StreamId,
    },
    /// The stream has a capture window of its own (prepared or recording).
    HasWindow {
        /// The stream owning that window.
        owner: StreamId,
    },
    /// The stream's pooled stream already belongs to a window as a branch.
    Lent {
        /// The origin of the window it belongs to.
        origin: StreamId,
    },
    /// The stream is an unjoined branch of this window already.
    AlreadyBranch {
        /// The window's origin.
        origin: StreamId,
    },
    /// The parent is neither the window's origin nor one of its unjoined branches.
    ParentNotInWindow {
        /// The window's origin.
        origin: StreamId,
    },
    /// The window holds [`MAX_WINDOW_LANES`] lanes already.
    TooManyLanes,
    /// The token is of another device.
    OtherDevice,
    /// The token was forked in another window, or another phase of the same capture
    /// (each phase forks its own branches).
    Stale,
    /// The branch was joined already.
    Joined,
    /// The stream the branch joins into was itself joined already: the branch can never
    /// be joined now, so the window is doomed.
    ParentJoined,
    /// Capture lifecycle calls belong to the window's origin, not a branch.
    Lifecycle {
        /// The window's origin.
        origin: StreamId,
    },
}

impl fmt::Display for BranchRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (op, branch, parent) = (self.op, self.branch, self.parent);
        write!(f, "{op} of branch {branch} (from {parent}) refused: ")?;
        match &self.reason {
            BranchReason::SamePooledStream { origin } => write!(
                f,
                "it shares a pooled stream with {origin}, the window's origin (a neighbour, not another stream)"
            ),
            BranchReason::HasWindow { owner } => {
                write!(f, "its pooled stream holds a capture window of {owner}")
            }
            BranchReason::Lent { origin } => write!(
                f,
                "its pooled stream is a branch of the window of {origin} until that window ends"
            ),
            BranchReason::AlreadyBranch { origin } => {
                write!(f, "it is an unjoined branch of the window of {origin} already")
            }
            BranchReason::ParentNotInWindow { origin } => write!(
                f,
                "the parent is neither the origin of the window of {origin} nor one of its unjoined branches"
            ),
            BranchReason::TooManyLanes => write!(
                f,
                "the window holds {MAX_WINDOW_LANES} lanes already (its origin and every fork)"
            ),
            BranchReason::OtherDevice => f.write_str("the branch is of another device"),
            BranchReason::Stale => f.write_str(
                "the branch was forked in another window or phase: each phase forks and joins its own",
            ),
            BranchReason::Joined => f.write_str("it was joined already"),
            BranchReason::ParentJoined => f.write_str(
                "the stream it joins into was joined already, so it can never be joined: the window is doomed",
            ),
            BranchReason::Lifecycle { origin } => write!(
                f,
                "it is a branch of the window of {origin}: the window's lifecycle calls are the origin's"
            ),
        }
    }
}

/// One side of a race: a recorded launch, work or copy on a branch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaceSide {
    /// The stream it was issued on.
    pub stream: StreamId,
    /// The kernel's launch or the work (the `write` call for a host-to-device copy).
    pub op: Op,
    /// Its place in the window's recording (counting recorded operations from 0).
    pub node: u64,
    /// How it used the bytes.
    pub access: Access,
}

impl fmt::Display for RaceSide {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let how = match self.access {
            Access::Read => "reading",
            Access::Write => "writing",
            Access::ReadWrite => "reading and writing",
        };
        write!(
            f,
            "{} (op {}) on {}, {how}",
            self.op, self.node, self.stream
        )
    }
}

/// Two recorded operations on unjoined branches of one window that use the same bytes,
/// one of them writing (rule 29). Nothing of the second was recorded; the window is
/// doomed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BranchRace {
    /// The window's origin.
    pub window: StreamId,
    /// The operation recorded first.
    pub first: RaceSide,
    /// The operation refused.
    pub second: RaceSide,
    /// The buffer both use.
    pub memory: MemoryId,
    /// Its label, when the program gave it one.
    pub label: Option<Arc<str>>,
    /// The bytes both use.
    pub range: ByteRange,
}

impl fmt::Display for BranchRace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "race in the window of {}: {}", self.window, self.memory)?;
        if let Some(label) = &self.label {
            write!(f, " {label:?}")?;
        }
        write!(
            f,
            "[{}..{}) is used by {} and by {}, with no join between them (join one branch into the other first)",
            self.range.start(),
            self.range.end(),
            self.first,
            self.second
        )
    }
}
