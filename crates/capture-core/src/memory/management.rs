//! `MemoryManagement`: one stream's pools of one kind of memory, and their capture
//! arming.
//!
//! Arming (from a capture's prepare until its window closes) keeps three promises:
//! - every allocation is routed to the persistent pool, whose exact-fit slices match a
//!   graph's static shapes;
//! - while priming (prepare until begin), every slice handed out is held by a *binding*,
//!   so the pool grows to warmup's whole working set rather than its momentary peak,
//!   without making any buffer look shared (in-place decisions stay the same in warmup
//!   and in the recording);
//! - every slice handed out or bound while armed is *touched*, and the touched slices
//!   still allocated when the window closes are retained for the graph's life. Touching
//!   (not a snapshot) is what catches a slice freed and reused inside the window;
//! - a slice touched while recording (after priming) is never taken back before the
//!   window closes, even when the user drops every handle of it: a later allocation of
//!   the window cannot alias an input or an intermediate the recorded work still reads
//!   on every replay, and the graph keeps the very allocation (its id) it recorded.
//!   Priming held warmup's whole working set apart, so the recording needs no reuse.

use std::collections::BTreeSet;

use crate::arg_value::ArgValue;
use crate::id_hash::IdMap;
use crate::subject::Subject;

use super::handle::{ManagedMemoryBinding, ManagedMemoryHandle};
use super::location::{MemoryKind, MemoryLocation, PoolKind, PoolName};
use super::page_update::PageUpdate;
use super::place::ArenaPlace;
use super::pool::{Growth, Pool, SlotIndex};
use super::recent::{Located, Recent};
use super::report::MemoryReport;
use super::storage::{ComputeStorage, ExternalPlace, StorageId};
use super::{ClaimKey, MAX_ALLOCATION_BYTES};
use super::{DYNAMIC_PAGE_BYTES, SLICE_ALIGNMENT};
use crate::error::{OutOfMemory, ServerError};
use crate::ids::{GraphPoolId, MemoryId, PageId, StreamId};
use crate::range::ByteRange;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A slice by its pool kind, page and slot index.
type SlotAt = (PoolKind, usize, usize);

/// A check every page allocation passes before the storage is asked: how a wrapper
/// (the fault injector) refuses a page without owning the storage. Given the pool and
/// the page size.
pub type AllocGate = Arc<dyn Fn(PoolName, u64) -> Result<(), ServerError> + Send + Sync>;

/// Which pool an allocation goes to outside a capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AllocationMode {
    /// Size-bucketed, reusable by any request of the bucket.
    #[default]
    Dynamic,
    /// Exact-fit slices (static shapes, weights).
    Persistent,
}

/// Settings of one memory manager: a limit, and the page size its pools grow by.
///
/// What the memory report calls *reserved* is the pages the pools hold, each a driver
/// allocation: the dynamic and the persistent pool of each pooled stream grow by pages of
/// [`page_bytes`](Self::page_bytes) (1 MiB unless set; a larger allocation gets a page of
/// its own size), and a page is given back only by `cleanup()` once nothing on it is
/// held. So a few small buffers spread over several pooled streams (staging for host
/// writes and reads included) reserve a page in each pool they touch: 169 KB of buffers
/// over a few pooled streams' device and host pools can read as 7 MiB reserved. Smaller
/// pages reserve less and allocate from the driver more often.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryConfig {
    limit: Option<u64>,
    page_bytes: u64,
}

impl MemoryConfig {
    /// No limit beyond what the storage refuses.
    pub const fn unlimited() -> Self {
        Self {
            limit: None,
            page_bytes: DYNAMIC_PAGE_BYTES,
        }
    }

