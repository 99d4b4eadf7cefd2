//! [`GraphHandle`]: a captured graph as its user holds it. It names the device that
//! captured it, so another device refuses it (rule 24), and dropping it releases the
//! graph as [`Device::drop_graph`](crate::Device::drop_graph) does: behind the fence of
//! its last replay, never blocking. A handle that outlives its device does nothing when
//! dropped (the device released its graphs when it went).

use std::fmt;
use std::sync::{Arc, Weak};

use bytemuck::Pod;

use super::buffer::{Arg, Buffer};
use super::graph_owner::{Dead, GraphOwner};
use super::graph_slots::SlotUpdate;
use super::slot_handle::{BufferSlot, GridSlot, Slot, SlotSet};
use crate::error::ServerError;
use crate::ids::GraphId;
use crate::kernel::{Grid, ScalarValue};
use crate::scalar_type::ScalarParam;
use crate::slot_table::SlotInfo;
use crate::slot_table::{SlotKind, SlotMismatch, SlotName, SlotRefused};
use crate::subject::Subject;

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
        self.update_one(SlotName::new(slot), SlotUpdate::Scalar(value))
    }

    /// As [`set`](Self::set), for a slot recorded with a struct
    /// ([`Arg::scalar_struct`](crate::Arg::scalar_struct)): only its size is checked.
    ///
    /// # Errors
    ///
    /// As [`set`](Self::set); a slot recorded with a typed value refuses a struct.
    pub fn set_struct<T: Pod>(&self, slot: &str, value: T) -> Result<(), ServerError> {
        let value = ScalarValue::of(bytemuck::bytes_of(&value), None);
        self.update_one(SlotName::new(slot), SlotUpdate::Scalar(value))
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
        self.update_one(SlotName::new(slot), SlotUpdate::rebind(buffer))
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
        self.update_one(SlotName::new(slot), SlotUpdate::rebind_to(arg)?)
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
        self.update_one(SlotName::new(slot), SlotUpdate::Grid(grid))
    }

    /// A typed handle on scalar slot `slot`, taken once and set per replay with no
    /// lookup by name: `let pos = step.slot::<u32>("pos")?; pos.set(t)?;` (or, with other
    /// slots in one call, [`update`](Self::update)).
    ///
    /// # Errors
    ///
    /// [`ServerError::SlotRefused`]: no such slot, not a scalar, or a scalar of another
    /// size or type than `T` (nothing to set through it would be accepted);
    /// [`ServerError::UnknownGraph`] once the graph is gone.
    pub fn slot<T: Pod + ScalarParam>(&self, slot: &str) -> Result<Slot<T>, ServerError> {
        let name = SlotName::new(slot);
        let want = SlotKind::Scalar {
            bytes: std::mem::size_of::<T>(),
            element: Some(T::ELEMENT),
        };
        self.checked_slot(name, want)?;
        Ok(Slot::new(self.id, name, self.weak()))
    }

    /// A handle on buffer slot `slot`, taken once: [`BufferSlot::rebind`] per replay.
    ///
    /// # Errors
    ///
    /// [`ServerError::SlotRefused`]: no such slot, or not a buffer slot;
    /// [`ServerError::UnknownGraph`] once the graph is gone.
    pub fn buffer_slot(&self, slot: &str) -> Result<BufferSlot, ServerError> {
        let name = SlotName::new(slot);
        self.checked_slot(
            name,
            SlotKind::Buffer {
                len: 0,
                access: crate::Access::Read,
            },
        )?;
        Ok(BufferSlot::new(self.id, name, self.weak()))
    }

    /// A handle on grid slot `slot`, taken once: [`GridSlot::set`] per replay.
    ///
    /// # Errors
    ///
    /// [`ServerError::SlotRefused`]: no such slot, or not a grid slot;
    /// [`ServerError::UnknownGraph`] once the graph is gone.
    pub fn grid_slot(&self, slot: &str) -> Result<GridSlot, ServerError> {
        let name = SlotName::new(slot);
        self.checked_slot(name, SlotKind::Grid { max: [0; 3] })?;
        Ok(GridSlot::new(self.id, name, self.weak()))
    }

    /// Sets several slots in one call, each as its handle's `to` makes it (`pos.to(t)`,
    /// `kv.to(&block)`, `attn.to(grid)`): every one checked against what was recorded
    /// and against the others (a rebind's races and aliases with the values they set
    /// together, rule 27), then all applied, or none (rule 26); for every replay
    /// enqueued after this call. A slot named twice is refused.
    ///
    /// ```
    /// use capture_graphs::mock::{MockBackend, MockKernel};
    /// use capture_graphs::{Arg, Device, DeviceConfig, Dims, KernelSignature, Param, StreamId};
    ///
    /// // y = x + k, k a scalar.
    /// const ADD: MockKernel = MockKernel {
    ///     name: "add_k",
    ///     signature: KernelSignature::of(&[Param::READ, Param::WRITE, Param::scalar::<u32>()]),
    ///     f: |bufs, words| {
    ///         let (x, y) = bufs.split_at_mut(1);
    ///         for (o, i) in y[0].iter_mut().zip(&x[0]) {
    ///             *o = i + words[0] as u8;
    ///         }
    ///     },
    /// };
    /// let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// let s = StreamId::new(0);
    /// let (x, x2, y) = (dev.alloc(s, 4)?, dev.alloc(s, 4)?, dev.alloc(s, 4)?);
    /// dev.write(s, &x, 0, [1u8, 2, 3, 4])?;
    /// dev.write(s, &x2, 0, [5u8, 6, 7, 8])?;
    /// let add = dev.kernel(ADD);
    /// let g = dev.capture(s, |d| {
    ///     let args = [Arg::read(&x).slot("x"), Arg::write(&y), Arg::scalar(1u32).slot("k")];
    ///     d.launch(s, &add, Dims::grid([1, 1, 1]).slot("grid"), &args, &[])
    /// })?;
    /// // Taken once; per replay no name is looked up.
    /// let (k, input) = (g.slot::<u32>("k")?, g.buffer_slot("x")?);
    /// g.update([k.to(10), input.to(&x2)])?;
    /// dev.replay(s, &g, 1)?;
    /// assert_eq!(dev.read(s, &y)?, [15, 16, 17, 18]);
    /// // Refused as a whole: the grid past its maximum, so k keeps 10.
    /// let grid = g.grid_slot("grid")?;
    /// assert!(g.update([k.to(20), grid.to([2, 1, 1])]).is_err());
    /// dev.replay(s, &g, 1)?;
    /// assert_eq!(dev.read(s, &y)?, [15, 16, 17, 18]);
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As each update's own call ([`set`](Self::set), [`rebind`](Self::rebind),
    /// [`set_grid`](Self::set_grid)); [`ServerError::InvalidArgument`] for an update made
    /// from another graph's handle. Nothing changed on any of them.
    pub fn update(&self, updates: impl IntoIterator<Item = SlotSet>) -> Result<(), ServerError> {
        let mut all = Vec::new();
        for set in updates {
            let (graph, name, update) = set.into_parts()?;
            if graph != self.id {
                return Err(ServerError::invalid_of(
                    "slot update",
                    Subject::graph(self.id),
                    format!("the update of slot {name} is of {graph}'s handle, not this graph's"),
                ));
            }
            all.push((name, update));
        }
        self.owner()?.update(self.id, all)
    }

    fn update_one(&self, name: SlotName, update: SlotUpdate) -> Result<(), ServerError> {
        self.owner()?.update(self.id, vec![(name, update)])
    }

    /// Refuses a handle on `name` unless the graph has such a slot of `want`'s kind (a
    /// scalar also of its size and type).
    fn checked_slot(&self, name: SlotName, want: SlotKind) -> Result<(), ServerError> {
        let slots = self.owner()?.slots(self.id)?;
        let refused = |mismatch| -> ServerError {
            SlotRefused {
                subject: Subject::graph(self.id),
                slot: name,
                mismatch,
            }
            .into()
        };
        let Some(info) = slots.iter().find(|s| s.name == name) else {
            return Err(refused(SlotMismatch::Unknown {
                slots: slots.iter().map(|s| s.name).collect(),
            }));
        };
        match (info.kind, want) {
            (
                SlotKind::Scalar { bytes, element },
                SlotKind::Scalar {
                    bytes: given,
                    element: given_element,
                },
            ) => {
                if bytes != given {
                    return Err(refused(SlotMismatch::ScalarSize { slot: bytes, given }));
                }
                if element.is_some() && element != given_element {
                    return Err(refused(SlotMismatch::ScalarType {
                        slot: element,
                        given: given_element,
                        bytes,
                    }));
                }
                Ok(())
            }
            (SlotKind::Buffer { .. }, SlotKind::Buffer { .. })
            | (SlotKind::Grid { .. }, SlotKind::Grid { .. }) => Ok(()),
            (slot, want) => Err(refused(SlotMismatch::Kind {
                slot,
                given: want.name(),
            })),
        }
    }

    fn weak(&self) -> Weak<dyn GraphOwner> {
        self.owner.clone().unwrap_or_else(|| Weak::<Dead>::new())
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
