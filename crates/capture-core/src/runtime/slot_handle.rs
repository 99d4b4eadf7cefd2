//! Slot handles (rule 26): a graph's slot taken once by name ([`Slot`] for a typed
//! scalar, [`BufferSlot`], [`GridSlot`]) and updated per replay with no lookup by name
//! and nothing formatted, alone or several in one call
//! ([`GraphHandle::update`](crate::GraphHandle::update) of the [`SlotSet`]s their `to`
//! makes, all or nothing).

use std::fmt;
use std::marker::PhantomData;
use std::sync::Weak;

use bytemuck::Pod;

use super::buffer::{Arg, Buffer};
use super::graph_owner::GraphOwner;
use super::graph_slots::SlotUpdate;
use crate::error::ServerError;
use crate::ids::GraphId;
use crate::kernel::{Grid, ScalarValue};
use crate::scalar_type::ScalarParam;
use crate::slot_table::SlotName;

/// One slot of one graph, as a handle holds it.
#[derive(Clone)]
struct Target {
    graph: GraphId,
    name: SlotName,
    owner: Weak<dyn GraphOwner>,
}

impl Target {
    fn apply(&self, update: SlotUpdate) -> Result<(), ServerError> {
        match self.owner.upgrade() {
            Some(owner) => owner.update(self.graph, vec![(self.name, update)]),
            None => Err(ServerError::UnknownGraph(self.graph)),
        }
    }

    fn set(&self, update: SlotUpdate) -> SlotSet {
        SlotSet {
            graph: self.graph,
            name: self.name,
            update: Ok(update),
        }
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "slot {} of {}", self.name, self.graph)
    }
}

/// One update of a slot, made by a handle's `to`, for
/// [`GraphHandle::update`](crate::GraphHandle::update).
#[derive(Debug)]
pub struct SlotSet {
    graph: GraphId,
    name: SlotName,
    /// A rebind to a scalar argument is refused when the call is made.
    update: Result<SlotUpdate, ServerError>,
}

impl SlotSet {
    /// The slot it updates.
    pub fn slot(&self) -> SlotName {
        self.name
    }

    pub(crate) fn into_parts(self) -> Result<(GraphId, SlotName, SlotUpdate), ServerError> {
        Ok((self.graph, self.name, self.update?))
    }
}

/// A typed handle on a scalar slot: [`set`](Self::set) takes a `T`, the type the slot
/// was recorded with (what [`GraphHandle::slot`](crate::GraphHandle::slot) checked).
pub struct Slot<T> {
    target: Target,
    _value: PhantomData<fn(T)>,
}

impl<T: Pod + ScalarParam> Slot<T> {
    pub(crate) fn new(graph: GraphId, name: SlotName, owner: Weak<dyn GraphOwner>) -> Self {
        Self {
            target: Target { graph, name, owner },
            _value: PhantomData,
        }
    }

    /// Sets the slot to `value` for every replay enqueued after this call (rule 26).
    ///
    /// # Errors
    ///
    /// As [`GraphHandle::set`](crate::GraphHandle::set).
    pub fn set(&self, value: T) -> Result<(), ServerError> {
        self.target.apply(scalar(value))
    }

    /// The update setting the slot to `value`, for
    /// [`GraphHandle::update`](crate::GraphHandle::update).
    pub fn to(&self, value: T) -> SlotSet {
        self.target.set(scalar(value))
    }

    /// The slot's name.
    pub fn name(&self) -> SlotName {
        self.target.name
    }
}

impl<T> fmt::Debug for Slot<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Slot<{}>({:?})", std::any::type_name::<T>(), self.target)
    }
}

fn scalar<T: Pod + ScalarParam>(value: T) -> SlotUpdate {
    SlotUpdate::Scalar(ScalarValue::of(
        bytemuck::bytes_of(&value),
        Some(T::ELEMENT),
    ))
}

/// A handle on a buffer slot: [`rebind`](Self::rebind) per replay.
#[derive(Debug)]
pub struct BufferSlot {
    target: Target,
}

impl BufferSlot {
    pub(crate) fn new(graph: GraphId, name: SlotName, owner: Weak<dyn GraphOwner>) -> Self {
        Self {
            target: Target { graph, name, owner },
        }
    }

    /// Rebinds the slot to the whole of `buffer` (rule 26), as
    /// [`GraphHandle::rebind`](crate::GraphHandle::rebind).
    ///
    /// # Errors
    ///
    /// As [`GraphHandle::rebind`](crate::GraphHandle::rebind).
    pub fn rebind(&self, buffer: &Buffer) -> Result<(), ServerError> {
        self.target.apply(SlotUpdate::rebind(buffer))
    }

    /// Rebinds the slot to the bytes and access `arg` gives, as
    /// [`GraphHandle::rebind_to`](crate::GraphHandle::rebind_to).
    ///
    /// # Errors
    ///
    /// As [`GraphHandle::rebind_to`](crate::GraphHandle::rebind_to).
    pub fn rebind_to(&self, arg: &Arg) -> Result<(), ServerError> {
        self.target.apply(SlotUpdate::rebind_to(arg)?)
    }

    /// The update rebinding the slot to the whole of `buffer`.
    pub fn to(&self, buffer: &Buffer) -> SlotSet {
        self.target.set(SlotUpdate::rebind(buffer))
    }

    /// The update rebinding the slot to `arg`'s bytes (a scalar argument is refused
    /// when the update is applied).
    pub fn to_arg(&self, arg: &Arg) -> SlotSet {
        SlotSet {
            graph: self.target.graph,
            name: self.target.name,
            update: SlotUpdate::rebind_to(arg),
        }
    }

    /// The slot's name.
    pub fn name(&self) -> SlotName {
        self.target.name
    }
}

/// A handle on a grid slot: [`set`](Self::set) per replay.
#[derive(Debug)]
pub struct GridSlot {
    target: Target,
}

impl GridSlot {
    pub(crate) fn new(graph: GraphId, name: SlotName, owner: Weak<dyn GraphOwner>) -> Self {
        Self {
            target: Target { graph, name, owner },
        }
    }

    /// Sets the slot's grid, as [`GraphHandle::set_grid`](crate::GraphHandle::set_grid).
    ///
    /// # Errors
    ///
    /// As [`GraphHandle::set_grid`](crate::GraphHandle::set_grid).
    pub fn set(&self, grid: Grid) -> Result<(), ServerError> {
        self.target.apply(SlotUpdate::Grid(grid))
    }

    /// The update setting the slot's grid to `grid`.
    pub fn to(&self, grid: Grid) -> SlotSet {
        self.target.set(SlotUpdate::Grid(grid))
    }

    /// The slot's name.
    pub fn name(&self) -> SlotName {
        self.target.name
    }
}