    /// A manager limited to at most `bytes` of storage across both pools (a
    /// constructor, like [`unlimited`](Self::unlimited); there is nothing to chain).
    ///
    /// ```
    /// use capture_graphs::MemoryConfig;
    ///
    /// assert_eq!(MemoryConfig::limited(1 << 30)?.limit(), Some(1 << 30));
    /// assert_eq!(MemoryConfig::unlimited().limit(), None);
    /// assert!(MemoryConfig::limited(0).is_err(), "a limit of zero allows nothing");
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] naming the limit when it is zero.
    pub fn limited(bytes: u64) -> Result<Self, ServerError> {
        if bytes == 0 {
            return Err(ServerError::invalid(
                "memory limit",
                bytes,
                "a limit of zero bytes allows nothing",
            ));
        }
        Ok(Self {
            limit: Some(bytes),
            page_bytes: DYNAMIC_PAGE_BYTES,
        })
    }

    /// The same settings, the dynamic and persistent pools growing by pages of `bytes`
    /// (a graph pool's pages too); an allocation larger than a page gets a page of its
    /// own size.
    ///
    /// ```
    /// use capture_graphs::{DeviceConfig, MemoryConfig};
    ///
    /// let small = MemoryConfig::unlimited().with_page_bytes(64 << 10)?;
    /// assert_eq!(small.page_bytes(), 64 << 10);
    /// let config = DeviceConfig::new().device_memory(small).host_memory(small);
    /// assert!(MemoryConfig::unlimited().with_page_bytes(100).is_err());
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] naming the size when it is not a multiple of
    /// [`SLICE_ALIGNMENT`](crate::SLICE_ALIGNMENT) from one slice to
    /// [`MAX_ALLOCATION_BYTES`].
    pub fn with_page_bytes(mut self, bytes: u64) -> Result<Self, ServerError> {
        if bytes == 0 || !bytes.is_multiple_of(SLICE_ALIGNMENT) || bytes > MAX_ALLOCATION_BYTES {
            return Err(ServerError::invalid(
                "page size",
                bytes,
                format!(
                    "a page is a multiple of the slice alignment {SLICE_ALIGNMENT} B, at most \
                     {MAX_ALLOCATION_BYTES} B"
                ),
            ));
        }
        self.page_bytes = bytes;
        Ok(self)
    }

    /// The configured limit, if any.
    pub const fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// The size of the pages the pools grow by.
    pub const fn page_bytes(&self) -> u64 {
        self.page_bytes
    }
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self::unlimited()
    }
}

/// Pages freed by a cleanup.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CleanupReport {
    /// Pages given back to the storage.
    pub pages_released: u64,
    /// Their bytes.
    pub bytes_released: u64,
}

/// Where a device's memory managers take their [`MemoryId`]s from, so every allocation
/// of the device, on any stream, device or host, has its own number, in creation order.
#[derive(Clone, Debug, Default)]
pub struct MemoryIds(Arc<AtomicU64>);

impl MemoryIds {
    /// A source whose first id is `buf#0`.
    pub fn new() -> Self {
        Self::default()
    }

    fn next(&self) -> MemoryId {
        MemoryId::new(self.0.fetch_add(1, Ordering::Relaxed))
    }
}

/// The capture arming of one manager, from prepare until the window closes.
#[derive(Debug)]
struct Arming {
    restore: AllocationMode,
    /// Slots handed out or bound while armed. Slots, not ids: a slice used by the window,
    /// dropped and taken back before the seal has no live id, and must still be pinned.
    touched: BTreeSet<SlotAt>,
    /// Slots handed out or bound after priming ended: not taken back while armed.
    recorded: BTreeSet<SlotAt>,
    priming: bool,
    primed: Vec<ManagedMemoryBinding>,
    /// The graph pool this capture places its allocations in (rule 23), if any.
    arena: Option<GraphPoolId>,
    /// Other allocations' bytes this capture's placements took, since the runtime last
    /// claimed them.
    displaced: Vec<ClaimKey>,
    /// Every such key over the arming, claimed again naming the graph at its seal.
    overwrote: Vec<ClaimKey>,
}

impl Arming {
    /// Marks a slot handed out or bound: retained by the graph, and (once priming is
    /// over) never taken back while armed.
    fn touch(&mut self, slot: SlotAt) {
        self.touched.insert(slot);
        if !self.priming {
            self.recorded.insert(slot);
        }
    }
}

