//! `GraphLedger`: what one live graph holds, as memory reports and out-of-memory errors
//! show it; and `LiveLedger`, what it is computed from when asked.

use std::fmt;
use std::sync::Arc;

use crate::ids::{GraphId, GraphPoolId, MemoryId, Named, StorageId};
use crate::memory::{ArenaPlace, ManagedMemoryBinding, subtract};
use crate::range::ByteRange;

/// What one live graph holds for its life.
///
/// Its device bytes split three ways, `device_bytes = user_bytes + graph_only_bytes +
/// info_bytes`, read when the ledger is asked for ([`Device::graph`](crate::Device::graph),
/// [`Device::memory_report`](crate::Device::memory_report)): a buffer whose last handle
/// the user drops after the seal moves from `user_bytes` to `graph_only_bytes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphLedger {
    /// The graph.
    pub graph: GraphId,
    /// Its label, when the user gave it one ([`Device::label_graph`](crate::Device::label_graph)).
    pub label: Option<Arc<str>>,
    /// Device bytes pinned by the graph (every slice a recorded launch touched).
    pub device_bytes: u64,
    /// Of those, the user's buffers a [`Buffer`](crate::Buffer) still owns: weights,
    /// caches, inputs and outputs the caller kept. Freed only when both the graph and
    /// every clone of the buffer are gone.
    pub user_bytes: u64,
    /// Of those, the bytes nothing but the graph keeps alive: intermediates whose
    /// buffers were dropped (inside the window or after it). Freed with the graph.
    pub graph_only_bytes: u64,
    /// Of those, the graph's info-word buffers (its metadata info-cache entries).
    pub info_bytes: u64,
    /// The bytes this graph alone keeps alive: its pins that no buffer handle holds and
    /// no other live graph pins (dropping the graph frees exactly these). Summing
    /// `device_bytes` over graphs counts a buffer several graphs pin once per graph; the
    /// marginals plus the device report's
    /// [`graph_shared_bytes`](crate::DeviceReport::graph_shared_bytes) count each once.
    pub marginal_bytes: u64,
    /// Host bytes the graph's recorded copies read on every replay: its staging slices,
    /// which hold the copied bytes (the caller's own buffers are not kept).
    pub host_bytes: u64,
    /// Metadata info-cache entries pinned to the graph.
    pub info_entries: u64,
    /// Launches recorded into the graph.
    pub launches: u64,
    /// Host-to-device copies recorded into the graph (a write inside the window).
    pub copies: u64,
}

impl fmt::Display for GraphLedger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: device {} B (user {} B, graph only {} B, info {} B), host staging {} B, {} info entries, {} launches",
            Named(self.graph, self.label.as_deref()),
            self.device_bytes,
            self.user_bytes,
            self.graph_only_bytes,
            self.info_bytes,
            self.host_bytes,
            self.info_entries,
            self.launches
        )?;
        match self.copies {
            0 => {}
            1 => write!(f, ", 1 copy")?,
            n => write!(f, ", {n} copies")?,
        }
        write!(f, "; {} B marginal", self.marginal_bytes)
    }
}

/// One device slice a graph pins.
#[derive(Debug, Clone)]
pub(crate) struct DevicePin {
    pub(crate) binding: ManagedMemoryBinding,
    /// Whether it is one of the graph's info-word buffers (an info-cache entry when the
    /// graph was sealed), which the cache owns, not the user.
    pub(crate) info: bool,
    /// Where it lives when it is in a graph pool's memory, whose slices overlap: its
    /// bytes are counted by place, each byte once (rule 23).
    pub(crate) arena: Option<ArenaPlace>,
}

/// What a live graph's [`GraphLedger`] is computed from: the figures fixed at its seal,
/// and the device slices it pins, shared with the graph itself. Cloning shares the pins.
#[derive(Debug, Clone)]
pub(crate) struct LiveLedger {
    pub(crate) graph: GraphId,
    /// In id order.
    pub(crate) device: Arc<[DevicePin]>,
    pub(crate) host_bytes: u64,
    pub(crate) info_entries: u64,
    pub(crate) launches: u64,
    pub(crate) copies: u64,
    pub(crate) label: Option<Arc<str>>,
}

