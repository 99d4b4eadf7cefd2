//! [`GraphHandle`]: a captured graph as its user holds it. It names the device that
//! captured it, so another device refuses it (rule 24), and dropping it releases the
//! graph as [`Device::drop_graph`](crate::Device::drop_graph) does: behind the fence of
//! its last replay, never blocking. A handle that outlives its device does nothing when
//! dropped (the device released its graphs when it went).

use std::fmt;
use std::sync::{Arc, Weak};

use bytemuck::Pod;

use super::buffer::{Arg, Buffer};
use super::slot_data::SlotUpdate;
use crate::error::ServerError;
use crate::ids::GraphId;
use crate::kernel::{Grid, ScalarValue};
use crate::scalar_type::ScalarParam;
use crate::slot::{SlotInfo, SlotName};

/// What a handle releases and updates its graph through: the device's shared state,
/// held weakly.
pub(crate) trait GraphOwner: Send + Sync {
    /// Releases `graph` behind its last replay's fence; nothing if it is gone already.
    fn release(&self, graph: GraphId);
    /// Updates slot `slot` of `graph` (rule 26).
    fn update(&self, graph: GraphId, slot: SlotName, update: SlotUpdate)
    -> Result<(), ServerError>;
    /// The slots of `graph`.
    fn slots(&self, graph: GraphId) -> Result<Vec<SlotInfo>, ServerError>;
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

    /// The graph's slots (rule 26): each name, what it is and the recorded launches
    /// using it, in the order the capture first named them. Empty for a graph whose
    /// capture named none.
    ///
    /// # Errors
    ///
    /// [`ServerError::UnknownGraph`] once the graph's device is gone.
    pub fn slots(&self) -> Result<Vec<SlotInfo>, ServerError> {
        self.owner()?.slots(self.id)
    }