/// One stream's memory of one kind: a dynamic and a persistent pool over one storage.
pub struct MemoryManagement<S: ComputeStorage> {
    storage: S,
    kind: MemoryKind,
    config: MemoryConfig,
    dynamic: Pool,
    persistent: Pool,
    /// Memory the caller imported: a page each, never carved or reused.
    imported: Pool,
    /// The graph pools' arenas (rule 23).
    graph_pools: Pool,
    ids: MemoryIds,
    freed: Vec<MemoryId>,
    live: IdMap<MemoryId, (PoolKind, SlotIndex)>,
    /// The last few allocations `locate` found (`recent.rs`): emptied whenever one is
    /// taken back or a page renumbered.
    recent: Recent,
    mode: AllocationMode,
    arming: Option<Arming>,
    gate: Option<AllocGate>,
}

impl<S: ComputeStorage> MemoryManagement<S> {
    /// A manager of `kind` memory over `storage`, numbering its allocations itself.
    pub fn new(storage: S, kind: MemoryKind, config: MemoryConfig) -> Self {
        Self::with_ids(storage, kind, config, MemoryIds::new())
    }

    /// A manager of `kind` memory over `storage` taking its ids from `ids`, shared with
    /// the device's other managers.
    pub fn with_ids(storage: S, kind: MemoryKind, config: MemoryConfig, ids: MemoryIds) -> Self {
        Self {
            storage,
            kind,
            config,
            dynamic: Pool::new(PoolName {
                memory: kind,
                pool: PoolKind::Dynamic,
            }),
            persistent: Pool::new(PoolName {
                memory: kind,
                pool: PoolKind::Persistent,
            }),
            imported: Pool::new(PoolName {
                memory: kind,
                pool: PoolKind::Imported,
            }),
            graph_pools: Pool::new(PoolName {
                memory: kind,
                pool: PoolKind::GraphPools,
            }),
            ids,
            freed: Vec::new(),
            live: IdMap::default(),
            recent: Recent::default(),
            mode: AllocationMode::Dynamic,
            arming: None,
            gate: None,
        }
    }

    /// Makes every page allocation pass `gate` first.
    pub fn set_alloc_gate(&mut self, gate: AllocGate) {
        self.gate = Some(gate);
    }

    /// Which memory this manager hands out.
    pub fn kind(&self) -> MemoryKind {
        self.kind
    }

    /// The storage pages are allocated from.
    pub fn storage(&mut self) -> &mut S {
        &mut self.storage
    }

    /// The pool allocations go to outside a capture.
    pub fn mode(&self) -> AllocationMode {
        self.mode
    }

    /// Sets the pool allocations go to outside a capture. While armed it only changes
    /// the mode restored when the window closes: every allocation of a window goes to
    /// the persistent pool.
    pub fn set_mode(&mut self, mode: AllocationMode) {
        match &mut self.arming {
            Some(arming) => arming.restore = mode,
            None => self.mode = mode,
        }
    }

    /// Allocates `size` bytes for `stream`, reusing a free slice where one fits and
    /// growing a pool only where `update` allows.
    ///
    /// # Errors
    ///
    /// - [`ServerError::InvalidArgument`] naming the size when it is zero or above
    ///   [`MAX_ALLOCATION_BYTES`].
    /// - [`ServerError::AllocInWindow`] naming size, pool, `stream` and the recording
    ///   stream when the pool would have to grow and `update` forbids it.
    /// - [`ServerError::OutOfMemory`] with every pool's figures when the limit or the
    ///   storage refuses the page.
    pub fn reserve(
        &mut self,
        size: u64,
        stream: StreamId,
        update: PageUpdate,
    ) -> Result<ManagedMemoryHandle, ServerError> {
        self.reserve_placed(size, stream, update, true)
    }

