//! `GraphOwner`: what a [`GraphHandle`](crate::GraphHandle) and its slot handles reach
//! their graph through (the device's shared state, held weakly, so a handle outliving
//! its device does nothing).

use super::graph_slots::SlotUpdate;
use crate::error::ServerError;
use crate::ids::GraphId;
use crate::slot_table::{SlotInfo, SlotName};

/// What a handle releases and updates its graph through: the device's shared state,
/// held weakly.
pub(crate) trait GraphOwner: Send + Sync {
    /// Releases `graph` behind its last replay's fence; nothing if it is gone already.
    fn release(&self, graph: GraphId);
    /// Updates slots of `graph` (rule 26), all or nothing.
    fn update(
        &self,
        graph: GraphId,
        updates: Vec<(SlotName, SlotUpdate)>,
    ) -> Result<(), ServerError>;
    /// The slots of `graph`.
    fn slots(&self, graph: GraphId) -> Result<Vec<SlotInfo>, ServerError>;
}

/// An owner that never was: what a handle taken apart by its device holds, so its weak
/// reference upgrades to nothing.
pub(crate) struct Dead;

impl GraphOwner for Dead {
    fn release(&self, _graph: GraphId) {}

    fn update(
        &self,
        graph: GraphId,
        _updates: Vec<(SlotName, SlotUpdate)>,
    ) -> Result<(), ServerError> {
        Err(ServerError::UnknownGraph(graph))
    }

    fn slots(&self, graph: GraphId) -> Result<Vec<SlotInfo>, ServerError> {
        Err(ServerError::UnknownGraph(graph))
    }
}
