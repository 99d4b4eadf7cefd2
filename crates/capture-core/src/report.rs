//! `GraphLedger`: what one live graph holds, as memory reports and out-of-memory errors
//! show it.

use std::fmt;

use crate::ids::GraphId;

/// What one live graph holds for its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GraphLedger {
    /// The graph.
    pub graph: GraphId,
    /// Device bytes pinned by the graph (every slice a recorded launch touched).
    pub device_bytes: u64,
    /// Host staging bytes the graph's recorded copies read on every replay.
    pub host_bytes: u64,
    /// Metadata info-cache entries pinned to the graph.
    pub info_entries: u64,
    /// Launches recorded into the graph.
    pub launches: u64,
}

impl fmt::Display for GraphLedger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: device {} B, host staging {} B, {} info entries, {} launches",
            self.graph, self.device_bytes, self.host_bytes, self.info_entries, self.launches
        )
    }
}
