//! `DeviceReport`: every pooled stream's memory and every live graph's ledger.

use std::fmt;

use crate::memory::MemoryReport;
use crate::report::GraphLedger;

/// One pooled stream's memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamReport {
    /// The pooled stream.
    pub index: usize,
    /// Its device memory.
    pub device: MemoryReport,
    /// Its pinned host (staging) memory.
    pub host: MemoryReport,
    /// Values its drop queue holds until the device is done with them.
    pub pending_drops: usize,
}

/// Every pooled stream's memory, and what each live graph holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceReport {
    /// One entry per pooled stream.
    pub streams: Vec<StreamReport>,
    /// One entry per live graph, in id order.
    pub graphs: Vec<GraphLedger>,
}

impl fmt::Display for DeviceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for s in &self.streams {
            writeln!(
                f,
                "pooled stream {}: {} pending drops",
                s.index, s.pending_drops
            )?;
            for p in s.device.pools.iter().chain(&s.host.pools) {
                writeln!(f, "  {p}")?;
            }
        }
        for g in &self.graphs {
            writeln!(f, "{g}")?;
        }
        Ok(())
    }
}