    /// Sets scalar slot `slot` to `value` (rule 26) for every replay enqueued after
    /// this call; a replay already enqueued runs with the value it was enqueued with.
    /// Every recorded launch using the slot changes; nothing else does.
    ///
    /// ```
    /// use capture_graphs::mock::{MockBackend, MockKernel};
    /// use capture_graphs::{Arg, Device, DeviceConfig, KernelSignature, Param, StreamId};
    ///
    /// // y = x + k, k a scalar.
    /// const ADD: MockKernel = MockKernel {
    ///     name: "add_k",
    ///     signature: KernelSignature::of(&[Param::READ, Param::WRITE, Param::scalar::<u32>()]),
    ///     f: |bufs, words| {
    ///         let k = words[0] as u8;
    ///         let (x, y) = bufs.split_at_mut(1);
    ///         for (o, i) in y[0].iter_mut().zip(&x[0]) {
    ///             *o = i + k;
    ///         }
    ///     },
    /// };
    /// let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// let s = StreamId::new(0);
    /// let (x, y) = (dev.alloc(s, 4)?, dev.alloc(s, 4)?);
    /// dev.write(s, &x, 0, [1u8, 2, 3, 4])?;
    /// let add = dev.kernel(ADD);
    /// let g = dev.capture(s, |d| {
    ///     d.launch(s, &add, [1, 1, 1], &[Arg::read(&x), Arg::write(&y), Arg::scalar(1u32).slot("k")], &[])
    /// })?;
    /// g.set("k", 10u32)?;
    /// dev.replay(s, &g, 1)?;
    /// assert_eq!(dev.read(s, &y)?, [11, 12, 13, 14]);
    /// // Another size than recorded is refused, and changes nothing.
    /// assert!(g.set("k", 1u8).is_err());
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ServerError::SlotRefused`] naming the slot and what differs: no such slot, not
    /// a scalar, another size, another type (an `i32` or `f32` for a `u32` slot); the
    /// backend's refusal (then nothing changed either); [`ServerError::UnknownGraph`]
    /// once the graph is gone.
    pub fn set<T: Pod + ScalarParam>(&self, slot: &str, value: T) -> Result<(), ServerError> {
        let value = ScalarValue::of(bytemuck::bytes_of(&value), Some(T::ELEMENT));
        self.owner()?
            .update(self.id, SlotName::new(slot), SlotUpdate::Scalar(value))
    }

    /// As [`set`](Self::set), for a slot recorded with a struct
    /// ([`Arg::scalar_struct`](crate::Arg::scalar_struct)): only its size is checked.
    ///
    /// # Errors
    ///
    /// As [`set`](Self::set); a slot recorded with a typed value refuses a struct.
    pub fn set_struct<T: Pod>(&self, slot: &str, value: T) -> Result<(), ServerError> {
        let value = ScalarValue::of(bytemuck::bytes_of(&value), None);
        self.owner()?
            .update(self.id, SlotName::new(slot), SlotUpdate::Scalar(value))
    }

    /// Rebinds buffer slot `slot` to the whole of `buffer` (rule 26), for every replay
    /// enqueued after this call: it must be as long as the slot's range and of the
    /// graph's device. From here on the graph pins `buffer` and reads and writes it for
    /// every rule (rule 27: its inputs and outputs, order, lifetimes, pools); the old
    /// buffer's pin is released behind the fence of the last replay that used it.
    ///
    /// # Errors
    ///
    /// [`ServerError::SlotRefused`]: no such slot, not a buffer slot, another length,
    /// another device; [`ServerError::InvalidBinding`] for bytes the device cannot bind;
    /// the backend's refusal; [`ServerError::UnknownGraph`] once the graph is gone.
    /// Nothing changes on any of them.
    pub fn rebind(&self, slot: &str, buffer: &Buffer) -> Result<(), ServerError> {
        self.owner()?.update(
            self.id,
            SlotName::new(slot),
            SlotUpdate::Rebind {
                buffer: buffer.clone(),
                offset: 0,
                len: None,
                access: None,
            },
        )
    }

    /// As [`rebind`](Self::rebind), to the bytes and with the access `arg` gives (a
    /// buffer argument, `Arg::read(&kv).range(offset, len)`): the length and access
    /// must be the slot's.
    ///
    /// # Errors
    ///
    /// As [`rebind`](Self::rebind); [`ServerError::SlotRefused`] for another access;
    /// [`ServerError::InvalidArgument`] for a scalar argument.
    pub fn rebind_to(&self, slot: &str, arg: &Arg) -> Result<(), ServerError> {
        let name = SlotName::new(slot);
        let Some(b) = arg.as_buffer() else {
            return Err(ServerError::invalid(
                "rebind argument",
                "a scalar",
                "a rebind takes a buffer argument (`Arg::read(&buffer)`)",
            ));
        };
        self.owner()?.update(
            self.id,
            name,
            SlotUpdate::Rebind {
                buffer: b.buffer.clone(),
                offset: b.offset,
                len: Some(b.len.unwrap_or(b.buffer.size().saturating_sub(b.offset))),
                access: Some(b.access),
            },
        )
    }

    /// Sets grid slot `slot` to `grid` (rule 26), for every replay enqueued after this
    /// call: within the slot's maximum ([`Dims::up_to`](crate::Dims::up_to), or the
    /// recorded grid) in every dimension, none empty.
    ///
    /// # Errors
    ///
    /// [`ServerError::SlotRefused`]: no such slot, not a grid slot, a grid past the
    /// maximum or with an empty dimension; the backend's refusal;
    /// [`ServerError::UnknownGraph`] once the graph is gone. Nothing changes on any.
    pub fn set_grid(&self, slot: &str, grid: Grid) -> Result<(), ServerError> {
        self.owner()?
            .update(self.id, SlotName::new(slot), SlotUpdate::Grid(grid))
    }

    fn owner(&self) -> Result<Arc<dyn GraphOwner>, ServerError> {
        self.owner
            .as_ref()
            .and_then(Weak::upgrade)
            .ok_or(ServerError::UnknownGraph(self.id))
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
