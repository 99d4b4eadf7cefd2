//! What the runtime keeps of a window's or a graph's slots (rules 26 and 27): each
//! launch that names one (its kernel, grid, parameters and info buffer, so the backend
//! can be handed the launch again whole), each slot's value, and what an update asks
//! for. Data only: `slot_update.rs` checks and applies updates.

use std::sync::Arc;

use super::buffer::{Arg, ArgKind, Buffer};
use crate::driver::{Backend, DeviceResource, LaunchParam};
use crate::error::ServerError;
use crate::ids::StreamId;
use crate::kernel::{Dims, Grid, ScalarValue};
use crate::memory::{Access, ClaimKey};
use crate::slot_table::{SlotKind, SlotMismatch, SlotName, SlotRefused, SlotTable};
use crate::subject::Subject;

/// A slot's value, as recorded or last updated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotValue {
    Scalar(ScalarValue),
    Buffer(ClaimKey),
    Grid(Grid),
}

impl SlotValue {
    pub(crate) fn shown(&self) -> String {
        match self {
            SlotValue::Scalar(v) => format!("the scalar {:02x?}", v.bytes()),
            SlotValue::Buffer(key) => format!("{}{}", key.memory, key.range),
            SlotValue::Grid(g) => format!("the grid {g:?}"),
        }
    }
}

/// One recorded kernel launch that names a slot: what the backend is given again when
/// one of its slots changes.
pub(crate) struct SlottedLaunch<B: Backend> {
    /// Its place among the window's recorded launches and work.
    pub(crate) node: u64,
    pub(crate) kernel: Arc<B::Kernel>,
    pub(crate) dims: Dims,
    pub(crate) params: Vec<LaunchParam<DeviceResource<B::Stream>>>,
    pub(crate) info: Option<DeviceResource<B::Stream>>,
    /// Which parameter each of its slots is (its argument's index).
    pub(crate) uses: Vec<(usize, SlotName)>,
    /// Its buffer arguments as recorded: argument index, bytes, access. A rebind checks
    /// the launch's arguments again against each other (two writes of common bytes).
    pub(crate) buffers: Vec<(usize, ClaimKey, Access)>,
}

impl<B: Backend> SlottedLaunch<B> {
    /// This launch with slot `name` set to `value` (`resource`, a rebound buffer's), or
    /// `None` when the launch does not use the slot.
    pub(crate) fn with_value(
        &self,
        name: SlotName,
        value: SlotValue,
        resource: Option<&DeviceResource<B::Stream>>,
    ) -> Option<Self> {
        let grid_here = self.dims.grid_slot() == Some(name);
        if !grid_here && !self.uses.iter().any(|(_, n)| *n == name) {
            return None;
        }
        let mut params = self.params.clone();
        for &(param, _) in self.uses.iter().filter(|(_, n)| *n == name) {
            match (&mut params[param], value, resource) {
                (LaunchParam::Scalar(v), SlotValue::Scalar(new), _) => *v = new,
                (LaunchParam::Buffer(b), SlotValue::Buffer(_), Some(resource)) => {
                    b.resource = resource.clone();
                }
                _ => {}
            }
        }
        let dims = match value {
            SlotValue::Grid(grid) if grid_here => self.dims.with_grid(grid),
            _ => self.dims,
        };
        Some(Self {
            node: self.node,
            kernel: Arc::clone(&self.kernel),
            dims,
            params,
            info: self.info.clone(),
            uses: self.uses.clone(),
            buffers: self.buffers.clone(),
        })
    }

    /// Two of its arguments that would write common bytes were slot `name` rebound to
    /// `to` (every other slot at `value`): their indices and the bytes.
    pub(crate) fn aliased_by(
        &self,
        name: SlotName,
        to: ClaimKey,
        value: impl Fn(SlotName) -> Option<ClaimKey>,
    ) -> Option<(usize, usize, ClaimKey)> {
        if !self.uses.iter().any(|(_, n)| *n == name) {
            return None;
        }
        let key_of = |arg: usize, recorded: ClaimKey| match self
            .uses
            .iter()
            .find(|(a, _)| *a == arg)
            .map(|(_, n)| *n)
        {
            Some(n) if n == name => to,
            Some(n) => value(n).unwrap_or(recorded),
            None => recorded,
        };
        let writes: Vec<(usize, ClaimKey)> = self
            .buffers
            .iter()
            .filter(|(_, _, access)| access.writes())
            .map(|&(arg, key, _)| (arg, key_of(arg, key)))
            .collect();
        for (n, &(a, ka)) in writes.iter().enumerate() {
            for &(b, kb) in &writes[n + 1..] {
                if ka.memory == kb.memory
                    && let Some(range) = ka.range.intersection(kb.range)
                {
                    return Some((
                        a,
                        b,
                        ClaimKey {
                            memory: ka.memory,
                            range,
                        },
                    ));
                }
            }
        }
        None
    }
}

