//! Graph pools (rule 23): several graphs sharing the memory their windows allocate, so a
//! batch-size ladder costs its largest member plus what each member holds alone, not the
//! sum. The sharing is checked: what a member's warmup or replay writes over another
//! member's bytes is claimed in the taint ledger as [`ServerError::Overwritten`], naming
//! the member and the replay, so a read of those bytes, or the other member's replay
//! that needs them from its own earlier replay (an input it reads before writing), fails
//! instead of seeing another member's data. Members live on one pooled stream, which
//! runs them one after another, never at once.

use std::fmt;
use std::sync::Arc;

use super::device::Device;
use super::inner::Inner;
use super::membership::PoolMember;
use super::pooled::PooledStream;
use crate::driver::{Backend, DeviceStream};
use crate::error::ServerError;
use crate::ids::{GraphId, GraphPoolId, MemoryId, StreamId};
use crate::label;
use crate::memory::ClaimKey;
use crate::range::ByteRange;
use crate::subject::Subject;
use crate::trace::Event;

/// A graph pool, as its user holds it: a name to capture graphs into
/// ([`Device::capture_in`], [`Device::prepare_in`]). Graphs captured into one pool share
/// the memory their windows allocate (rule 23); each member still pins what it needs for
/// its own life, and the pool's memory goes back when its last member is dropped and a
/// [`cleanup`](Device::cleanup) runs. Dropping the `GraphPool` itself releases nothing.
///
/// It belongs to the device that made it: any other device refuses it
/// ([`ServerError::InvalidArgument`], `what: "graph pool"`).
///
/// ```
/// use capture_graphs::mock::MockBackend;
/// use capture_graphs::{Arg, Builtin, Device, DeviceConfig, ServerError, StreamId};
///
/// let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
/// let s = StreamId::new(0);
/// let (x, y) = (dev.alloc(s, 1024)?, dev.alloc(s, 1024)?);
/// dev.write_values(s, &x, 0, &[1.0f32; 256])?;
/// let add = dev.builtin(Builtin::AddScalar);
/// let ladder = dev.graph_pool("ladder")?;
/// // Two graphs, each with an intermediate allocated inside its closure (as an engine
/// // allocates per op): one pool holds both in the same bytes.
/// let mut graphs = Vec::new();
/// for n in [64u64, 256] {
///     let bytes = n * 4;
///     graphs.push(dev.capture_in(s, &ladder, |d| {
///         let t = d.alloc(s, bytes)?;
///         let info = Builtin::AddScalar.info(n, 1.0);
///         d.launch(s, &add, [1, 1, 1], &[Arg::read(&x).range(0, bytes), Arg::write(&t)], &info)?;
///         d.launch(s, &add, [1, 1, 1], &[Arg::read(&t), Arg::write(&y).range(0, bytes)], &info)
///     })?);
/// }
/// dev.replay(s, &graphs[0], 1)?;
/// dev.replay(s, &graphs[1], 1)?;
/// assert_eq!(dev.read_values::<f32>(s, &y)?, vec![3.0; 256]);
/// // The pool holds the larger intermediate once, not both.
/// assert_eq!(dev.memory_report().pools[0].held_bytes, 1024);
/// # Ok::<(), ServerError>(())
/// ```
#[derive(Clone)]
pub struct GraphPool {
    id: GraphPoolId,
    device: u64,
    label: Arc<str>,
}

impl GraphPool {
    /// The pool's logical id, as traces, reports and errors name it (`pool#0`).
    pub fn id(&self) -> GraphPoolId {
        self.id
    }

    /// The name its user gave it.
    pub fn label(&self) -> &str {
        &self.label
    }
}

impl fmt::Debug for GraphPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GraphPool({} {:?})", self.id, self.label)
    }
}

impl<B: Backend> Device<B> {
    /// A new graph pool named `label`: graphs captured into it
    /// ([`capture_in`](Self::capture_in)) share the memory their windows allocate, under
    /// check (rule 23). Its members are captured on one pooled stream (the first
    /// capture's), which runs them one after another.
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] for an empty or over-long label.
    pub fn graph_pool(&self, label: &str) -> Result<GraphPool, ServerError> {
        let label = label::checked(label)?;
        let id = self.inner.registry().add_pool(Arc::clone(&label));
        self.inner.trace.push(Event::GraphPool {
            pool: id,
            label: Arc::clone(&label),
        });
        Ok(GraphPool {
            id,
            device: self.inner.serial,
            label,
        })
    }

    /// Refuses a pool of another device, or one whose members live on another pooled
    /// stream than `stream`'s; binds a pool's first capture to `stream`'s pooled stream.
    pub(crate) fn pool_for(
        &self,
        stream: StreamId,
        pool: &GraphPool,
    ) -> Result<GraphPoolId, ServerError> {
        if pool.device != self.inner.serial {
            return Err(ServerError::invalid(
                "graph pool",
                pool.id,
                "the graph pool belongs to another device",
            ));
        }
        let pooled = self.inner.pooled(stream);
        let mut registry = self.inner.registry();
        let entry = registry
            .pool_mut(pool.id)
            .expect("a pool of this device is registered");
        match entry.pooled {
            Some(at) if at != pooled => Err(ServerError::invalid_of(
                "graph pool",
                Subject::Pool {
                    pool: pool.id,
                    label: Some(Arc::clone(&entry.label)),
                },
                format!(
                    "its members are captured on pooled stream {at}, and the capture's stream is on \
                     pooled stream {pooled}: a pool's members share one pooled stream, \
                     which runs them one after another"
                ),
            )),
            _ => {
                entry.pooled = Some(pooled);
                Ok(pool.id)
            }
        }
    }
}

