//! `Nodes`: the taint ledger's live failure nodes by id, the newest kept apart.
//!
//! An eager launch (and a replay) creates a failure for its scope, claims its outputs
//! with it, and frees it when the scope settles: the newest node is the one nearly every
//! call touches, and most live only for one call. Keeping it in a slot of its own saves
//! the map an insert, a remove and the lookups between them on every launch; an older
//! live node (a real failure some bytes still carry) moves to the map when a newer one
//! is made.

use crate::id_hash::IdMap;
use crate::ids::FailureId;

use crate::error::{FailureCause, Skipped};
use crate::memory::ClaimKey;

/// What a live failure is and how many claims carry it.
#[derive(Debug)]
pub(super) struct Node {
    pub(super) cause: FailureCause,
    /// Launches skipped because of this failure, oldest first.
    pub(super) chain: Vec<Skipped>,
    /// The keys an open scope claimed, for [`TaintLedger::settle`]; empty otherwise.
    pub(super) writes: Vec<ClaimKey>,
    /// How many claims carry this failure; the node is freed when it reaches zero.
    pub(super) claims: usize,
}

#[derive(Debug, Default)]
pub(super) struct Nodes {
    /// The newest node, while it lives.
    newest: Option<(FailureId, Node)>,
    /// Every other live node.
    older: IdMap<FailureId, Node>,
}

impl Nodes {
    /// Adds `node` as `id`, the newest.
    pub(super) fn insert(&mut self, id: FailureId, node: Node) {
        if let Some((old, older)) = self.newest.replace((id, node)) {
            self.older.insert(old, older);
        }
    }

    pub(super) fn get(&self, id: &FailureId) -> Option<&Node> {
        match &self.newest {
            Some((newest, node)) if newest == id => Some(node),
            _ => self.older.get(id),
        }
    }

    pub(super) fn get_mut(&mut self, id: &FailureId) -> Option<&mut Node> {
        match &mut self.newest {
            Some((newest, node)) if newest == id => Some(node),
            _ => self.older.get_mut(id),
        }
    }

    pub(super) fn remove(&mut self, id: &FailureId) -> Option<Node> {
        if matches!(&self.newest, Some((newest, _)) if newest == id) {
            return self.newest.take().map(|(_, node)| node);
        }
        self.older.remove(id)
    }

    pub(super) fn contains_key(&self, id: &FailureId) -> bool {
        self.get(id).is_some()
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.older.len() + usize::from(self.newest.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(claims: usize) -> Node {
        Node {
            cause: FailureCause::NeverWritten,
            chain: Vec::new(),
            writes: Vec::new(),
            claims,
        }
    }

    #[test]
    fn the_newest_and_the_older_nodes_are_found_changed_and_removed_alike() {
        let (a, b, c) = (FailureId::new(1), FailureId::new(2), FailureId::new(3));
        let mut nodes = Nodes::default();
        nodes.insert(a, node(1));
        nodes.insert(b, node(2));
        nodes.insert(c, node(3));
        assert_eq!(nodes.len(), 3);
        for (id, claims) in [(a, 1), (b, 2), (c, 3)] {
            assert_eq!(nodes.get(&id).map(|n| n.claims), Some(claims), "{id}");
        }
        nodes.get_mut(&a).expect("older").claims = 10;
        nodes.get_mut(&c).expect("newest").claims = 30;
        assert_eq!(nodes.remove(&c).map(|n| n.claims), Some(30));
        assert!(!nodes.contains_key(&c));
        assert_eq!(nodes.remove(&a).map(|n| n.claims), Some(10));
        assert!(nodes.remove(&a).is_none(), "removed once");
        assert!(nodes.contains_key(&b));
        assert_eq!(nodes.len(), 1);
        // A node made after the newest was removed is the newest; the older stay.
        nodes.insert(FailureId::new(4), node(4));
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes.get(&b).map(|n| n.claims), Some(2));
    }
}
