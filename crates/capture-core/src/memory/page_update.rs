//! `PageUpdate`: what a stream's reservations may do to the pages of its pools right now.

use crate::ids::StreamId;

/// What a stream's reservations may do to pages, decided by the capture state of the
/// whole device (see `StreamCapture::page_update`).
///
/// Reusing a free slice is always allowed; this type governs growing a pool (a driver
/// allocation) and releasing or renumbering pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageUpdate {
    /// No stream of the device records: pools may grow, and empty pages may be released
    /// and renumbered.
    Free,
    /// A stream records, on a driver whose capture survives allocations elsewhere: pools
    /// may grow, but no page is released or renumbered, so the pages the recording
    /// touched are still the ones it guards when it seals.
    Hold {
        /// The stream whose window records.
        recording: StreamId,
    },
    /// Nothing grows, is released or renumbered: the stream records itself, or the driver's
    /// capture breaks on any allocation in the process (CUDA's global mode).
    Freeze {
        /// The stream whose window records.
        recording: StreamId,
    },
}

impl PageUpdate {
    /// Whether a reservation may allocate a new page.
    pub const fn may_grow(self) -> bool {
        matches!(self, Self::Free | Self::Hold { .. })
    }

    /// Whether empty pages may be released or renumbered.
    pub const fn may_release(self) -> bool {
        matches!(self, Self::Free)
    }

    /// The recording stream that restricts this update, if any.
    pub const fn recording(self) -> Option<StreamId> {
        match self {
            Self::Free => None,
            Self::Hold { recording } | Self::Freeze { recording } => Some(recording),
        }
    }
}
