//! Labels: the names a user gives buffers and graphs ([`Device::label`],
//! [`Device::label_graph`]), shown beside the logical id in errors, the trace and the
//! memory report (`buf#6 "kv_cache"`), so an id can be mapped back to the program.
//!
//! A label is kept while its buffer's memory or its graph lives; ids are never reused on
//! a device, so a label can never be shown beside memory it was not given to. Errors
//! are named as they leave the device ([`Labels::name`]): every id of a labelled buffer
//! or graph an error mentions, in any of its fields or nested causes, gets its label.
//! The trace records each label as an event and renders later lines with it, so the
//! rendering depends only on the events, as before.
//!
//! [`Device::label`]: crate::Device::label
//! [`Device::label_graph`]: crate::Device::label_graph

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::error::{FailureCause, ServerError};
use crate::ids::{GraphId, MemoryId};
use crate::lock_order::{Held, Level};

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
    fn of(&self, kind: Kind, index: u64) -> Option<&Arc<str>> {
        match kind {
            Kind::Memory => self.memory.get(&MemoryId::new(index)),
            Kind::Graph => self.graphs.get(&GraphId::new(index)),
        }
    }
}

/// Which kind of id a label stands beside.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Memory,
    Graph,
}

/// The prefixes of the ids a label can stand beside, as `MemoryId` and `GraphId` render.
const PREFIXES: [(&str, Kind); 2] = [("buf#", Kind::Memory), ("graph#", Kind::Graph)];

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
    let text = |s: Cow<'static, str>| -> Cow<'static, str> {
        match annotate(&s, |kind, index| table.of(kind, index).map(|l| &**l)) {
            Some(named) => Cow::Owned(named),
            None => s,
        }
    };
    let string = |s: String| -> String {
        annotate(&s, |kind, index| table.of(kind, index).map(|l| &**l)).unwrap_or(s)
    };
    match error {
        ServerError::GraphState { op, reason } => ServerError::GraphState {
            op,
            reason: text(reason),
        },
        ServerError::InvalidBinding { binding, reason } => ServerError::InvalidBinding {
            binding: string(binding),
            reason: text(reason),
        },
        ServerError::InvalidArgument {
            what,
            value,
            reason,
        } => ServerError::InvalidArgument {
            what,
            value: string(value),
            reason: text(reason),
        },
        ServerError::Unwritten(mut u) => {
            if u.label.is_none() {
                u.label = table.memory.get(&u.memory).cloned();
            }
            u.by = u.by.map(text);
            u.cause = match u.cause {
                FailureCause::Failed(e) => FailureCause::Failed(name_error(table, e)),
                FailureCause::Unfinished { op } => FailureCause::Unfinished { op: text(op) },
                other => other,
            };
            for s in &mut u.chain {
                s.op = text(std::mem::take(&mut s.op));
                if s.input_label.is_none() {
                    s.input_label = table.memory.get(&s.input).cloned();
                }
            }
            ServerError::Unwritten(u)
        }
        ServerError::Doomed(mut pm) => {
            pm.op = text(std::mem::take(&mut pm.op));
            pm.cause = name_error(table, pm.cause);
            ServerError::Doomed(pm)
        }
        ServerError::OutOfMemory(mut oom) => {
            for g in &mut oom.graphs {
                if g.label.is_none() {
                    g.label = table.graphs.get(&g.graph).cloned();
                }
            }
            ServerError::OutOfMemory(oom)
        }
        ServerError::Several(all) => {
            ServerError::Several(all.into_iter().map(|e| name_error(table, e)).collect())
        }
        other => other,
    }
}

/// `text` with `label_of`'s label after every `buf#N` and `graph#N` that has one, or
/// `None` when nothing changed. An id already followed by a label is left alone.
pub(crate) fn annotate<'t>(
    text: &str,
    label_of: impl Fn(Kind, u64) -> Option<&'t str>,
) -> Option<String> {
    let mut out = String::new();
    let mut copied = 0;
    let mut at = 0;
    let bytes = text.as_bytes();
    while at < bytes.len() {
        let Some((prefix, kind)) = PREFIXES
            .iter()
            .find(|(p, _)| text[at..].starts_with(p) && starts_word(bytes, at))
        else {
            at += text[at..].chars().next().map_or(1, char::len_utf8);
            continue;
        };
        let digits_at = at + prefix.len();
        let digits = bytes[digits_at..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        let end = digits_at + digits;
        let labelled = text[end..].starts_with(" \"");
        let label = text[digits_at..end]
            .parse()
            .ok()
            .filter(|_| digits > 0 && !labelled)
            .and_then(|index| label_of(*kind, index));
        if let Some(label) = label {
            out.push_str(&text[copied..end]);
            out.push_str(" \"");
            out.push_str(label);
            out.push('"');
            copied = end;
        }
        at = end.max(at + 1);
    }
    if copied == 0 {
        return None;
    }
    out.push_str(&text[copied..]);
    Some(out)
}

/// Whether an id starting at `at` begins a word (`xbuf#1` is not `buf#1`).
fn starts_word(bytes: &[u8], at: usize) -> bool {
    at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_')
}

/// The labels the trace has seen so far, as it renders.
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

    /// `line` with the labels seen so far beside their ids.
    pub(crate) fn apply(&self, line: String) -> String {
        if self.table.memory.is_empty() && self.table.graphs.is_empty() {
            return line;
        }
        annotate(&line, |kind, index| {
            self.table.of(kind, index).map(|l| &**l)
        })
        .unwrap_or(line)
    }
}

#[cfg(test)]
mod tests;
