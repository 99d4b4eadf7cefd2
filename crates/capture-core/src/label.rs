//! Labels: the names a user gives buffers and graphs ([`Device::label`],
//! [`Device::label_graph`]), shown beside the logical id in errors, the trace and the
//! memory report (`buf#6 "kv_cache"`), so an id can be mapped back to the program.
//!
//! A label is kept while its buffer's memory or its graph lives; ids are never reused on
//! a device, so a label can never be shown beside memory it was not given to. Errors
//! are named as they leave the device ([`Labels::name`]): every id of a labelled buffer
//! or graph an error names, in its subject or a nested cause, gets its label, found by
//! its typed id (no message is read back). The trace records each label as an event and
//! renders the ids of later lines with it, so the rendering depends only on the events.
//!
//! [`Device::label`]: crate::Device::label
//! [`Device::label_graph`]: crate::Device::label_graph

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::error::{FailureCause, ServerError};
use crate::ids::{GraphId, MemoryId};
use crate::lock_order::{Held, Level};
use crate::memory::ClaimKey;
use crate::op::Op;
use crate::range::ByteRange;
use crate::subject::Subject;

/// The longest label accepted, in bytes.
pub const MAX_LABEL_BYTES: usize = 64;

/// A checked label: 1 to [`MAX_LABEL_BYTES`] bytes, no control characters and no `"`,
/// so it reads unambiguously inside a message.
pub(crate) fn checked(label: &str) -> Result<Arc<str>, ServerError> {
    let refuse = |why: &'static str| Err(ServerError::invalid("label", format!("{label:?}"), why));
    if label.is_empty() {
        return refuse("a label names at least one character");
    }
    if label.len() > MAX_LABEL_BYTES {
        return refuse("a label is at most 64 bytes");
    }
    if label.chars().any(|c| c.is_control() || c == '"') {
        return refuse("a label holds no control characters and no '\"'");
    }
    Ok(Arc::from(label))
}

/// The labels of one device's live buffers and graphs.
#[derive(Debug, Default)]
pub(crate) struct Labels {
    /// Whether any label was ever given: naming an error is free until one is.
    any: AtomicBool,
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    memory: HashMap<MemoryId, Arc<str>>,
    graphs: HashMap<GraphId, Arc<str>>,
}

impl Table {
    fn memory(&self, memory: MemoryId) -> Option<Arc<str>> {
        self.memory.get(&memory).cloned()
    }

    fn graph(&self, graph: GraphId) -> Option<Arc<str>> {
        self.graphs.get(&graph).cloned()
    }
}

impl Labels {
    fn table(&self) -> (Held, MutexGuard<'_, Table>) {
        let held = Held::enter(Level::Labels);
        let table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        (held, table)
    }

    /// Gives `memory` the label `label` (replacing any it had).
    pub(crate) fn set_memory(&self, memory: MemoryId, label: Arc<str>) {
        self.table().1.memory.insert(memory, label);
        self.any.store(true, Ordering::Release);
    }

    /// Gives `graph` the label `label` (replacing any it had).
    pub(crate) fn set_graph(&self, graph: GraphId, label: Arc<str>) {
        self.table().1.graphs.insert(graph, label);
        self.any.store(true, Ordering::Release);
    }

    /// The label of `memory`, if it has one.
    pub(crate) fn memory(&self, memory: MemoryId) -> Option<Arc<str>> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        self.table().1.memory.get(&memory).cloned()
    }

    /// Forgets the labels of freed memory.
    pub(crate) fn forget_memory(&self, freed: &[MemoryId]) {
        if !self.any.load(Ordering::Acquire) || freed.is_empty() {
            return;
        }
        let (_held, mut table) = self.table();
        for id in freed {
            table.memory.remove(id);
        }
    }

    /// Forgets the label of a dropped graph.
    pub(crate) fn forget_graph(&self, graph: GraphId) {
        if self.any.load(Ordering::Acquire) {
            self.table().1.graphs.remove(&graph);
        }
    }

    /// `result`, its error named ([`name`](Self::name)).
    pub(crate) fn named<T>(&self, result: Result<T, ServerError>) -> Result<T, ServerError> {
        result.map_err(|e| self.name(e))
    }

    /// `error` with the label of every labelled buffer and graph it mentions beside its
    /// id, in every field and nested cause. Free while no label was ever given.
    pub(crate) fn name(&self, error: ServerError) -> ServerError {
        if !self.any.load(Ordering::Acquire) {
            return error;
        }
        let (_held, table) = self.table();
        if table.memory.is_empty() && table.graphs.is_empty() {
            return error;
        }
        name_error(&table, error)
    }
}