    /// [`reserve`](Self::reserve), kept out of the armed graph pool's memory unless
    /// `arena` allows it: the info cache's entries, which outlive any one member and
    /// which launches outside the pool read, go to the persistent pool.
    ///
    /// # Errors
    ///
    /// As [`reserve`](Self::reserve).
    pub fn reserve_placed(
        &mut self,
        size: u64,
        stream: StreamId,
        update: PageUpdate,
        arena: bool,
    ) -> Result<ManagedMemoryHandle, ServerError> {
        if size == 0 || size > MAX_ALLOCATION_BYTES {
            return Err(ServerError::invalid(
                "allocation size",
                size,
                format!("sizes run from 1 to {MAX_ALLOCATION_BYTES} bytes"),
            ));
        }
        self.reclaim();
        let arena = self.arming.as_ref().and_then(|a| a.arena).filter(|_| arena);
        let pool_kind = match (&self.arming, self.mode) {
            (Some(_), _) if arena.is_some() => PoolKind::GraphPools,
            (Some(_), _) | (None, AllocationMode::Persistent) => PoolKind::Persistent,
            (None, AllocationMode::Dynamic) => PoolKind::Dynamic,
        };
        let id = self.ids.next();
        let handle = ManagedMemoryHandle::fresh(id, size);
        let padded = self.pool(pool_kind).padded(size);
        let taken = match (arena, &self.arming) {
            (Some(pool), Some(arming)) => {
                let touched = &arming.touched;
                let mine =
                    |at: SlotIndex| touched.contains(&(PoolKind::GraphPools, at.page, at.slot));
                self.graph_pools.place(pool, padded, &handle, mine)
            }
            _ => self.pool_mut(pool_kind).take(padded, &handle),
        };
        let at = match taken {
            Some(at) => at,
            None => self.grow(pool_kind, padded, size, stream, update, &handle)?,
        };
        self.live.insert(id, (pool_kind, at));
        if let Some(arming) = &mut self.arming {
            arming.touch((pool_kind, at.page, at.slot));
            if pool_kind == PoolKind::GraphPools {
                // What this placement took from the pool's other members (rule 23).
                let touched = &arming.touched;
                let mine =
                    |at: SlotIndex| touched.contains(&(PoolKind::GraphPools, at.page, at.slot));
                let before = arming.displaced.len();
                self.graph_pools
                    .displaced_by(at, mine, &mut arming.displaced);
                let new = arming.displaced[before..].to_vec();
                arming.overwrote.extend(new);
            }
            if arming.priming {
                arming.primed.push(handle.binding());
            }
        }
        Ok(handle)
    }

    fn grow(
        &mut self,
        pool_kind: PoolKind,
        padded: u64,
        size: u64,
        stream: StreamId,
        update: PageUpdate,
        handle: &ManagedMemoryHandle,
    ) -> Result<SlotIndex, ServerError> {
        let name = self.pool(pool_kind).name;
        let arena = self.arming.as_ref().and_then(|a| a.arena);
        if !update.may_grow() {
            return Err(ServerError::AllocInWindow {
                size,
                pool: name,
                stream,
                recording: update.recording().unwrap_or(stream),
            });
        }
        let page_size = self
            .pool(pool_kind)
            .page_size_for(padded, self.config.page_bytes);
        let reserved =
            self.dynamic.reserved() + self.persistent.reserved() + self.graph_pools.reserved();
        if let Some(limit) = self.config.limit
            && reserved + page_size > limit
        {
            return Err(self.out_of_memory(
                size,
                name,
                format!("a page of {page_size} B would pass the limit of {limit} B"),
            ));
        }
        if let Some(gate) = &self.gate
            && let Err(e) = gate(name, page_size)
        {
            return Err(match e {
                ServerError::OutOfMemory(mut oom) => {
                    oom.pools = self.report().pools;
                    ServerError::OutOfMemory(oom)
                }
                e => e,
            });
        }
        let storage = match self.storage.alloc(page_size) {
            Ok(id) => id,
            Err(ServerError::OutOfMemory(mut oom)) => {
                // The storage knows the memory, the manager the pool that grew.
                oom.pool = name;
                oom.pools = self.report().pools;
                return Err(ServerError::OutOfMemory(oom));
            }
            Err(e) => return Err(e),
        };
        let pool = self.pool_mut(pool_kind);
        let page = pool.add_page(storage, Growth { page_size }, padded);
        let taken = match arena.filter(|_| pool_kind == PoolKind::GraphPools) {
            Some(owner) => {
                pool.tag_arena(page, owner);
                pool.place(owner, padded, handle, |at| at.page != page)
            }
            None => pool.take(padded, handle),
        };
        Ok(taken.expect("a fresh page sized for the slice has room for it"))
    }

