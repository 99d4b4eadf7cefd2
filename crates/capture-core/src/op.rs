//! `Op`: what an error or trace line says ran, was skipped or doomed a window (a kernel's
//! launch, the program's own work, a graph's replay, a first load, or one of the
//! device's calls), as typed ids a caller can match on. It renders once, through
//! `Display`; a replayed graph's label is filled in by id as the error leaves the device.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use crate::ids::{GraphId, KernelId, StreamId, WorkId};
use crate::subject::Label;

/// An operation an error names. See the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    /// A launch of a registered kernel (renders as its name: `add_one`).
    Launch {
        /// The kernel.
        kernel: KernelId,
        /// Its name.
        name: Cow<'static, str>,
    },
    /// The program's own work ([`Device::foreign_work`](crate::Device::foreign_work)),
    /// rendered as its name.
    Work {
        /// The work's interned name.
        work: WorkId,
        /// Its name.
        name: Cow<'static, str>,
    },
    /// A replay of a graph (`replay graph#1 "decode"`).
    Replay {
        /// The graph.
        graph: GraphId,
        /// Its label, when the program gave it one.
        label: Option<Arc<str>>,
    },
    /// A kernel's first load (`load add_one`), refused inside a window.
    Load {
        /// The kernel.
        kernel: KernelId,
        /// Its name.
        name: Cow<'static, str>,
    },
    /// One of the device's calls, by its name (`alloc`, `write`, `end`, `abort`, `fork`,
    /// `join`, `instantiate`).
    Call(&'static str),
}

impl Op {
    /// A replay of `graph`, unlabelled until the error leaves the device.
    pub fn replay(graph: GraphId) -> Self {
        Self::Replay { graph, label: None }
    }

    /// The kernel launched or loaded, if the operation is a launch or load.
    pub fn kernel(&self) -> Option<KernelId> {
        match self {
            Self::Launch { kernel, .. } | Self::Load { kernel, .. } => Some(*kernel),
            _ => None,
        }
    }

    /// The work run, if the operation is the program's own work.
    pub fn work(&self) -> Option<WorkId> {
        match self {
            Self::Work { work, .. } => Some(*work),
            _ => None,
        }
    }

    /// The graph replayed, if the operation is a replay.
    pub fn graph(&self) -> Option<GraphId> {
        match self {
            Self::Replay { graph, .. } => Some(*graph),
            _ => None,
        }
    }

    /// The kernel's or work's name, or the call's; a replay has none.
    pub fn name(&self) -> Option<&str> {
        match self {
            Self::Launch { name, .. } | Self::Work { name, .. } | Self::Load { name, .. } => {
                Some(name)
            }
            Self::Call(call) => Some(call),
            Self::Replay { .. } => None,
        }
    }

    /// Fills in a replayed graph's label (one it has is kept).
    pub(crate) fn name_graph(&mut self, graph: impl Fn(GraphId) -> Option<Arc<str>>) {
        if let Self::Replay { graph: g, label } = self
            && label.is_none()
        {
            *label = graph(*g);
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Launch { name, .. } | Self::Work { name, .. } => f.write_str(name),
            Self::Replay { graph, label } => {
                write!(f, "replay {graph}{}", Label(label.as_deref()))
            }
            Self::Load { name, .. } => write!(f, "load {name}"),
            Self::Call(call) => f.write_str(call),
        }
    }
}

/// What read claimed bytes when it was not a host read: an operation on a stream, in a
/// window's recording or not. Renders as `launch of add_one on stream#0`,
/// `recorded work of gemm on stream#1`, `replay of graph#2 on stream#0`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadBy {
    /// The operation.
    pub op: Op,
    /// The stream it was issued on.
    pub stream: StreamId,
    /// Whether it was being recorded into a window (nothing ran) rather than run.
    pub recorded: bool,
}

impl fmt::Display for ReadBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.recorded {
            f.write_str("recorded ")?;
        }
        match &self.op {
            Op::Launch { name, .. } => write!(f, "launch of {name}")?,
            Op::Work { name, .. } => write!(f, "work of {name}")?,
            Op::Replay { graph, label } => {
                write!(f, "replay of {graph}{}", Label(label.as_deref()))?
            }
            op => write!(f, "{op}")?,
        }
        write!(f, " on {}", self.stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_op_renders_what_ran_once_with_its_graph_label() {
        let launch = Op::Launch {
            kernel: KernelId(0),
            name: Cow::Borrowed("add_one"),
        };
        assert_eq!(launch.to_string(), "add_one");
        assert_eq!(launch.kernel(), Some(KernelId(0)));
        let mut replay = Op::replay(GraphId::new(1));
        assert_eq!(replay.to_string(), "replay graph#1");
        replay.name_graph(|g| (g == GraphId::new(1)).then(|| Arc::from("decode")));
        assert_eq!(replay.to_string(), "replay graph#1 \"decode\"");
        replay.name_graph(|_| Some(Arc::from("other")));
        assert_eq!(
            replay.to_string(),
            "replay graph#1 \"decode\"",
            "a label is kept"
        );
        let load = Op::Load {
            kernel: KernelId(2),
            name: Cow::Borrowed("k"),
        };
        assert_eq!(load.to_string(), "load k");
        assert_eq!(Op::Call("end").to_string(), "end");
    }

    #[test]
    fn a_reader_says_what_read_on_which_stream() {
        let by = ReadBy {
            op: Op::Work {
                work: WorkId(0),
                name: Cow::Borrowed("gemm"),
            },
            stream: StreamId::new(1),
            recorded: true,
        };
        assert_eq!(by.to_string(), "recorded work of gemm on stream#1");
        let by = ReadBy {
            op: Op::replay(GraphId::new(2)),
            stream: StreamId::new(0),
            recorded: false,
        };
        assert_eq!(by.to_string(), "replay of graph#2 on stream#0");
    }
}
