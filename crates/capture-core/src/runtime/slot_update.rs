//! Graph updates (rules 26 and 27) on the runtime's side: the check a slot's use passes
//! before it is recorded, what a window notes of each launch naming one, and the
//! checked, all-or-nothing update of a sealed graph's slots.
//!
//! An update changes only the named slot, and only as recorded: a scalar of the same
//! size, a buffer range of the same length and access on this device, a grid within
//! the declared maximum. Every rule follows a rebind: the graph's inputs and outputs are
//! computed again from its claims (rules 14, 18), the new buffer is pinned and the old
//! one's pin released behind the fence of the last replay that used it (rules 7, 19),
//! and a pool member's record of what its replays write is made again (rule 23).

use std::sync::Arc;

use super::buffer::Arg;
use super::graph_slots::{GraphSlots, SlotUpdate, SlotValue, SlottedLaunch, uses_of};
use super::inner::Inner;
use super::launch::Job;
use super::pooled::PooledStream;
use super::scratch::{BoundArg, LaunchScratch};
use crate::branch_refusal::BranchRace;
use crate::capture::TouchedPage;
use crate::driver::{Backend, DeviceResource, DeviceStream};
use crate::error::ServerError;
use crate::ids::{GraphId, StreamId};
use crate::kernel::{Dims, GraphUpdates};
use crate::memory::{Access, ClaimKey};
use crate::slot_table::{MAX_SLOT_NAME, SlotInfo, SlotKind, SlotMismatch, SlotName, SlotRefused};
use crate::subject::Subject;
use crate::trace::{Event, SlotChange};

impl<B: Backend> Inner<B> {
    /// Checks the slots a launch (or work) about to be recorded names, before anything
    /// is recorded: a refused use changes nothing and does not doom the window. Work
    /// naming a slot is refused in every mode; a bounded grid in a window must be a slot.
    pub(super) fn check_slots(
        &self,
        ps: &PooledStream<B>,
        stream: StreamId,
        job: &Job<'_, B>,
        args: &[Arg],
        bound: &[BoundArg],
        recording: bool,
    ) -> Result<(), ServerError> {
        let named = args.iter().find_map(|a| a.1);
        let dims = match job {
            Job::Kernel { dims, .. } => Some(dims),
            Job::Work { .. } => {
                if let Some(slot) = named {
                    return Err(SlotRefused {
                        subject: Subject::Stream(stream),
                        slot,
                        mismatch: SlotMismatch::Work,
                    }
                    .into());
                }
                return Ok(());
            }
        };
        if !recording {
            return Ok(());
        }
        let grid_slot = dims.and_then(Dims::grid_slot);
        if let Some(dims) = dims
            && dims.is_bounded()
            && grid_slot.is_none()
        {
            return Err(ServerError::invalid_of(
                "grid bound",
                Subject::Stream(stream),
                "a bounded grid changes only through a slot: name it with `Dims::slot`",
            ));
        }
        let Some(first) = named.or(grid_slot) else {
            return Ok(());
        };
        if let Some(long) = args
            .iter()
            .filter_map(|a| a.1)
            .chain(grid_slot)
            .find(SlotName::is_too_long)
        {
            return Err(ServerError::invalid_value_of(
                "slot name",
                long.to_string(),
                Subject::Stream(stream),
                format!("a slot's name is at most {MAX_SLOT_NAME} bytes"),
            ));
        }
        if let GraphUpdates::Unsupported(why) = self.limits.graph_updates() {
            return Err(SlotRefused {
                subject: Subject::Stream(stream),
                slot: first,
                mismatch: SlotMismatch::Unsupported(why),
            }
            .into());
        }
        let keys: Vec<(usize, ClaimKey, Access)> =
            bound.iter().map(|b| (b.arg, b.key, b.access)).collect();
        let uses = uses_of(args, dims, &keys);
        let mut seen = GraphSlots::<B>::default();
        for &(_, name, kind, value) in &uses {
            ps.graphs
                .window_slots()
                .check_use(stream, name, kind, value)?;
            // Two uses within the launch itself agree too.
            seen.check_use(stream, name, kind, value)?;
            seen.table.add(name, kind, 0);
            seen.set_value(name, value);
        }
        Ok(())
    }