    fn out_of_memory(&self, requested: u64, pool: PoolName, reason: String) -> ServerError {
        ServerError::OutOfMemory(Box::new(OutOfMemory {
            requested,
            pool,
            reason: reason.into(),
            pools: self.report().pools,
            graphs: Vec::new(),
        }))
    }

    /// Where the allocation `id` lives, touching it when armed: a launch is being given
    /// this memory, so a graph recorded now must keep it for its life.
    ///
    /// # Errors
    ///
    /// [`ServerError::UnknownMemory`] when no live allocation of this manager has `id`.
    pub fn bind(&mut self, id: MemoryId) -> Result<MemoryLocation, ServerError> {
        let location = self.location(id)?;
        if let (Some(arming), Some(&(kind, at))) = (&mut self.arming, self.live.get(&id)) {
            arming.touch((kind, at.page, at.slot));
        }
        Ok(location)
    }

    /// Where the allocation `id` lives.
    ///
    /// # Errors
    ///
    /// [`ServerError::UnknownMemory`] when no live allocation of this manager has `id`.
    pub fn location(&self, id: MemoryId) -> Result<MemoryLocation, ServerError> {
        self.find(id).map(|found| found.location)
    }

    /// The backend resource for the bytes `key` names.
    ///
    /// # Errors
    ///
    /// [`ServerError::UnknownMemory`] for an unknown allocation;
    /// [`ServerError::InvalidBinding`] when the range runs past the slice.
    pub fn resource(&mut self, key: ClaimKey) -> Result<S::Resource, ServerError> {
        self.locate(key, false).map(|(_, resource)| resource)
    }

    /// [`bind`](Self::bind) and [`resource`](Self::resource) of `key` in one lookup of
    /// its allocation: where it lives, and the backend resource for its bytes. The launch
    /// path's call, once per buffer argument.
    ///
    /// # Errors
    ///
    /// As [`resource`](Self::resource).
    #[inline]
    pub fn bind_resource(
        &mut self,
        key: ClaimKey,
    ) -> Result<(MemoryLocation, S::Resource), ServerError> {
        self.locate(key, true)
    }

    /// Where `key`'s allocation lives, and the backend resource for its bytes; its slot
    /// touched when `touch` and the manager is armed. The last few allocations found
    /// are kept (`recent.rs`), so the launch path's buffers skip the map.
    #[inline(always)]
    fn locate(
        &mut self,
        key: ClaimKey,
        touch: bool,
    ) -> Result<(MemoryLocation, S::Resource), ServerError> {
        let at = match self.recent.position(key.memory) {
            Some(at) => at,
            None => {
                let found = self.find(key.memory)?;
                self.recent.keep(found)
            }
        };
        let Some(found) = self.recent.at(at) else {
            return Err(ServerError::UnknownMemory(key.memory));
        };
        let size = found.size;
        if key.range.end() > size {
            return Err(ServerError::InvalidBinding {
                buffer: Box::new(Subject::bytes(
                    key.memory,
                    key.range.start(),
                    key.range.len(),
                    size,
                )),
                reason: format!("the allocation has {size} bytes").into(),
            });
        }
        let slice = found.location.bytes;
        let bytes = ByteRange::from_bounds(
            slice.start() + key.range.start(),
            slice.start() + key.range.end(),
        );
        if touch && let Some(arming) = &mut self.arming {
            arming.touch(found.slot);
        }
        Ok((found.location, self.storage.resource(found.storage, bytes)))
    }

    /// Where the live allocation `id` is, from the map and its pool.
    fn find(&self, id: MemoryId) -> Result<Located, ServerError> {
        let &(kind, at) = self
            .live
            .get(&id)
            .ok_or_else(|| ServerError::UnknownMemory(id))?;
        let pool = self.pool(kind);
        let page = pool
            .page(at.page)
            .ok_or_else(|| ServerError::UnknownMemory(id))?;
        let slot = page
            .slots
            .get(at.slot)
            .ok_or_else(|| ServerError::UnknownMemory(id))?;
        Ok(Located {
            id,
            slot: (kind, at.page, at.slot),
            location: MemoryLocation {
                pool: pool.name,
                page: PageId::new(at.page as u64),
                slice: at.slot as u32,
                bytes: slot.bytes,
            },
            size: slot.holder.as_ref().map_or(0, |h| h.binding.size),
            storage: page.storage,
        })
    }

