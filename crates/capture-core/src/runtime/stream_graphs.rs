//! `StreamGraphs`: the graphs captured on one pooled stream, each with what its capture
//! kept beside it (the slots its launches named, rule 26; its stop flag and iteration
//! counter, rule 30), and what the open window has recorded of those so far.
//!
//! The three move together: sealing a window moves its slots and flag into the new
//! graph's entry, dropping a graph drops its slots and loop with it, and a window that
//! opens, aborts or seals nothing starts from nothing. Pool membership (rule 23) stays
//! with the pooled stream (`membership.rs`), as joining and leaving a pool change the
//! device's pool registry too.

use std::collections::BTreeMap;

use super::graph_slots::GraphSlots;
use super::loop_data::{GraphLoop, WindowLoop};
use crate::capture::Graph;
use crate::driver::Backend;
use crate::ids::GraphId;

/// The graphs captured on one pooled stream, which replay only there.
pub(crate) struct StreamGraphs<B: Backend> {
    graphs: BTreeMap<GraphId, Graph<B>>,
    /// The slots the open window's launches named so far (rule 26).
    window_slots: GraphSlots<B>,
    /// The slots of each graph that named any.
    slots: BTreeMap<GraphId, GraphSlots<B>>,
    /// What the open window recorded that rule 30 looks at (its stop flag).
    window_loop: WindowLoop<B>,
    /// The loop of each graph whose capture named a stop flag.
    loops: BTreeMap<GraphId, GraphLoop<B>>,
}

impl<B: Backend> Default for StreamGraphs<B> {
    fn default() -> Self {
        Self {
            graphs: BTreeMap::new(),
            window_slots: GraphSlots::default(),
            slots: BTreeMap::new(),
            window_loop: WindowLoop::default(),
            loops: BTreeMap::new(),
        }
    }
}

impl<B: Backend> StreamGraphs<B> {
    pub(crate) fn get(&self, graph: GraphId) -> Option<&Graph<B>> {
        self.graphs.get(&graph)
    }

    pub(crate) fn get_mut(&mut self, graph: GraphId) -> Option<&mut Graph<B>> {
        self.graphs.get_mut(&graph)
    }

    /// A window opened, aborted or sealed nothing: nothing of it recorded yet.
    pub(crate) fn open_window(&mut self) {
        self.window_slots = GraphSlots::default();
        self.window_loop = WindowLoop::default();
    }

    /// The open window sealed into `graph`: its slots and stop flag go with it.
    pub(crate) fn seal(&mut self, id: GraphId, graph: Graph<B>) {
        self.graphs.insert(id, graph);
        let slots = std::mem::take(&mut self.window_slots);
        if !slots.is_empty() {
            self.slots.insert(id, slots);
        }
        if let Some(flag) = std::mem::take(&mut self.window_loop).flag {
            let counter = None;
            self.loops.insert(id, GraphLoop { flag, counter });
        }
    }

    /// Takes `graph` out, with its slots and loop.
    pub(crate) fn remove(&mut self, graph: GraphId) -> Option<Graph<B>> {
        self.slots.remove(&graph);
        self.loops.remove(&graph);
        self.graphs.remove(&graph)
    }

    pub(crate) fn window_slots(&self) -> &GraphSlots<B> {
        &self.window_slots
    }

    pub(crate) fn window_slots_mut(&mut self) -> &mut GraphSlots<B> {
        &mut self.window_slots
    }

    /// The slots of `graph`, if its launches named any.
    pub(crate) fn slots(&self, graph: GraphId) -> Option<&GraphSlots<B>> {
        self.slots.get(&graph)
    }

    /// `graph` and its slots, to change both (a slot update).
    pub(crate) fn with_slots_mut(
        &mut self,
        graph: GraphId,
    ) -> Option<(&mut Graph<B>, &mut GraphSlots<B>)> {
        Some((self.graphs.get_mut(&graph)?, self.slots.get_mut(&graph)?))
    }

    pub(crate) fn window_loop(&self) -> &WindowLoop<B> {
        &self.window_loop
    }

    pub(crate) fn window_loop_mut(&mut self) -> &mut WindowLoop<B> {
        &mut self.window_loop
    }

    /// The loop of `graph`, if its capture named a stop flag.
    pub(crate) fn graph_loop(&self, graph: GraphId) -> Option<&GraphLoop<B>> {
        self.loops.get(&graph)
    }

    pub(crate) fn graph_loop_mut(&mut self, graph: GraphId) -> Option<&mut GraphLoop<B>> {
        self.loops.get_mut(&graph)
    }
}
