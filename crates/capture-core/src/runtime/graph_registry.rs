//! `GraphRegistry`: the device's live graphs (the pooled stream each lives on and what
//! its ledger is computed from) and its graph pools (rule 23), with the ids they are
//! known by. The graph lock of the lock order; ids are reserved before a seal and given
//! back when none comes out and no other was taken since.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::membership::PoolEntry;
use crate::ids::{GraphId, GraphPoolId};
use crate::report::{GraphLedger, GraphPoolLedger, LiveLedger, pool_ledgers, shared_graph_bytes};

/// Live graphs and graph pools, by id.
#[derive(Debug, Default)]
pub(crate) struct GraphRegistry {
    /// The id the next sealed graph takes.
    next: u64,
    /// Live graphs: the pooled stream each lives on, and what its ledger is computed
    /// from (its pins are shared with the graph, so the split is read when asked).
    live: BTreeMap<GraphId, (usize, LiveLedger)>,
    /// Graph pools, by id.
    pools: Vec<PoolEntry>,
}

impl GraphRegistry {
    /// Reserves the next graph id, for a seal about to happen.
    pub(crate) fn reserve_id(&mut self) -> GraphId {
        self.next += 1;
        GraphId::new(self.next - 1)
    }

    /// Gives `id` back when no graph came out of its seal, unless another was taken
    /// since.
    pub(crate) fn unreserve_id(&mut self, id: GraphId) {
        if self.next == id.index() + 1 {
            self.next -= 1;
        }
    }

    /// The id the next seal would take, taking nothing.
    pub(crate) fn next_id(&self) -> GraphId {
        GraphId::new(self.next)
    }

    /// Registers sealed graph `id`, living on pooled stream `pooled`.
    pub(crate) fn insert(&mut self, id: GraphId, pooled: usize, ledger: LiveLedger) {
        self.live.insert(id, (pooled, ledger));
    }

    /// Forgets `graph`; the pooled stream it lived on.
    pub(crate) fn remove(&mut self, graph: GraphId) -> Option<usize> {
        self.live.remove(&graph).map(|(pooled, _)| pooled)
    }

    /// The pooled stream live graph `graph` lives on.
    pub(crate) fn pooled_of(&self, graph: GraphId) -> Option<usize> {
        self.live.get(&graph).map(|(pooled, _)| *pooled)
    }

    /// What `graph`'s ledger is computed from.
    pub(crate) fn ledger_mut(&mut self, graph: GraphId) -> Option<&mut LiveLedger> {
        self.live.get_mut(&graph).map(|(_, ledger)| ledger)
    }

    /// `graph`'s ledger, its device bytes split against every other live graph's.
    pub(crate) fn ledger(&self, graph: GraphId) -> Option<GraphLedger> {
        let others = self.live.values().map(|(_, l)| l);
        self.live.get(&graph).map(|(_, l)| l.now(others))
    }

    /// Every live graph's ledger, the bytes held for graphs alone that several of them
    /// pin (each once), and each graph pool's ledger (rule 23).
    pub(crate) fn ledgers(&self) -> (Vec<GraphLedger>, u64, Vec<GraphPoolLedger>) {
        let all: Vec<&LiveLedger> = self.live.values().map(|(_, l)| l).collect();
        let ledgers = all.iter().map(|l| l.now(all.iter().copied())).collect();
        let pools = self.pools.iter().enumerate().map(|(i, p)| {
            (
                GraphPoolId::new(i as u64),
                Arc::clone(&p.label),
                p.members.iter().copied().collect(),
            )
        });
        let pools = pool_ledgers(pools, &all);
        (ledgers, shared_graph_bytes(&all), pools)
    }

    /// A new graph pool labelled `label`, bound to no pooled stream yet.
    pub(crate) fn add_pool(&mut self, label: Arc<str>) -> GraphPoolId {
        let id = GraphPoolId::new(self.pools.len() as u64);
        self.pools.push(PoolEntry {
            label,
            pooled: None,
            members: BTreeSet::new(),
        });
        id
    }

    /// Graph pool `pool`.
    pub(crate) fn pool_mut(&mut self, pool: GraphPoolId) -> Option<&mut PoolEntry> {
        self.pools.get_mut(pool.index() as usize)
    }
}