    /// Whether `id` is still allocated (held, or not yet taken back by its pool).
    pub fn is_live(&self, id: MemoryId) -> bool {
        self.live.contains_key(&id)
    }

    /// Takes back every slice nobody holds any more. Their ids are kept for
    /// [`take_freed`](Self::take_freed).
    ///
    /// While a window records, a slice it touched stays (rule 7): nothing the window
    /// allocates later may take the memory its recorded work reads or writes.
    pub fn reclaim(&mut self) {
        self.recent.clear();
        let (live, freed) = (&mut self.live, &mut self.freed);
        let mut gone = |id| {
            live.remove(&id);
            freed.push(id);
        };
        let recorded = self.arming.as_ref().map(|a| &a.recorded);
        let keep = |kind: PoolKind| {
            move |at: SlotIndex| recorded.is_some_and(|r| r.contains(&(kind, at.page, at.slot)))
        };
        self.dynamic
            .reclaim(&mut self.storage, keep(PoolKind::Dynamic), &mut gone);
        self.persistent
            .reclaim(&mut self.storage, keep(PoolKind::Persistent), &mut gone);
        self.imported
            .reclaim(&mut self.storage, keep(PoolKind::Imported), &mut gone);
        self.graph_pools
            .reclaim(&mut self.storage, keep(PoolKind::GraphPools), &mut gone);
    }

    /// Makes `external`, memory the caller owns, an allocation of this manager for
    /// `stream`: a page of the imported pool holding one slice, the whole of it, which the
    /// rules treat as any other (taint, order, pins) and the library never frees (its
    /// page is forgotten, not freed, once nothing holds it and a cleanup runs).
    ///
    /// # Errors
    ///
    /// The storage's refusal of `external`; [`ServerError::InvalidArgument`] for a size
    /// of zero or above [`MAX_ALLOCATION_BYTES`].
    pub fn import(&mut self, external: S::External) -> Result<ManagedMemoryHandle, ServerError> {
        let (storage, size) = self.storage.adopt(external)?;
        if size == 0 || size > MAX_ALLOCATION_BYTES {
            self.storage.dealloc(storage);
            return Err(ServerError::invalid(
                "imported memory",
                ArgValue::Bytes(size),
                format!("sizes run from 1 to {MAX_ALLOCATION_BYTES} bytes"),
            ));
        }
        let id = self.ids.next();
        let handle = ManagedMemoryHandle::fresh(id, size);
        let at = self.imported.adopt_page(storage, size, &handle);
        self.live.insert(id, (PoolKind::Imported, at));
        if let Some(arming) = &mut self.arming {
            arming.touch((PoolKind::Imported, at.page, at.slot));
            if arming.priming {
                arming.primed.push(handle.binding());
            }
        }
        Ok(handle)
    }

    /// Where `external` lies, as the storage names it (asked before
    /// [`import`](Self::import)).
    ///
    /// # Errors
    ///
    /// The storage's refusal of `external`.
    pub fn place(&self, external: &S::External) -> Result<ExternalPlace, ServerError> {
        self.storage.place(external)
    }

    /// Moves the ids of the allocations taken back since the last call into `out`, so a
    /// ledger keyed by them can forget them.
    pub fn take_freed(&mut self, out: &mut Vec<MemoryId>) {
        out.append(&mut self.freed);
    }

    /// Arms the pools for a capture: every allocation goes to the persistent pool, every
    /// slice handed out is held until priming ends, and every slice handed out or bound
    /// is touched. Re-entrant: a second call keeps the arming in progress.
    pub fn capture_begin(&mut self) {
        if self.arming.is_none() {
            self.arming = Some(Arming {
                restore: self.mode,
                touched: BTreeSet::new(),
                recorded: BTreeSet::new(),
                priming: true,
                primed: Vec::new(),
                arena: None,
                displaced: Vec::new(),
                overwrote: Vec::new(),
            });
        }
    }