impl LiveLedger {
    /// Whether this graph pins the allocation `id`.
    fn pins(&self, id: MemoryId) -> bool {
        self.device
            .binary_search_by_key(&id, |p| p.binding.id())
            .is_ok()
    }

    /// Whether a pin is held for graphs alone: no buffer handle holds it.
    fn graphs_only(pin: &DevicePin) -> bool {
        pin.info || !pin.binding.user_held()
    }

    /// The ledger as the handles stand now, its marginal bytes counted against `others`
    /// (every other live graph of the device). Walks the pins; allocates nothing.
    pub(crate) fn now<'a>(
        &self,
        others: impl Iterator<Item = &'a LiveLedger> + Clone,
    ) -> GraphLedger {
        let (mut user, mut graph_only, mut info, mut marginal) = (0, 0, 0, 0);
        for pin in self.device.iter() {
            let size = pin.binding.size();
            if pin.info {
                info += size;
            } else if pin.binding.user_held() {
                user += size;
            } else {
                graph_only += size;
            }
            let id = pin.binding.id();
            if pin.arena.is_none()
                && Self::graphs_only(pin)
                && !others.clone().any(|o| o.graph != self.graph && o.pins(id))
            {
                marginal += size;
            }
        }
        marginal += self.arena_marginal(others);
        GraphLedger {
            graph: self.graph,
            label: self.label.clone(),
            device_bytes: user + graph_only + info,
            user_bytes: user,
            graph_only_bytes: graph_only,
            info_bytes: info,
            marginal_bytes: marginal,
            host_bytes: self.host_bytes,
            info_entries: self.info_entries,
            launches: self.launches,
            copies: self.copies,
        }
    }
}

impl LiveLedger {
    /// This graph's graphs-only pins in graph-pool memory, as page places.
    fn arena_places(&self) -> impl Iterator<Item = ArenaPlace> + Clone + '_ {
        self.device
            .iter()
            .filter(|p| Self::graphs_only(p))
            .filter_map(|p| p.arena)
    }

    /// The graph-pool bytes this graph alone keeps for graphs: those of its
    /// graphs-only arena pins that no other graph's covers, each byte once.
    fn arena_marginal<'a>(&self, others: impl Iterator<Item = &'a LiveLedger> + Clone) -> u64 {
        let mine: Vec<ArenaPlace> = self.arena_places().collect();
        if mine.is_empty() {
            return 0;
        }
        let theirs: Vec<ArenaPlace> = others
            .filter(|o| o.graph != self.graph)
            .flat_map(|o| o.arena_places().collect::<Vec<_>>())
            .collect();
        let mut alone = 0;
        for ((pool, storage), segment) in segments(mine.iter()) {
            let mut covering: Vec<ByteRange> = theirs
                .iter()
                .filter(|p| p.pool == pool && p.storage == storage)
                .map(|p| p.bytes)
                .collect();
            alone += subtract(segment, &mut covering)
                .iter()
                .map(|r| r.len())
                .sum::<u64>();
        }
        alone
    }
}

/// A page of a graph pool: its pool and its storage. Storage ids are a pooled stream's
/// own, and a pool lives on one pooled stream, so the pair names one page.
type PageKey = (GraphPoolId, StorageId);

/// The disjoint byte segments `places` cover, by page.
fn segments<'a>(places: impl Iterator<Item = &'a ArenaPlace>) -> Vec<(PageKey, ByteRange)> {
    let mut sorted: Vec<(PageKey, ByteRange)> =
        places.map(|p| ((p.pool, p.storage), p.bytes)).collect();
    sorted.sort_by_key(|(s, r)| (*s, r.start()));
    let mut out: Vec<(PageKey, ByteRange)> = Vec::new();
    for (storage, r) in sorted {
        match out.last_mut() {
            Some((s, last)) if *s == storage && r.start() <= last.end() => {
                *last = ByteRange::from_bounds(last.start(), last.end().max(r.end()));
            }
            _ => out.push((storage, r)),
        }
    }
    out
}

