//! `Access`: what a launch does to a buffer it is given. A file of its own, importing
//! nothing of the crate, so the slot definitions and errors can name it.

use std::fmt;

/// What a launch does to a buffer it is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Access {
    /// The launch only reads the range.
    Read,
    /// The launch only writes the range.
    Write,
    /// The launch reads and writes the range.
    ReadWrite,
}

impl Access {
    /// Whether the launch reads the range.
    pub const fn reads(self) -> bool {
        matches!(self, Self::Read | Self::ReadWrite)
    }

    /// Whether the launch writes the range.
    pub const fn writes(self) -> bool {
        matches!(self, Self::Write | Self::ReadWrite)
    }

    /// The access of two launches given the same range: a write by either wins.
    pub const fn merge(self, other: Access) -> Access {
        match (
            self.reads() || other.reads(),
            self.writes() || other.writes(),
        ) {
            (_, false) => Access::Read,
            (false, true) => Access::Write,
            (true, true) => Access::ReadWrite,
        }
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Read => "r",
            Self::Write => "w",
            Self::ReadWrite => "rw",
        })
    }
}