    /// Places this arming's allocations in graph pool `pool`'s arena (rule 23): from
    /// its first page again, over what the pool's other members placed, never over what
    /// this capture placed. A no-op when not armed.
    pub fn arm_arena(&mut self, pool: GraphPoolId) {
        if let Some(arming) = &mut self.arming {
            arming.arena = Some(pool);
        }
    }

    /// The graph pool this arming places its allocations in, and every key of other
    /// allocations its placements took so far (for the seal to claim naming the graph).
    pub fn arena_capture(&self) -> Option<(GraphPoolId, Vec<ClaimKey>)> {
        let arming = self.arming.as_ref()?;
        Some((arming.arena?, arming.overwrote.clone()))
    }

    /// Moves the keys of other allocations this arming's placements took since the last
    /// call into `out`: the runtime claims them as overwritten (rule 23).
    pub fn take_displaced(&mut self, out: &mut Vec<ClaimKey>) {
        if let Some(arming) = &mut self.arming {
            out.append(&mut arming.displaced);
        }
    }

    /// Where allocation `id` lives when it is in a graph pool's arena.
    pub(crate) fn arena_place(&self, id: MemoryId) -> Option<ArenaPlace> {
        match self.live.get(&id) {
            Some(&(PoolKind::GraphPools, at)) => self.graph_pools.arena_place(at),
            _ => None,
        }
    }

    /// The keys of `pool`'s arena allocations, other than `own` (sorted), that `writes`
    /// overlap: what a member writing those bytes takes from the others (rule 23).
    pub(crate) fn overwritten_by(
        &self,
        pool: GraphPoolId,
        writes: &[(StorageId, ByteRange)],
        own: &[MemoryId],
        out: &mut Vec<ClaimKey>,
    ) {
        self.graph_pools.overwritten_by(pool, writes, own, out);
    }

    /// Whether a capture has armed the pools.
    pub fn is_armed(&self) -> bool {
        self.arming.is_some()
    }

    /// Whether the slices handed out are being held until the window opens.
    pub fn is_priming(&self) -> bool {
        self.arming.as_ref().is_some_and(|a| a.priming)
    }

    /// Ends priming: the slices warmup used go back to the pool, free, for the recorded
    /// run to reuse. A no-op when not priming.
    pub fn capture_priming_end(&mut self) {
        if let Some(arming) = &mut self.arming {
            arming.priming = false;
            arming.primed.clear();
        }
    }

    /// Disarms the pools and returns a binding on every slice touched while armed: what
    /// the graph must hold for its life. A touched slice nobody holds any more (used by
    /// the window, dropped, taken back) gets a fresh placeholder allocation, so it is
    /// pinned all the same. Releases any priming that never ended. Returns nothing when
    /// not armed.
    pub fn capture_end(&mut self) -> Vec<ManagedMemoryBinding> {
        let Some(arming) = self.arming.take() else {
            return Vec::new();
        };
        self.mode = arming.restore;
        drop(arming.primed);
        let mut retained = Vec::with_capacity(arming.touched.len());
        for (kind, page, slot) in arming.touched {
            let at = SlotIndex { page, slot };
            let Some(existing) = self.pool(kind).slot(at) else {
                continue;
            };
            let binding = match &existing.holder {
                Some(holder) => ManagedMemoryBinding(holder.binding.clone()),
                None => {
                    let id = self.ids.next();
                    let handle = ManagedMemoryHandle::fresh(id, existing.bytes.len());
                    let binding = handle.binding();
                    self.pool_mut(kind).hold(at, &handle);
                    self.live.insert(id, (kind, at));
                    binding
                }
            };
            retained.push(binding);
        }
        retained.sort_by_key(ManagedMemoryBinding::id);
        retained
    }

