//! `CudaExecutable`: an instantiated CUDA graph and the graph it came from, destroyed on
//! drop (the core drops it behind the event after its last launch), with its loop graph
//! (rule 30) once a loop replay made one.

use std::sync::{Arc, Mutex};

use crate::gpu::Gpu;
use crate::loops::LoopGraph;
use crate::raw;

/// A replayable capture.
pub struct CudaExecutable {
    pub(crate) gpu: Arc<Gpu>,
    pub(crate) graph: usize,
    pub(crate) exec: usize,
    /// The graph node each recorded launch made, in the window's order of launches and
    /// work (`None` for work, which may make many), for a slot's update.
    pub(crate) nodes: Vec<Option<usize>>,
    /// The events its window ordered its lanes with (rule 28), kept as long as the
    /// graph and never reused by another capture.
    pub(crate) edges: Vec<usize>,
    /// Its loop graphs (rule 30), built at its first loop replay: the last one serves
    /// the next loop; an earlier one, built over another flag or counter, is kept until
    /// the executable goes, as a loop of it may still be queued.
    pub(crate) loops: Mutex<Vec<LoopGraph>>,
}

impl Drop for CudaExecutable {
    fn drop(&mut self) {
        match raw::Current::enter(self.gpu.context) {
            Ok(_current) => {
                self.loops
                    .get_mut()
                    .unwrap_or_else(|p| p.into_inner())
                    .clear();
                raw::exec_destroy(self.exec);
                raw::graph_destroy(self.graph);
                for event in self.edges.drain(..) {
                    raw::event_destroy(event);
                }
            }
            Err(error) => {
                tracing::warn!(target: "capture", %error, "a CUDA graph could not be destroyed");
            }
        }
    }
}
