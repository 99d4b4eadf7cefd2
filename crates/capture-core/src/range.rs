//! `ByteRange`: a half-open byte range of one allocation, the unit of every claim.

use std::fmt;

/// Why [`ByteRange::new`] refused its bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvalidRange {
    /// A range of no bytes, starting at `offset`.
    Empty {
        /// Where the empty range starts.
        offset: u64,
    },
    /// `offset + len` does not fit in a `u64`.
    Overflows {
        /// The first byte.
        offset: u64,
        /// How many bytes were asked for.
        len: u64,
    },
}

impl fmt::Display for InvalidRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty { offset } => {
                write!(
                    f,
                    "byte range [{offset}..{offset}): a range names at least one byte"
                )
            }
            Self::Overflows { offset, len } => {
                write!(
                    f,
                    "byte range offset {offset} len {len}: offset + len overflows"
                )
            }
        }
    }
}

impl std::error::Error for InvalidRange {}

/// The half-open byte range `[start..end)` of one allocation.
///
/// Never empty and never inverted: [`ByteRange::new`] refuses both, so every range the
/// ledgers hold names at least one byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteRange {
    start: u64,
    end: u64,
}

impl ByteRange {
    /// The range of `len` bytes starting at `offset`.
    ///
    /// # Errors
    ///
    /// [`InvalidRange`] naming the range when `len` is zero or `offset + len`
    /// overflows; it converts into [`ServerError::InvalidArgument`](crate::ServerError).
    pub fn new(offset: u64, len: u64) -> Result<Self, InvalidRange> {
        if len == 0 {
            return Err(InvalidRange::Empty { offset });
        }
        let end = offset
            .checked_add(len)
            .ok_or(InvalidRange::Overflows { offset, len })?;
        Ok(Self { start: offset, end })
    }

    /// The range `[start..end)`, for callers that hold two valid bounds already.
    pub(crate) const fn from_bounds(start: u64, end: u64) -> Self {
        debug_assert!(start < end);
        Self { start, end }
    }

    /// The first byte.
    pub const fn start(self) -> u64 {
        self.start
    }

    /// One past the last byte.
    pub const fn end(self) -> u64 {
        self.end
    }

    /// How many bytes the range names.
    pub const fn len(self) -> u64 {
        self.end - self.start
    }

    /// Always false: a range names at least one byte. Present for clippy's `len` rule.
    pub const fn is_empty(self) -> bool {
        false
    }

    /// Whether the two ranges share at least one byte (adjacent ranges do not).
    pub const fn overlaps(self, other: ByteRange) -> bool {
        self.start < other.end && other.start < self.end
    }

    /// Whether every byte of `other` lies in `self`.
    pub const fn contains(self, other: ByteRange) -> bool {
        self.start <= other.start && other.end <= self.end
    }

    /// The bytes both ranges name, if any.
    pub fn intersection(self, other: ByteRange) -> Option<ByteRange> {
        let start = self.start.max(other.start);
        let end = self.end.min(other.end);
        (start < end).then_some(ByteRange { start, end })
    }
}

impl fmt::Display for ByteRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}..{})", self.start, self.end)
    }
}