fn name_error(table: &Table, error: ServerError) -> ServerError {
    let memory = |m| table.memory(m);
    let graph = |g| table.graph(g);
    let name = |subject: &mut Box<Subject>| subject.name(memory, graph);
    match error {
        ServerError::GraphState {
            op,
            mut subject,
            window,
            reason,
        } => {
            subject.as_mut().map(name);
            ServerError::GraphState {
                op,
                subject,
                window,
                reason,
            }
        }
        ServerError::InvalidBinding { mut buffer, reason } => {
            buffer.name(memory, graph);
            ServerError::InvalidBinding { buffer, reason }
        }
        ServerError::InvalidArgument {
            what,
            mut subject,
            value,
            reason,
        } => {
            subject.as_mut().map(name);
            ServerError::InvalidArgument {
                what,
                subject,
                value,
                reason,
            }
        }
        ServerError::Unwritten(mut u) => {
            if u.label.is_none() {
                u.label = table.memory(u.memory);
            }
            u.cause = match u.cause {
                FailureCause::Failed(e) => FailureCause::Failed(name_error(table, e)),
                FailureCause::Unfinished { mut op } => {
                    op.name_graph(graph);
                    FailureCause::Unfinished { op }
                }
                other => other,
            };
            for s in &mut u.chain {
                if s.input_label.is_none() {
                    s.input_label = table.memory(s.input);
                }
                s.op.name_graph(graph);
            }
            if let Some(by) = &mut u.by {
                by.op.name_graph(graph);
            }
            ServerError::Unwritten(u)
        }
        ServerError::Doomed(mut pm) => {
            pm.op.name_graph(graph);
            pm.cause = name_error(table, pm.cause);
            ServerError::Doomed(pm)
        }
        ServerError::OutOfMemory(mut oom) => {
            for g in &mut oom.graphs {
                if g.label.is_none() {
                    g.label = table.graph(g.graph);
                }
            }
            ServerError::OutOfMemory(oom)
        }
        ServerError::Several(all) => {
            ServerError::Several(all.into_iter().map(|e| name_error(table, e)).collect())
        }
        ServerError::SlotRefused(mut refused) => {
            refused.subject.name(memory, graph);
            if let crate::slot_table::SlotMismatch::BranchRace(race) = &mut refused.mismatch
                && race.label.is_none()
            {
                race.label = table.memory(race.memory);
            }
            ServerError::SlotRefused(refused)
        }
        ServerError::LoopRefused(mut refused) => {
            refused.subject.name(memory, graph);
            ServerError::LoopRefused(refused)
        }
        ServerError::BranchRace(mut race) => {
            if race.label.is_none() {
                race.label = table.memory(race.memory);
            }
            ServerError::BranchRace(race)
        }
        // Nothing these carry takes a label. Listed, not caught by a wildcard: a new
        // variant does not compile until it is decided here what it names.
        error @ (ServerError::AllocInWindow { .. }
        | ServerError::AllocationNodes { .. }
        | ServerError::OtherStreamInCapture { .. }
        | ServerError::Abandoned { .. }
        | ServerError::NeighbourRefused { .. }
        | ServerError::UnknownGraph(_)
        | ServerError::UnknownMemory(_)
        | ServerError::Driver { .. }
        | ServerError::Overwritten { .. }
        | ServerError::BranchRefused(_)
        | ServerError::UnjoinedBranch { .. }) => error,
    }
}

/// The labels the trace has seen so far, as it renders: each id an event names is shown
/// with its label from the event that gave it on.
#[derive(Debug, Default)]
pub(crate) struct RenderLabels {
    table: Table,
}

impl RenderLabels {
    /// Notes a label the trace recorded.
    pub(crate) fn memory(&mut self, memory: MemoryId, label: &Arc<str>) {
        self.table.memory.insert(memory, Arc::clone(label));
    }

    /// Notes a graph label the trace recorded.
    pub(crate) fn graph(&mut self, graph: GraphId, label: &Arc<str>) {
        self.table.graphs.insert(graph, Arc::clone(label));
    }

    /// `memory`, with its label.
    pub(crate) fn of_memory(&self, memory: MemoryId) -> Subject {
        Subject::Buffer {
            memory,
            label: self.table.memory(memory),
        }
    }

    /// `graph`, with its label.
    pub(crate) fn of_graph(&self, graph: GraphId) -> Subject {
        Subject::Graph {
            graph,
            label: self.table.graph(graph),
        }
    }

    /// `op`, a replayed graph with its label.
    pub(crate) fn of_op(&self, op: &Op) -> Op {
        let mut op = op.clone();
        op.name_graph(|g| self.table.graph(g));
        op
    }

    /// `key`'s bytes (`buf#1 "out"[0..4)`).
    pub(crate) fn of_key(&self, key: ClaimKey) -> impl fmt::Display {
        KeyShown(self.of_memory(key.memory), key.range)
    }

    /// `error`, its buffers and graphs named with the labels seen so far.
    pub(crate) fn error(&self, error: &ServerError) -> ServerError {
        name_error(&self.table, error.clone())
    }
}

/// A claim key as the trace shows it: the labelled buffer, then the range.
struct KeyShown(Subject, ByteRange);

impl fmt::Display for KeyShown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.0, self.1)
    }
}

#[cfg(test)]
mod tests;