    /// Notes the slots of kernel launch `node`, just recorded in `ps`'s window, with what
    /// the backend needs to be given it again.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn note_slots(
        ps: &mut PooledStream<B>,
        s: &LaunchScratch<DeviceResource<B::Stream>>,
        node: u64,
        kernel: &Arc<B::Kernel>,
        dims: &Dims,
        args: &[Arg],
        info: Option<&DeviceResource<B::Stream>>,
    ) {
        let keys: Vec<(usize, ClaimKey, Access)> =
            s.args.iter().map(|b| (b.arg, b.key, b.access)).collect();
        let uses = uses_of(args, Some(dims), &keys);
        if uses.is_empty() {
            return;
        }
        let params = s.params.clone();
        let slots = ps.graphs.window_slots_mut();
        let mut on = Vec::new();
        for (param, name, kind, value) in uses {
            slots.table.add(name, kind, node);
            slots.set_value(name, value);
            if let Some(param) = param {
                on.push((param, name));
            }
        }
        slots.launches.push(SlottedLaunch {
            node,
            kernel: Arc::clone(kernel),
            dims: *dims,
            params,
            info: info.cloned(),
            uses: on,
            buffers: keys,
        });
    }

    /// The slots of `graph`, as its user sees them.
    pub(crate) fn slots_of(&self, graph: GraphId) -> Result<Vec<SlotInfo>, ServerError> {
        let index = self.graph_index(graph)?;
        let ps = self.cells[index].lock();
        Ok(ps
            .graphs
            .slots(graph)
            .map(|s| s.table.infos())
            .unwrap_or_default())
    }

    fn graph_index(&self, graph: GraphId) -> Result<usize, ServerError> {
        self.registry()
            .pooled_of(graph)
            .ok_or(ServerError::UnknownGraph(graph))
    }

    /// Updates slots of `graph` (rule 26), each `(name, update)` checked against what
    /// was recorded and all of them against each other, all or nothing; every rule
    /// follows a rebind (rule 27). A refusal is traced on the graph's stream.
    pub(crate) fn update_slots(
        &self,
        graph: GraphId,
        updates: Vec<(SlotName, SlotUpdate)>,
    ) -> Result<(), ServerError> {
        self.reap();
        let mut owner = None;
        let result = self.update_slots_on(graph, updates, &mut owner);
        if let (Err(error), Some(stream)) = (&result, owner) {
            self.refused(stream, "update", error);
        }
        result
    }

    /// [`update_slots`](Self::update_slots); `owner` is set to the graph's stream once
    /// it is known.
    fn update_slots_on(
        &self,
        graph: GraphId,
        updates: Vec<(SlotName, SlotUpdate)>,
        owner: &mut Option<StreamId>,
    ) -> Result<(), ServerError> {
        let index = self.graph_index(graph)?;
        // A buffer of another pooled stream is resolved there first (lock order: one
        // pooled stream at a time), as a launch's is.
        let mut remotes = Vec::with_capacity(updates.len());
        for (name, update) in &updates {
            let mut remote = None;
            if let SlotUpdate::Rebind {
                buffer,
                offset,
                len,
                ..
            } = update
            {
                if buffer.device != self.serial {
                    *owner = self.graph_stream(index, graph);
                    return Err(refusal(graph, *name, SlotMismatch::Device));
                }
                if buffer.pooled != index {
                    let len = len.unwrap_or(buffer.size().saturating_sub(*offset));
                    let arg = Arg::read(buffer).range(*offset, len);
                    remote = self
                        .resolve_remote(index, std::slice::from_ref(&arg))
                        .inspect_err(|_| *owner = self.graph_stream(index, graph))?
                        .pop();
                }
            }
            remotes.push(remote);
        }
        let mut guard = self.cells[index].lock();
        let ps: &mut PooledStream<B> = &mut guard;
        let stream = ps
            .graphs
            .get(graph)
            .map(|g| g.owner())
            .ok_or(ServerError::UnknownGraph(graph))?;
        *owner = Some(stream);
        let Some(slots) = ps.graphs.slots(graph) else {
            let name = updates.first().map_or(SlotName::new(""), |u| u.0);
            return Err(refusal(
                graph,
                name,
                SlotMismatch::Unknown { slots: Vec::new() },
            ));
        };
        // Each update against its slot; a slot named twice in one call is refused.
        let mut checked: Vec<(SlotName, SlotKind, SlotValue)> = Vec::with_capacity(updates.len());
        for (name, update) in &updates {
            let kind = slots.table.find(graph, *name)?.kind;
            let value = self.checked_value(graph, *name, kind, update)?;
            if let Some(&(_, _, first)) = checked.iter().find(|c| c.0 == *name) {
                return Err(refusal(
                    graph,
                    *name,
                    SlotMismatch::Conflicting {
                        recorded: first.shown(),
                        given: value.shown(),
                    },
                ));
            }
            checked.push((*name, kind, value));
        }
        // The values the graph would hold: rules 21 and 29 on the sealed graph, over
        // every slot the call changes at once.
        let pending = |s: SlotName| {
            checked
                .iter()
                .find(|c| c.0 == s)
                .map(|c| c.2)
                .or_else(|| slots.value(s))
        };
        let current = |s: SlotName| match pending(s) {
            Some(SlotValue::Buffer(key)) => Some(key),
            _ => None,
        };
        let g = ps.graphs.get(graph).expect("looked up above");
        for &(name, _, value) in &checked {
            let SlotValue::Buffer(to) = value else {
                continue;
            };
            // A launch's own arguments: two writes of common bytes are refused, as at
            // launch.
            for launch in &slots.launches {
                if let Some((a, b, key)) = launch.aliased_by(name, to, current) {
                    return Err(refusal(
                        graph,
                        name,
                        SlotMismatch::Aliased {
                            launch: launch.node,
                            args: [a as u8, b as u8],
                            memory: key.memory,
                            range: key.range,
                        },
                    ));
                }
            }
            // The slot's launches over the new bytes must not race a launch of another
            // lane they are not ordered with.
            if let Some((first, second, key)) = g.races().check_rebind(name, to, current) {
                let race = BranchRace {
                    window: stream,
                    first,
                    second,
                    memory: key.memory,
                    label: None,
                    range: key.range,
                };
                return Err(refusal(
                    graph,
                    name,
                    SlotMismatch::BranchRace(Box::new(race)),
                ));
            }
        }
        let mut resolved = Vec::with_capacity(updates.len());
        for (((_, update), &(_, _, value)), remote) in updates.iter().zip(&checked).zip(remotes) {
            resolved.push(match (update, value) {
                (SlotUpdate::Rebind { buffer, .. }, SlotValue::Buffer(key)) => Some(match remote {
                    Some(r) => (r.location, r.resource),
                    None if buffer.pooled == index => (
                        ps.stream.device_memory().location(key.memory)?,
                        ps.stream.device_memory().resource(key)?,
                    ),
                    None => return Err(ServerError::UnknownMemory(key.memory)),
                }),
                _ => None,
            });
        }
        let values: Vec<NewValue<'_, B::Stream>> = checked
            .iter()
            .zip(&resolved)
            .map(|(&(name, _, value), r)| (name, value, r.as_ref().map(|r| &r.1)))
            .collect();
        let launches = Self::update_launches(ps, graph, &values)?;
        drop(values);
        for ((((_, update), (name, kind, value)), resolved), launches) in
            updates.iter().zip(checked).zip(resolved).zip(launches)
        {
            let (_, slots) = ps.graphs.with_slots_mut(graph).expect("looked up above");
            let old = slots.value(name);
            slots.set_value(name, value);
            let change = match (value, old) {
                (SlotValue::Scalar(v), _) => SlotChange::Scalar(v.bytes().to_vec()),
                (SlotValue::Grid(grid), _) => SlotChange::Grid(grid),
                (SlotValue::Buffer(to), Some(SlotValue::Buffer(from))) => {
                    SlotChange::Rebind { from, to }
                }
                (SlotValue::Buffer(to), _) => SlotChange::Rebind { from: to, to },
            };
            self.trace.push(Event::Update {
                stream,
                graph,
                slot: name,
                change,
                launches,
            });
            if let (
                SlotUpdate::Rebind { buffer, .. },
                SlotValue::Buffer(key),
                Some((location, _)),
            ) = (update, value, resolved)
            {
                let access = match kind {
                    SlotKind::Buffer { access, .. } => access,
                    _ => Access::Read,
                };
                self.follow_rebind(ps, graph, name, buffer, key, access, location);
            }
        }
        Ok(())
    }

    /// The stream that captured `graph`, on pooled stream `index`.
    fn graph_stream(&self, index: usize, graph: GraphId) -> Option<StreamId> {
        self.cells[index]
            .lock()
            .graphs
            .get(graph)
            .map(|g| g.owner())
    }

    /// The value `update` sets, checked against slot `name` of kind `kind`.
    fn checked_value(
        &self,
        graph: GraphId,
        name: SlotName,
        kind: SlotKind,
        update: &SlotUpdate,
    ) -> Result<SlotValue, ServerError> {
        let refused = |mismatch| refusal(graph, name, mismatch);
        match (update, kind) {
            (SlotUpdate::Scalar(v), SlotKind::Scalar { bytes, .. }) if v.len() != bytes => {
                Err(refused(SlotMismatch::ScalarSize {
                    slot: bytes,
                    given: v.len(),
                }))
            }
            // The same size of another type: its bytes would mean something else to the
            // kernel (a -1 or a 2.0 read as a u32 row index).
            (SlotUpdate::Scalar(v), SlotKind::Scalar { bytes, element })
                if element.is_some() && v.element() != element =>
            {
                Err(refused(SlotMismatch::ScalarType {
                    slot: element,
                    given: v.element(),
                    bytes,
                }))
            }
            (SlotUpdate::Scalar(v), SlotKind::Scalar { .. }) => Ok(SlotValue::Scalar(*v)),
            (
                SlotUpdate::Rebind {
                    buffer,
                    offset,
                    len: given_len,
                    access: given_access,
                },
                SlotKind::Buffer { len, access },
            ) => {
                if let Some(given) = *given_access
                    && given != access
                {
                    return Err(refused(SlotMismatch::Access {
                        slot: access,
                        given,
                    }));
                }
                let want = given_len.unwrap_or(buffer.size().saturating_sub(*offset));
                if want != len {
                    return Err(refused(SlotMismatch::BufferLength {
                        slot: len,
                        given: want,
                    }));
                }
                let range = buffer.range(*offset, Some(len))?;
                self.limits.check_binding(
                    buffer.id(),
                    range.start(),
                    range.len(),
                    buffer.size(),
                )?;
                Ok(SlotValue::Buffer(ClaimKey {
                    memory: buffer.id(),
                    range,
                }))
            }
            (SlotUpdate::Grid(grid), SlotKind::Grid { .. }) if grid.contains(&0) => {
                Err(refused(SlotMismatch::GridEmpty { given: *grid }))
            }
            (SlotUpdate::Grid(grid), SlotKind::Grid { max }) => {
                if grid.iter().zip(max).any(|(&g, m)| g > m) {
                    return Err(refused(SlotMismatch::GridPastMax { max, given: *grid }));
                }
                Ok(SlotValue::Grid(*grid))
            }
            _ => Err(refused(SlotMismatch::Kind {
                slot: kind,
                given: update.kind(),
            })),
        }
    }

    /// Hands every recorded launch using any of the slots `values` names to the backend
    /// again, each once with every new value (a rebound buffer's resource beside its
    /// value), all or nothing: on a refusal the launches already updated get their
    /// parameters back. Returns how many launches each slot changed.
    fn update_launches(
        ps: &mut PooledStream<B>,
        graph: GraphId,
        values: &[NewValue<'_, B::Stream>],
    ) -> Result<Vec<usize>, ServerError> {
        let (g, slots) = ps
            .graphs
            .with_slots_mut(graph)
            .expect("looked up by the caller");
        let mut updated: Vec<(usize, SlottedLaunch<B>)> = Vec::new();
        let mut counts = vec![0; values.len()];
        for (i, launch) in slots.launches.iter().enumerate() {
            let mut new: Option<SlottedLaunch<B>> = None;
            for (k, &(name, value, resource)) in values.iter().enumerate() {
                let base = new.as_ref().unwrap_or(launch);
                if let Some(changed) = base.with_value(name, value, resource) {
                    new = Some(changed);
                    counts[k] += 1;
                }
            }
            let Some(new) = new else {
                continue;
            };
            let sent = B::update_launch(
                &mut ps.stream,
                g.executable_mut(),
                new.node,
                &new.kernel,
                &new.dims,
                &new.params,
                new.info.as_ref(),
            );
            if let Err(error) = sent {
                for (i, _) in &updated {
                    let old = &slots.launches[*i];
                    let back = B::update_launch(
                        &mut ps.stream,
                        g.executable_mut(),
                        old.node,
                        &old.kernel,
                        &old.dims,
                        &old.params,
                        old.info.as_ref(),
                    );
                    if let Err(back) = back {
                        tracing::warn!(target: "capture", %graph, %back, "setting a refused update back failed");
                    }
                }
                return Err(error);
            }
            updated.push((i, new));
        }
        for (i, new) in updated {
            slots.launches[i] = new;
        }
        Ok(counts)
    }

    /// Rule 27 after slot `name` of `graph` was rebound to `key` of `buffer`: the graph
    /// pins the new buffer, reads and writes it for every rule, releases what it no
    /// longer uses behind the fence of its last replay, and its pool record follows.
    #[allow(clippy::too_many_arguments)]
    fn follow_rebind(
        &self,
        ps: &mut PooledStream<B>,
        graph: GraphId,
        name: SlotName,
        buffer: &super::buffer::Buffer,
        key: ClaimKey,
        access: Access,
        location: crate::memory::MemoryLocation,
    ) {
        let binding = buffer.binding(key.range, access);
        let arena = ps.stream.device_memory().arena_place(key.memory);
        let touched = TouchedPage {
            stream: buffer.owner,
            pool: location.pool,
            page: location.page,
        };
        let g = ps.graphs.get_mut(graph).expect("looked up by the caller");
        let released = g.rebind(name, &binding, buffer.handle.binding(), arena, touched);
        let ledger = g.live_ledger();
        let pin = Event::Pin {
            graph,
            device: g.pinned_device().collect(),
            host: g.pinned_staging().collect(),
            info: ledger.info_entries as usize,
        };
        for old in released {
            ps.drops.push(old);
        }
        if let Some(entry) = self.registry().ledger_mut(graph) {
            *entry = ledger;
        }
        self.refresh_member(ps, graph);
        self.trace.push(pin);
    }
}

/// A slot's new value, with a rebound buffer's resource.
type NewValue<'a, S> = (SlotName, SlotValue, Option<&'a DeviceResource<S>>);

/// Slot `name` of `graph` refused for `mismatch`.
fn refusal(graph: GraphId, name: SlotName, mismatch: SlotMismatch) -> ServerError {
    SlotRefused {
        subject: Subject::graph(graph),
        slot: name,
        mismatch,
    }
    .into()
}
