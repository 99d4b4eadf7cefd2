//! A branch token the runner's program holds, between its fork and its join.

use capture_core::Branch;

/// A branch token the program holds.
pub(super) struct Token {
    /// The device's token, until it is joined.
    pub(super) branch: Option<Branch>,
    /// The stream forked.
    pub(super) stream: u8,
    /// Its parent.
    pub(super) parent: u8,
    /// The window it is a branch of: its pooled stream, phase and lane.
    pub(super) window: Option<(usize, u64, usize)>,
}
