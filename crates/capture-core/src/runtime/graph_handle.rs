//! [`GraphHandle`]: a captured graph as its user holds it. It names the device that
//! captured it, so another device refuses it (rule 24), and dropping it releases the
//! graph as [`Device::drop_graph`](crate::Device::drop_graph) does: behind the fence of
//! its last replay, never blocking. A handle that outlives its device does nothing when
//! dropped (the device released its graphs when it went).

use std::fmt;
use std::sync::Weak;

use crate::ids::GraphId;

/// What a handle releases its graph through: the device's shared state, held weakly.
pub(crate) trait GraphOwner: Send + Sync {
    /// Releases `graph` behind its last replay's fence; nothing if it is gone already.
    fn release(&self, graph: GraphId);
}

/// A captured graph: what [`Device::capture`](crate::Device::capture) and
/// [`Device::end`](crate::Device::end) return, and what
/// [`replay`](crate::Device::replay) takes.
///
/// It belongs to the device that captured it: any other device refuses it
/// ([`ServerError::InvalidArgument`](crate::ServerError::InvalidArgument), `what:
/// "graph"`), as a buffer of another device is refused. Dropping it releases the graph
/// (its executable, its pins, its recorded work) behind the fence of its last replay,
/// never blocking; [`Device::drop_graph`](crate::Device::drop_graph) does the same and
/// says whether it could. Not `Clone`: one owner releases it once.
///
/// ```
/// use capture_graphs::mock::MockBackend;
/// use capture_graphs::{Arg, Builtin, Device, DeviceConfig, ServerError, StreamId};
///
/// let (a, b) = (
///     Device::new(MockBackend::new(), DeviceConfig::new())?,
///     Device::new(MockBackend::new(), DeviceConfig::new())?,
/// );
/// let s = StreamId::new(0);
/// let x = a.alloc(s, 16)?;
/// let fill = a.builtin(Builtin::Fill);
/// let graph = a.capture(s, |d| {
///     d.launch(s, &fill, [1, 1, 1], &[Arg::write(&x)], &Builtin::Fill.info(4, 1.0))
/// })?;
/// // Another device's graph is refused, and nothing runs.
/// let err = b.replay(s, &graph, 1).unwrap_err();
/// assert!(matches!(err, ServerError::InvalidArgument { what: "graph", .. }));
/// a.replay(s, &graph, 1)?;
/// drop(graph); // released behind its replay's fence
/// assert!(a.captures().active().is_empty());
/// # Ok::<(), ServerError>(())
/// ```
pub struct GraphHandle {
    id: GraphId,
    device: u64,
    /// `None` once released (explicitly, or taken apart by the device).
    owner: Option<Weak<dyn GraphOwner>>,
}

impl GraphHandle {
    pub(crate) fn new(id: GraphId, device: u64, owner: Weak<dyn GraphOwner>) -> Self {
        Self {
            id,
            device,
            owner: Some(owner),
        }
    }

    /// The graph's logical id, as traces, reports and errors name it (`graph#1`).
    pub fn id(&self) -> GraphId {
        self.id
    }

    /// The serial of the device that captured it.
    pub(crate) fn device(&self) -> u64 {
        self.device
    }

    /// The id, the handle spent without releasing anything: the caller releases the
    /// graph itself.
    pub(crate) fn into_id(mut self) -> GraphId {
        self.owner = None;
        self.id
    }
}

impl Drop for GraphHandle {
    fn drop(&mut self) {
        if let Some(owner) = self.owner.take().and_then(|w| w.upgrade()) {
            owner.release(self.id);
        }
    }
}

impl fmt::Debug for GraphHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GraphHandle({})", self.id)
    }
}

impl fmt::Display for GraphHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.id, f)
    }
}
