//! `DeviceReport`: every pooled stream's memory and every live graph's ledger.

use std::fmt;

use crate::memory::MemoryReport;
use crate::report::{GraphLedger, GraphPoolLedger};

/// One pooled stream's memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamReport {
    /// The pooled stream.
    pub index: usize,
    /// Its device memory.
    pub device: MemoryReport,
    /// Its pinned host (staging) memory.
    pub host: MemoryReport,
    /// Host bytes the backend keeps apart from the pools for this stream's reads: one
    /// read-back buffer, reused by every read of a device-only page (Vulkan's staged
    /// memory, CUDA's pinned staging), 0 where reads need none (the mock, mapped pages).
    /// Not a pool's page, so not in [`pages`](Self::pages).
    pub read_staging_bytes: u64,
    /// Values its drop queue holds until the device is done with them.
    pub pending_drops: usize,
}

/// Every pooled stream's memory, and what each live graph holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceReport {
    /// One entry per pooled stream.
    pub streams: Vec<StreamReport>,
    /// One entry per live graph, in id order, each with its marginal bytes (what it
    /// alone keeps alive).
    pub graphs: Vec<GraphLedger>,
    /// Bytes held for graphs alone (no buffer handle holds them) that two or more live
    /// graphs pin, each allocation counted once: with the graphs' marginal bytes, what
    /// the pages hold only for graphs (see [`graph_held_bytes`](Self::graph_held_bytes)).
    pub graph_shared_bytes: u64,
    /// One entry per graph pool with a live member (rule 23): the bytes its memory holds
    /// for its members, each once, and how many of them several members hold. Those
    /// bytes are within [`graph_held_bytes`](Self::graph_held_bytes) already.
    pub pools: Vec<GraphPoolLedger>,
}

impl StreamReport {
    /// Pages held in its device and host pools: its live driver allocations.
    pub fn pages(&self) -> u64 {
        self.device.pages() + self.host.pages()
    }
}

impl DeviceReport {
    /// What the pages hold only for graphs: the bytes several graphs share, once, plus
    /// each graph's marginal bytes. Dropping every graph frees this much.
    pub fn graph_held_bytes(&self) -> u64 {
        self.graph_shared_bytes + self.graphs.iter().map(|g| g.marginal_bytes).sum::<u64>()
    }

    /// Pages held by every pool of every pooled stream: the device's live driver
    /// allocations of memory (one per page; executables and kernels are not counted).
    pub fn pages(&self) -> u64 {
        self.streams.iter().map(StreamReport::pages).sum()
    }

    /// Driver allocations every pool ever made, and how many of them were given back:
    /// `allocations - frees` is [`pages`](Self::pages).
    pub fn driver_allocations(&self) -> (u64, u64) {
        self.streams.iter().fold((0, 0), |(a, f), s| {
            (
                a + s.device.allocations() + s.host.allocations(),
                f + s.device.frees() + s.host.frees(),
            )
        })
    }

    /// Slices still handed out (live buffers, staging, info entries, and what graphs
    /// and queued work hold).
    pub fn slices_in_use(&self) -> u64 {
        self.streams
            .iter()
            .map(|s| s.device.slices_in_use() + s.host.slices_in_use())
            .sum()
    }

    /// Values waiting in drop queues for the device to finish with them.
    pub fn pending_drops(&self) -> usize {
        self.streams.iter().map(|s| s.pending_drops).sum()
    }

    /// Whether everything was freed: no slice handed out, no pending drop, no live
    /// graph, and no page left (after [`Device::cleanup`](crate::Device::cleanup)).
    pub fn is_empty(&self) -> bool {
        self.pages() == 0
            && self.slices_in_use() == 0
            && self.pending_drops() == 0
            && self.graphs.is_empty()
    }
}

/// One line per pooled stream and pool that holds or ever held memory, one per live
/// graph, one for what the pages hold only for graphs (when any lives), and a total. Pools that never allocated and streams with nothing in them are
/// left out; the alternate form (`{:#}`) lists every stream and pool.
///
/// ```
/// # use capture_graphs::{Arg, Builtin, Device, DeviceConfig, StreamId};
/// # use capture_graphs::mock::MockBackend;
/// let dev = Device::new(MockBackend::new(), DeviceConfig::new().streams(4)?)?;
/// let s = StreamId::new(0);
/// let (x, y) = (dev.alloc(s, 16)?, dev.alloc(s, 16)?);
/// dev.write_values(s, &x, 0, &[1.0f32; 4])?;
/// let add = dev.builtin(Builtin::AddScalar);
/// let info = Builtin::AddScalar.info(4, 1.0);
/// let g = dev.capture(s, |d| {
///     d.launch(s, &add, [1, 1, 1], &[Arg::read(&x), Arg::write(&y)], &info)?;
///     d.launch(s, &add, [1, 1, 1], &[Arg::read(&y), Arg::write(&x)], &info)
/// })?;
/// let report = dev.memory_report();
/// let short = report.to_string();
/// // Stream 0 and its four pools, the graph, what graphs hold, and the total: nothing
/// // of the idle streams.
/// assert_eq!(short.lines().count(), 8, "{short}");
/// assert!(!short.contains("pooled stream 3"));
/// assert!(format!("{report:#}").contains("pooled stream 3"));
/// # dev.drop_graph(g)?;
/// # Ok::<(), capture_graphs::ServerError>(())
/// ```
impl fmt::Display for DeviceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let every = f.alternate();
        for s in &self.streams {
            let pools: Vec<_> = s
                .device
                .pools
                .iter()
                .chain(&s.host.pools)
                .filter(|p| every || p.allocations > 0 || p.slices_in_use > 0)
                .collect();
            if !every && pools.is_empty() && s.pending_drops == 0 && s.read_staging_bytes == 0 {
                continue;
            }
            writeln!(
                f,
                "pooled stream {}: {} pending drops",
                s.index, s.pending_drops
            )?;
            for p in pools {
                writeln!(f, "  {p}")?;
            }
            if s.read_staging_bytes > 0 {
                writeln!(
                    f,
                    "  read-back staging: {} B, kept by the backend and reused by every read",
                    s.read_staging_bytes
                )?;
            }
        }
        for g in &self.graphs {
            writeln!(f, "{g}")?;
        }
        for p in &self.pools {
            writeln!(f, "{p}")?;
        }
        if !self.graphs.is_empty() {
            writeln!(
                f,
                "graphs hold {} B only for graphs: {} B shared by several (counted once) + {} B \
                 marginal",
                self.graph_held_bytes(),
                self.graph_shared_bytes,
                self.graph_held_bytes() - self.graph_shared_bytes
            )?;
        }
        let (allocations, frees) = self.driver_allocations();
        writeln!(
            f,
            "total: {} pages (live driver allocations), {allocations} allocated, {frees} freed, {} slices in use, {} live graphs",
            self.pages(),
            self.slices_in_use(),
            self.graphs.len()
        )
    }
}
