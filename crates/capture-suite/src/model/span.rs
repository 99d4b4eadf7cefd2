//! A byte range of one model buffer, the unit the model's bytes, graphs and branches
//! speak in.

/// A byte range of one model buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) buf: usize,
    pub(crate) start: usize,
    pub(crate) end: usize,
}

impl Span {
    pub(crate) fn overlaps(&self, other: &Span) -> bool {
        self.buf == other.buf && self.start < other.end && other.start < self.end
    }

    pub(crate) fn contains(&self, buf: usize, at: usize) -> bool {
        self.buf == buf && self.start <= at && at < self.end
    }
}
