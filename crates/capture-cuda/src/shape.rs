//! `GraphShape`: what the driver made of a sealed window, as its nodes and edges (from
//! `cuGraphGetEdges_v2`), for checking the order the capture recorded on a GPU as on the
//! driver model: a programmatic launch's programmatic edge, a fork's fan-out, a join.

/// An edge of a captured graph: `to` runs after `from` (node places in
/// `cuGraphGetNodes`' order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphEdge {
    /// The node it starts at.
    pub from: usize,
    /// The node that depends on it.
    pub to: usize,
    /// A programmatic edge (`CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC`): `to` may start
    /// while `from` finishes, and waits for it itself.
    pub programmatic: bool,
}

/// A captured graph's nodes and edges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GraphShape {
    /// How many nodes.
    pub nodes: usize,
    /// Its edges.
    pub edges: Vec<GraphEdge>,
}

impl GraphShape {
    /// How many of its edges are programmatic.
    pub fn programmatic_edges(&self) -> usize {
        self.edges.iter().filter(|e| e.programmatic).count()
    }

    /// The most edges leaving one node: 2 or more where a fork lets branches run side
    /// by side.
    pub fn widest_fan_out(&self) -> usize {
        (0..self.nodes)
            .map(|n| self.edges.iter().filter(|e| e.from == n).count())
            .max()
            .unwrap_or(0)
    }

    /// The most edges entering one node: 2 or more where a join orders a node after
    /// several branches.
    pub fn widest_fan_in(&self) -> usize {
        (0..self.nodes)
            .map(|n| self.edges.iter().filter(|e| e.to == n).count())
            .max()
            .unwrap_or(0)
    }

    /// Whether two of its nodes are ordered by no path of edges, either way: what lets
    /// a GPU run unjoined branches side by side (a graph made a chain has none).
    pub fn has_unordered_nodes(&self) -> bool {
        (0..self.nodes)
            .any(|a| (a + 1..self.nodes).any(|b| !self.follows(b, a) && !self.follows(a, b)))
    }

    /// Whether node `to` runs after node `from` (a path of edges leads there).
    pub fn follows(&self, to: usize, from: usize) -> bool {
        let mut seen = vec![false; self.nodes];
        let mut stack = vec![from];
        while let Some(n) = stack.pop() {
            if n == to {
                return true;
            }
            if n < seen.len() && !std::mem::replace(&mut seen[n], true) {
                stack.extend(self.edges.iter().filter(|e| e.from == n).map(|e| e.to));
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fork_and_join_read_as_fan_out_fan_in_and_unordered_branches() {
        // 0 -> {1, 2} -> 3, the edge 0 -> 2 programmatic.
        let e = |from, to, programmatic| GraphEdge {
            from,
            to,
            programmatic,
        };
        let shape = GraphShape {
            nodes: 4,
            edges: vec![
                e(0, 1, false),
                e(0, 2, true),
                e(1, 3, false),
                e(2, 3, false),
            ],
        };
        assert_eq!(shape.widest_fan_out(), 2);
        assert_eq!(shape.widest_fan_in(), 2);
        assert_eq!(shape.programmatic_edges(), 1);
        assert!(shape.follows(3, 0));
        assert!(!shape.follows(2, 1) && !shape.follows(1, 2));
        assert!(shape.has_unordered_nodes());
        let chain = GraphShape {
            nodes: 3,
            edges: vec![e(0, 1, false), e(1, 2, false)],
        };
        assert!(!chain.has_unordered_nodes());
    }
}