    /// Gives empty pages back to the storage, when `update` allows pages to be released.
    ///
    /// # Errors
    ///
    /// [`ServerError::GraphState`] naming the recording stream when `update` forbids
    /// releasing pages, or while a capture is armed on this manager; nothing is changed.
    pub fn cleanup(&mut self, update: PageUpdate) -> Result<CleanupReport, ServerError> {
        self.refuse_while_armed("cleanup")?;
        if let Some(recording) = update.recording().filter(|_| !update.may_release()) {
            return Err(ServerError::graph_state_in(
                "cleanup",
                None,
                recording,
                "is recording: no page is released or renumbered",
            ));
        }
        self.reclaim();
        let mut report = CleanupReport::default();
        for kind in [
            PoolKind::Dynamic,
            PoolKind::Persistent,
            PoolKind::Imported,
            PoolKind::GraphPools,
        ] {
            for index in self.pool(kind).empty_pages() {
                if let Some(page) = self.pool_mut(kind).release_page(index) {
                    // An imported page is forgotten, not freed: not the library's.
                    self.storage.dealloc(page.storage);
                    if kind != PoolKind::Imported {
                        report.pages_released += 1;
                        report.bytes_released += page.size;
                    }
                }
            }
        }
        Ok(report)
    }

    /// Closes the holes released pages left, so page numbers are dense again. Moves no
    /// data: only the numbers of pages after a hole change.
    ///
    /// # Errors
    ///
    /// [`ServerError::GraphState`] naming the recording stream when `update` forbids
    /// renumbering pages, or while a capture is armed on this manager; nothing is
    /// changed.
    pub fn renumber(&mut self, update: PageUpdate) -> Result<(), ServerError> {
        self.refuse_while_armed("renumber")?;
        if let Some(recording) = update.recording().filter(|_| !update.may_release()) {
            return Err(ServerError::graph_state_in(
                "renumber",
                None,
                recording,
                "is recording: no page is released or renumbered",
            ));
        }
        for kind in [
            PoolKind::Dynamic,
            PoolKind::Persistent,
            PoolKind::Imported,
            PoolKind::GraphPools,
        ] {
            if !self.pool(kind).has_holes() {
                continue;
            }
            self.recent.clear();
            let map = self.pool_mut(kind).renumber();
            for (pool, at) in self.live.values_mut() {
                if *pool == kind
                    && let Some(Some(new)) = map.get(at.page)
                {
                    at.page = *new;
                }
            }
        }
        Ok(())
    }

    /// The touched slots of an armed manager are named by page and slot: no page may be
    /// released or renumbered until the window closes.
    fn refuse_while_armed(&self, op: &'static str) -> Result<(), ServerError> {
        if self.arming.is_some() {
            return Err(ServerError::graph_state(
                op,
                "a capture is armed on this memory: no page is released or renumbered until its window closes",
            ));
        }
        Ok(())
    }

    /// Reserved and in-use bytes of both pools, and of the imported memory once any was
    /// imported.
    pub fn report(&self) -> MemoryReport {
        let mut pools = vec![self.dynamic.usage(), self.persistent.usage()];
        let imported = self.imported.usage();
        if imported.allocations > 0 {
            pools.push(imported);
        }
        let shared = self.graph_pools.usage();
        if shared.allocations > 0 {
            pools.push(shared);
        }
        MemoryReport { pools }
    }

    fn pool(&self, kind: PoolKind) -> &Pool {
        match kind {
            PoolKind::Dynamic => &self.dynamic,
            PoolKind::Persistent => &self.persistent,
            PoolKind::Imported => &self.imported,
            PoolKind::GraphPools => &self.graph_pools,
        }
    }

    fn pool_mut(&mut self, kind: PoolKind) -> &mut Pool {
        match kind {
            PoolKind::Dynamic => &mut self.dynamic,
            PoolKind::Persistent => &mut self.persistent,
            PoolKind::Imported => &mut self.imported,
            PoolKind::GraphPools => &mut self.graph_pools,
        }
    }
}

impl<S: ComputeStorage> std::fmt::Debug for MemoryManagement<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryManagement")
            .field("kind", &self.kind)
            .field("mode", &self.mode)
            .field("armed", &self.arming.is_some())
            .field("gated", &self.gate.is_some())
            .field("report", &self.report())
            .finish()
    }
}

#[cfg(test)]
mod tests;
