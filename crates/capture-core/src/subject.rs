//! `Subject`: what an error names (a buffer or some of its bytes, a graph, a stream, a
//! kernel, a graph pool), as a typed id a caller can match on, with the label the
//! program gave it where it has one. An error renders its subject once, through
//! `Display`; labels are filled in by id as the error leaves the device, never by
//! reading a rendered message.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use crate::ids::{GraphId, GraphPoolId, KernelId, MemoryId, StreamId};

/// What an error names. See the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Subject {
    /// A buffer (its memory).
    Buffer {
        /// The buffer's memory.
        memory: MemoryId,
        /// Its label, when the program gave it one.
        label: Option<Arc<str>>,
    },
    /// Bytes of a buffer, as a call gave them: `len` bytes at `offset` of a buffer of
    /// `size` bytes (the range may be the thing refused: empty, overflowing, past the end).
    Bytes {
        /// The buffer's memory.
        memory: MemoryId,
        /// Its label, when the program gave it one.
        label: Option<Arc<str>>,
        /// The first byte asked for.
        offset: u64,
        /// How many bytes were asked for.
        len: u64,
        /// The buffer's size in bytes.
        size: u64,
    },
    /// A graph.
    Graph {
        /// The graph.
        graph: GraphId,
        /// Its label, when the program gave it one.
        label: Option<Arc<str>>,
    },
    /// A logical stream.
    Stream(StreamId),
    /// A registered kernel.
    Kernel {
        /// The kernel's id on its device.
        kernel: KernelId,
        /// Its name (empty when the device that refused it does not know it).
        name: Cow<'static, str>,
    },
    /// A graph pool.
    Pool {
        /// The pool.
        pool: GraphPoolId,
        /// Its label.
        label: Option<Arc<str>>,
    },
}

impl Subject {
    /// A buffer, unlabelled until the error leaves the device.
    pub fn buffer(memory: MemoryId) -> Self {
        Self::Buffer {
            memory,
            label: None,
        }
    }

    /// `len` bytes at `offset` of a buffer of `size` bytes.
    pub fn bytes(memory: MemoryId, offset: u64, len: u64, size: u64) -> Self {
        Self::Bytes {
            memory,
            label: None,
            offset,
            len,
            size,
        }
    }

    /// A graph, unlabelled until the error leaves the device.
    pub fn graph(graph: GraphId) -> Self {
        Self::Graph { graph, label: None }
    }

    /// The buffer's memory, when the subject is a buffer or some of its bytes.
    pub fn memory(&self) -> Option<MemoryId> {
        match self {
            Self::Buffer { memory, .. } | Self::Bytes { memory, .. } => Some(*memory),
            _ => None,
        }
    }

    /// The graph, when the subject is one.
    pub fn graph_id(&self) -> Option<GraphId> {
        match self {
            Self::Graph { graph, .. } => Some(*graph),
            _ => None,
        }
    }

    /// The stream, when the subject is one.
    pub fn stream(&self) -> Option<StreamId> {
        match self {
            Self::Stream(s) => Some(*s),
            _ => None,
        }
    }

    /// The kernel, when the subject is one.
    pub fn kernel(&self) -> Option<KernelId> {
        match self {
            Self::Kernel { kernel, .. } => Some(*kernel),
            _ => None,
        }
    }

    /// The graph pool, when the subject is one.
    pub fn pool(&self) -> Option<GraphPoolId> {
        match self {
            Self::Pool { pool, .. } => Some(*pool),
            _ => None,
        }
    }

    /// The label shown beside the id, if any.
    pub fn label(&self) -> Option<&str> {
        match self {
            Self::Buffer { label, .. }
            | Self::Bytes { label, .. }
            | Self::Graph { label, .. }
            | Self::Pool { label, .. } => label.as_deref(),
            Self::Stream(_) | Self::Kernel { .. } => None,
        }
    }

    /// Fills in the label of a labelled buffer or graph (one it has is kept).
    pub(crate) fn name(
        &mut self,
        memory: impl Fn(MemoryId) -> Option<Arc<str>>,
        graph: impl Fn(GraphId) -> Option<Arc<str>>,
    ) {
        match self {
            Self::Buffer { memory: m, label }
            | Self::Bytes {
                memory: m, label, ..
            } if label.is_none() => *label = memory(*m),
            Self::Graph { graph: g, label } if label.is_none() => *label = graph(*g),
            _ => {}
        }
    }
}

/// ` "label"` after an id, or nothing.
pub(crate) struct Label<'a>(pub(crate) Option<&'a str>);

impl fmt::Display for Label<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(label) => write!(f, " \"{label}\""),
            None => Ok(()),
        }
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Buffer { memory, label } => write!(f, "{memory}{}", Label(label.as_deref())),
            Self::Bytes {
                memory,
                label,
                offset,
                len,
                size,
            } => write!(
                f,
                "{memory}{}[{offset}+{len}] ({size} B)",
                Label(label.as_deref())
            ),
            Self::Graph { graph, label } => write!(f, "{graph}{}", Label(label.as_deref())),
            Self::Stream(stream) => write!(f, "{stream}"),
            Self::Kernel { kernel, name } if name.is_empty() => {
                write!(f, "kernel#{}", kernel.index())
            }
            Self::Kernel { kernel, name } => write!(f, "kernel {name} (kernel#{})", kernel.index()),
            Self::Pool { pool, label } => write!(f, "{pool}{}", Label(label.as_deref())),
        }
    }
}

/// ` {subject}` when there is one: how a variant with an optional subject renders it.
pub(crate) struct Of<'a>(pub(crate) &'a Option<Box<Subject>>);

impl fmt::Display for Of<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(subject) => write!(f, " {subject}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_renders_its_id_once_with_its_label() {
        let mut b = Subject::bytes(MemoryId::new(3), 0, 8, 4);
        assert_eq!(b.to_string(), "buf#3[0+8] (4 B)");
        b.name(
            |m| (m == MemoryId::new(3)).then(|| Arc::from("kv")),
            |_| None,
        );
        assert_eq!(b.to_string(), "buf#3 \"kv\"[0+8] (4 B)");
        assert_eq!(b.memory(), Some(MemoryId::new(3)));
        assert_eq!(b.label(), Some("kv"));
        let mut g = Subject::graph(GraphId::new(1));
        g.name(|_| None, |_| Some(Arc::from("step")));
        assert_eq!(g.to_string(), "graph#1 \"step\"");
        // A label it has is kept.
        g.name(|_| None, |_| Some(Arc::from("other")));
        assert_eq!(g.label(), Some("step"));
        assert_eq!(Subject::Stream(StreamId::new(2)).to_string(), "stream#2");
        assert_eq!(Of(&None).to_string(), "");
        assert_eq!(
            Of(&Some(Box::new(Subject::Stream(StreamId::new(0))))).to_string(),
            " stream#0"
        );
    }
}
