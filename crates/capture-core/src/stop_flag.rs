//! Loop replays (rule 30): a graph replayed up to `max` times on the device, ended after
//! the iteration in which its stop flag, a `u32` a kernel of the step writes, was set.
//!
//! This file holds the user's view: what a device declares it can loop
//! ([`DeviceLoops`]), and what a refused stop flag, loop body or loop replay says
//! ([`LoopRefused`], [`LoopMismatch`]). The runtime's half lives in `runtime/loops.rs`.

use std::fmt;

use crate::ids::MemoryId;
use crate::op::Op;
use crate::range::ByteRange;
use crate::subject::Subject;

/// The size of a stop flag: one `u32`, non-zero to stop.
pub const STOP_FLAG_BYTES: u64 = 4;

/// Whether a device replays a graph in a loop on the device (rule 30), and what a loop
/// body may not hold there. Declared by the backend in its
/// [`LaunchLimits`](crate::backend::LaunchLimits); where loops are unsupported, a launch
/// naming a stop flag inside a window is refused, so no graph promises what it cannot
/// keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceLoops {
    /// The device runs loop replays. A recorded host-to-device copy, or the user's own
    /// work, in a window that names a stop flag is refused when recorded where the
    /// matching field gives the reason.
    Supported {
        /// Why a copy may not be in a loop body, where it may not.
        copies: Option<&'static str>,
        /// Why the user's own work may not be in a loop body, where it may not.
        work: Option<&'static str>,
    },
    /// It does not, for the reason given.
    Unsupported(&'static str),
}

impl DeviceLoops {
    /// Loops with any recorded operation in their body (the mock's).
    pub const ANY_BODY: Self = Self::Supported {
        copies: None,
        work: None,
    };
}

/// A stop flag, a loop body or a loop replay refused (rule 30): what was refused and
/// why. Nothing was changed (a refused launch inside a window is not recorded, and the
/// window is not doomed by it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoopRefused {
    /// The window's stream (a refusal while recording), or the graph (a loop replay).
    pub subject: Subject,
    /// What was wrong.
    pub mismatch: LoopMismatch,
}

impl fmt::Display for LoopRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "loop of {}: {}", self.subject, self.mismatch)
    }
}

/// Why a [`LoopRefused`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoopMismatch {
    /// The device runs no loop replay, for the reason given.
    Unsupported(&'static str),
    /// The stop flag is a buffer argument the launch writes, not this one (a scalar, or
    /// a buffer only read).
    NotWritten,
    /// The stop flag's range is not one `u32`.
    Size {
        /// The range's length.
        bytes: u64,
    },
    /// The stop flag is also a slot: a loop's flag is fixed at capture.
    Slotted,
    /// The user's own work names a stop flag: only a kernel launch sets one.
    Work,
    /// The window named another stop flag already: one per graph.
    Second {
        /// The first flag's memory.
        memory: MemoryId,
        /// Its bytes.
        range: ByteRange,
    },
    /// The window records what the device cannot put in a loop body, and names a stop
    /// flag: refused when the second of the two is recorded.
    Body {
        /// The operation the loop body cannot hold.
        op: Op,
        /// Why, as the backend says.
        reason: &'static str,
    },
    /// A loop replay of a graph whose capture named no stop flag.
    NoFlag,
    /// A loop replay's `max` is zero or past the most one call runs.
    Max {
        /// What was asked.
        max: u32,
        /// The most one call runs.
        limit: u32,
    },
}

impl fmt::Display for LoopMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unsupported(why) => write!(f, "the device runs no loop replay ({why})"),
            Self::NotWritten => f.write_str(
                "a stop flag is a buffer argument the launch writes (`Arg::write(&done).stop_flag()`)",
            ),
            Self::Size { bytes } => write!(
                f,
                "a stop flag is one u32 ({STOP_FLAG_BYTES} bytes), not {bytes} bytes: pass \
                 its range (`.range(offset, 4)`)"
            ),
            Self::Slotted => f.write_str("a stop flag is fixed at capture: it cannot be a slot"),
            Self::Work => f.write_str(
                "the user's own work cannot name a stop flag: a kernel launch of the step sets it",
            ),
            Self::Second { memory, range } => write!(
                f,
                "the window named its stop flag already ({memory}[{}+{}]): one per graph",
                range.start(),
                range.len()
            ),
            Self::Body { op, reason } => write!(
                f,
                "{op} cannot be in a loop body on this device ({reason}); record it outside \
                 the looped graph"
            ),
            Self::NoFlag => f.write_str(
                "the graph's capture named no stop flag (`Arg::write(&done).stop_flag()`): \
                 replay it with `replay`",
            ),
            Self::Max { max, limit } => write!(
                f,
                "a loop replay runs a graph 1 to {limit} times, not {max}"
            ),
        }
    }
}