impl<B: Backend> Inner<B> {
    /// Claims `keys`, bytes of other pool members' allocations that `stream`'s work just
    /// overwrote, as [`ServerError::Overwritten`] naming the pool, the member (if
    /// sealed) and the replay (`None`: its warmup).
    pub(crate) fn overwrote(
        &self,
        keys: &mut Vec<ClaimKey>,
        pool: GraphPoolId,
        graph: Option<GraphId>,
        replay: Option<u64>,
        stream: StreamId,
    ) {
        if keys.is_empty() {
            return;
        }
        let error = ServerError::Overwritten {
            pool,
            graph,
            replay,
            stream,
        };
        let mut memories: Vec<MemoryId> = keys.iter().map(|k| k.memory).collect();
        memories.dedup();
        if self.taint().taint_live(keys.drain(..), error).is_some() {
            self.trace.push(Event::Overwritten {
                pool,
                graph,
                replay,
                memories,
            });
        }
    }

    /// Claims what the allocation just placed on `ps` took from other members of the
    /// pool its capture is armed into (a warmup or recording overwriting them).
    pub(crate) fn claim_displaced(&self, ps: &mut PooledStream<B>, stream: StreamId) {
        let memory = ps.stream.device_memory();
        let Some((pool, _)) = memory.arena_capture() else {
            return;
        };
        let mut keys = Vec::new();
        memory.take_displaced(&mut keys);
        self.overwrote(&mut keys, pool, None, None, stream);
    }

    /// Makes graph `graph`, just sealed from a capture armed into `pool`, a member:
    /// what its capture overwrote is claimed again naming it, and what its replays will
    /// write is kept.
    pub(crate) fn join_pool(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        graph: GraphId,
        pool: GraphPoolId,
        mut overwrote: Vec<ClaimKey>,
    ) {
        let Some(member) = Self::member_of(ps, graph, pool, 0) else {
            return;
        };
        ps.members.insert(graph, member);
        if let Some(entry) = self.registry().pool_mut(pool) {
            entry.members.insert(graph);
        }
        self.overwrote(&mut overwrote, pool, Some(graph), None, stream);
    }

    /// What member `graph` of `pool` takes from the others when it replays, from what it
    /// pins, reads and writes now, with `replays` made so far.
    fn member_of(
        ps: &mut PooledStream<B>,
        graph: GraphId,
        pool: GraphPoolId,
        replays: u64,
    ) -> Option<PoolMember> {
        let g = ps.graphs.get(graph)?;
        let memory = ps.stream.device_memory();
        // Its own: what it pins, and whatever it reads or writes (a recorded copy into a
        // buffer it writes is its own work, not an overwrite).
        let mut own: Vec<MemoryId> = g
            .pinned_device()
            .chain(g.inputs().iter().chain(g.written()).map(|k| k.memory))
            .filter(|&id| memory.arena_place(id).is_some())
            .collect();
        own.sort_unstable();
        own.dedup();
        let writes = g
            .written()
            .iter()
            .filter_map(|key| {
                let place = memory.arena_place(key.memory)?;
                let start = place.bytes.start() + key.range.start();
                Some((
                    place.storage,
                    ByteRange::from_bounds(start, start + key.range.len()),
                ))
            })
            .collect();
        Some(PoolMember {
            pool,
            own,
            writes,
            replays,
        })
    }

    /// Makes member `graph`'s record again after a slot of it was rebound (rule 27: what
    /// its replays write and what is its own follow the new buffer). Nothing for a
    /// graph of no pool.
    pub(crate) fn refresh_member(&self, ps: &mut PooledStream<B>, graph: GraphId) {
        let Some((pool, replays)) = ps.members.get(&graph).map(|m| (m.pool, m.replays)) else {
            return;
        };
        if let Some(member) = Self::member_of(ps, graph, pool, replays) {
            ps.members.insert(graph, member);
        }
    }

    /// The keys of other members' allocations that `graph`'s replay overwrites (empty
    /// for a graph of no pool), counting the replays it is about to make.
    pub(crate) fn replay_takes(
        &self,
        ps: &mut PooledStream<B>,
        graph: GraphId,
        out: &mut Vec<ClaimKey>,
    ) {
        if let Some(member) = ps.members.get(&graph) {
            ps.stream
                .device_memory()
                .overwritten_by(member.pool, &member.writes, &member.own, out);
        }
    }

    /// After `graph` replayed `times` times on `stream`: claims what it took from the
    /// other members, naming its last replay.
    pub(crate) fn replayed_over(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        graph: GraphId,
        times: u32,
        taken: &mut Vec<ClaimKey>,
    ) {
        if let Some(member) = ps.members.get_mut(&graph) {
            member.replays += u64::from(times);
            let (pool, n) = (member.pool, member.replays);
            self.overwrote(taken, pool, Some(graph), Some(n), stream);
        }
    }

    /// Forgets `graph`'s membership, as it is dropped.
    pub(crate) fn leave_pool(&self, ps: &mut PooledStream<B>, graph: GraphId) {
        if let Some(member) = ps.members.remove(&graph)
            && let Some(entry) = self.registry().pool_mut(member.pool)
        {
            entry.members.remove(&graph);
        }
    }
}