/// The slots of one window or graph: their definitions, values and launches.
pub(crate) struct GraphSlots<B: Backend> {
    pub(crate) table: SlotTable,
    pub(crate) values: Vec<(SlotName, SlotValue)>,
    pub(crate) launches: Vec<SlottedLaunch<B>>,
}

impl<B: Backend> Default for GraphSlots<B> {
    fn default() -> Self {
        Self {
            table: SlotTable::default(),
            values: Vec::new(),
            launches: Vec::new(),
        }
    }
}

impl<B: Backend> GraphSlots<B> {
    /// Whether no launch named a slot.
    pub(crate) fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    pub(crate) fn value(&self, name: SlotName) -> Option<SlotValue> {
        self.values
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
    }

    pub(crate) fn set_value(&mut self, name: SlotName, value: SlotValue) {
        match self.values.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => *v = value,
            None => self.values.push((name, value)),
        }
    }

    /// Checks one use against the window's slots so far: the kind, then the value.
    pub(crate) fn check_use(
        &self,
        stream: StreamId,
        name: SlotName,
        kind: SlotKind,
        value: SlotValue,
    ) -> Result<(), ServerError> {
        let refused = |mismatch| -> ServerError {
            SlotRefused {
                subject: Subject::Stream(stream),
                slot: name,
                mismatch,
            }
            .into()
        };
        self.table.check(name, kind).map_err(refused)?;
        match self.value(name) {
            Some(recorded) if recorded != value => Err(refused(SlotMismatch::Conflicting {
                recorded: recorded.shown(),
                given: value.shown(),
            })),
            _ => Ok(()),
        }
    }
}

/// The slots an argument list and a grid name, with what each is and holds. `keys` are
/// the buffer arguments' bytes, in argument order.
pub(crate) fn uses_of(
    args: &[Arg],
    dims: Option<&Dims>,
    keys: &[(usize, ClaimKey, Access)],
) -> Vec<(Option<usize>, SlotName, SlotKind, SlotValue)> {
    let mut uses = Vec::new();
    for (i, arg) in args.iter().enumerate() {
        let Some(name) = arg.1 else { continue };
        match &arg.0 {
            ArgKind::Scalar(v) => uses.push((
                Some(i),
                name,
                SlotKind::Scalar {
                    bytes: v.len(),
                    element: v.element(),
                },
                SlotValue::Scalar(*v),
            )),
            ArgKind::Buffer(_) => {
                if let Some(&(_, key, access)) = keys.iter().find(|(a, _, _)| *a == i) {
                    uses.push((
                        Some(i),
                        name,
                        SlotKind::Buffer {
                            len: key.range.len(),
                            access,
                        },
                        SlotValue::Buffer(key),
                    ));
                }
            }
        }
    }
    if let Some(dims) = dims
        && let Some(name) = dims.grid_slot()
    {
        uses.push((
            None,
            name,
            SlotKind::Grid {
                max: dims.grid_bound(),
            },
            SlotValue::Grid(dims.grid_shape()),
        ));
    }
    uses
}

/// What an update sets.
#[derive(Debug)]
pub(crate) enum SlotUpdate {
    Scalar(ScalarValue),
    /// A buffer's bytes from `offset`, `len` (the slot's, when `None`) long; `access` is
    /// what the caller said (checked), or `None` for the slot's own.
    Rebind {
        buffer: Buffer,
        offset: u64,
        len: Option<u64>,
        access: Option<Access>,
    },
    Grid(Grid),
}

impl SlotUpdate {
    /// A rebind to the whole of `buffer`, with the slot's access.
    pub(crate) fn rebind(buffer: &Buffer) -> Self {
        SlotUpdate::Rebind {
            buffer: buffer.clone(),
            offset: 0,
            len: None,
            access: None,
        }
    }

    /// A rebind to the bytes and access of buffer argument `arg`.
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] for a scalar argument.
    pub(crate) fn rebind_to(arg: &Arg) -> Result<Self, ServerError> {
        let Some(b) = arg.as_buffer() else {
            return Err(ServerError::invalid(
                "rebind argument",
                "a scalar",
                "a rebind takes a buffer argument (`Arg::read(&buffer)`)",
            ));
        };
        Ok(SlotUpdate::Rebind {
            buffer: b.buffer.clone(),
            offset: b.offset,
            len: Some(b.len.unwrap_or(b.buffer.size().saturating_sub(b.offset))),
            access: Some(b.access),
        })
    }

    pub(crate) fn kind(&self) -> &'static str {
        match self {
            SlotUpdate::Scalar(_) => "scalar",
            SlotUpdate::Rebind { .. } => "buffer",
            SlotUpdate::Grid(_) => "grid",
        }
    }
}