/// The bytes `places` cover, each once.
fn covered<'a>(places: impl Iterator<Item = &'a ArenaPlace>) -> u64 {
    segments(places).iter().map(|(_, r)| r.len()).sum()
}

/// What one graph pool's memory holds for its live members, as memory reports show it
/// (rule 23): its members' pins counted by place, each byte once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphPoolLedger {
    /// The pool.
    pub pool: GraphPoolId,
    /// The name its user gave it.
    pub label: Arc<str>,
    /// Its live members, in id order.
    pub members: Vec<GraphId>,
    /// Bytes of the pool's memory held for graphs alone (no buffer handle holds them),
    /// each byte once however many members' slices overlap it: what the ladder costs in
    /// the pool, about its largest member's.
    pub held_bytes: u64,
    /// Of those, the bytes two or more members hold (the rest is each member's marginal,
    /// in its own ledger).
    pub shared_bytes: u64,
}

impl fmt::Display for GraphPoolLedger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} graphs, {} B held for them in its memory ({} B shared by several, counted once)",
            Named(self.pool, Some(&self.label)),
            self.members.len(),
            self.held_bytes,
            self.shared_bytes
        )
    }
}

/// Each graph pool's ledger: `pools` names every pool made (label, live members), and
/// `ledgers` every live graph.
pub(crate) fn pool_ledgers(
    pools: impl Iterator<Item = (GraphPoolId, Arc<str>, Vec<GraphId>)>,
    ledgers: &[&LiveLedger],
) -> Vec<GraphPoolLedger> {
    let mut out = Vec::new();
    for (pool, label, members) in pools {
        if members.is_empty() {
            continue;
        }
        let of_pool = |l: &&&LiveLedger| members.contains(&l.graph);
        let places: Vec<ArenaPlace> = ledgers
            .iter()
            .filter(of_pool)
            .flat_map(|l| {
                l.arena_places()
                    .filter(|p| p.pool == pool)
                    .collect::<Vec<_>>()
            })
            .collect();
        let held = covered(places.iter());
        let alone: u64 = ledgers
            .iter()
            .filter(of_pool)
            .map(|l| l.arena_marginal(ledgers.iter().copied()))
            .sum();
        out.push(GraphPoolLedger {
            pool,
            label,
            members,
            held_bytes: held,
            shared_bytes: held.saturating_sub(alone),
        });
    }
    out
}

/// Bytes held for graphs alone (no buffer handle holds them) that two or more of
/// `ledgers` pin, each allocation (each byte, in graph-pool memory) counted once.
pub(crate) fn shared_graph_bytes(ledgers: &[&LiveLedger]) -> u64 {
    let places: Vec<ArenaPlace> = ledgers
        .iter()
        .flat_map(|l| l.arena_places().collect::<Vec<_>>())
        .collect();
    let alone: u64 = ledgers
        .iter()
        .map(|l| l.arena_marginal(ledgers.iter().copied()))
        .sum();
    let mut shared = covered(places.iter()).saturating_sub(alone);
    for (i, ledger) in ledgers.iter().enumerate() {
        for pin in ledger
            .device
            .iter()
            .filter(|p| p.arena.is_none() && LiveLedger::graphs_only(p))
        {
            let id = pin.binding.id();
            // Counted at the first graph that pins it, when a later one pins it too.
            let first = !ledgers[..i].iter().any(|o| o.pins(id));
            if first && ledgers[i + 1..].iter().any(|o| o.pins(id)) {
                shared += pin.binding.size();
            }
        }
    }
    shared
}
