//! `MetadataInfoCache`: reuses the device buffers that hold kernels' small "info" words
//! (shapes, strides), so a decode step with stable shapes neither allocates nor copies.
//!
//! Entries are keyed by the words alone, not by the kernel. The cache has two modes:
//! - [`CacheMode::Normal`]: only entries of at most
//!   [`max_cached_bytes`](CachePolicy::max_cached_bytes) are cached, and the least
//!   recently used entry is evicted beyond [`max_entries`](CachePolicy::max_entries).
//! - [`CacheMode::Capture`] (from prepare until the window closes): every entry is
//!   cached whatever its size, nothing is evicted, and every entry the window uses (hit
//!   or inserted) is pinned to the window, once.
//!
//! A window's pins are filed under its graph by [`capture_commit`] and dropped by
//! [`capture_discard`]; a graph's pins are dropped by [`graph_release`]. An entry's pin
//! count is shared by every holder (the open window and each graph), and eviction never
//! removes a pinned entry: a graph's recorded launches read these buffers on every
//! replay.
//!
//! Values the cache gives back (evicted, released, refused) are the caller's to free,
//! through its drop queue: the device may still read them.
//!
//! [`capture_commit`]: MetadataInfoCache::capture_commit
//! [`capture_discard`]: MetadataInfoCache::capture_discard
//! [`graph_release`]: MetadataInfoCache::graph_release

use crate::id_hash::{IdMap, KeyedMap};
use std::sync::Arc;

use crate::error::ServerError;
use crate::ids::GraphId;

/// How the cache treats inserts and hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheMode {
    /// Small entries only, least recently used evicted beyond capacity.
    #[default]
    Normal,
    /// A capture window records: any size, no eviction, every use pinned to the window.
    Capture,
}

/// Capacity and size limits of Normal mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachePolicy {
    max_entries: usize,
    max_cached_bytes: usize,
}

impl CachePolicy {
    /// Entries kept in Normal mode by default.
    pub const DEFAULT_MAX_ENTRIES: usize = 4096;
    /// The largest entry, in bytes of words, Normal mode caches by default.
    pub const DEFAULT_MAX_CACHED_BYTES: usize = 2048;

    /// Keep at most `max_entries` unpinned entries in Normal mode, each of at most
    /// `max_cached_bytes` bytes of words (0 caches nothing outside capture windows).
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] naming the value when `max_entries` is zero.
    pub fn new(max_entries: usize, max_cached_bytes: usize) -> Result<Self, ServerError> {
        if max_entries == 0 {
            return Err(ServerError::invalid(
                "info cache max_entries",
                max_entries,
                "the cache must hold at least one entry",
            ));
        }
        Ok(Self {
            max_entries,
            max_cached_bytes,
        })
    }

    /// Entries kept in Normal mode before the least recently used is evicted.
    pub const fn max_entries(self) -> usize {
        self.max_entries
    }

    /// The largest entry, in bytes of words, Normal mode caches.
    pub const fn max_cached_bytes(self) -> usize {
        self.max_cached_bytes
    }
}

impl Default for CachePolicy {
    fn default() -> Self {
        Self {
            max_entries: Self::DEFAULT_MAX_ENTRIES,
            max_cached_bytes: Self::DEFAULT_MAX_CACHED_BYTES,
        }
    }
}

/// Why [`MetadataInfoCache::insert`] handed a value back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Normal mode: the words are larger than
    /// [`max_cached_bytes`](CachePolicy::max_cached_bytes).
    TooLarge,
    /// Normal mode: the cache is full and every entry is pinned.
    Full,
}

/// A cache hit ([`MetadataInfoCache::lookup`]): the entry's value and its upload state.
#[derive(Debug)]
pub struct InfoHit<'a, H> {
    /// The cached value (the device buffer holding the words).
    pub value: &'a H,
    /// Whether an upload already ran that wrote the words (`false` while only a recorded
    /// upload, which runs at a replay, wrote them).
    pub uploaded: bool,
    /// Whether the open window's recording holds an upload of the words.
    pub recorded: bool,
}

/// The outcome of [`MetadataInfoCache::insert`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "evicted and refused values must be freed through the drop queue"]
pub enum Inserted<H> {
    /// The value is cached.
    Cached {
        /// Values evicted to make room, for the caller to free.
        evicted: Vec<H>,
    },
    /// The value is not cached and is handed back, for the caller to use once and free.
    Refused {
        /// The value given to `insert`.
        value: H,
        /// Why it was not cached.
        reason: Refusal,
    },
}

impl<H> Inserted<H> {
    /// Whether the value was cached.
    pub fn is_cached(&self) -> bool {
        matches!(self, Self::Cached { .. })
    }

    /// Every value the caller must free: the evicted ones, or the refused one.
    pub fn into_values(self) -> Vec<H> {
        match self {
            Self::Cached { evicted } => evicted,
            Self::Refused { value, .. } => vec![value],
        }
    }
}

#[derive(Debug)]
struct Entry<H> {
    words: Arc<[u64]>,
    value: H,
    /// When it was last inserted or hit; the smallest unpinned tick is evicted first.
    tick: u64,
    /// Holders: each graph that filed it, plus the open window if it pinned it.
    pins: u32,
    /// The window that last pinned it; equal to the cache's epoch while the open
    /// window pins it.
    window: u64,
    /// False while its words were only copied by a recorded (not yet run) upload: an
    /// eager user must upload them first.
    uploaded: bool,
    /// The window (the cache's epoch then) whose recording holds an upload of its
    /// words, if one does; 0 for none. A window that hits an entry neither uploaded nor
    /// uploaded by its own recording must record an upload (its recorded upload may
    /// have belonged to a window that was aborted).
    recorded_in: u64,
}

/// The cache's index: info words to their slot.
type Index = KeyedMap<Arc<[u64]>, usize>;

/// Maps info words to the device buffer `H` holding them (see the module docs).
///
/// Not internally synchronised; `Send` and `Sync` when `H` is.
#[derive(Debug)]
pub struct MetadataInfoCache<H> {
    policy: CachePolicy,
    mode: CacheMode,
    slots: Vec<Option<Entry<H>>>,
    free: Vec<usize>,
    /// Entries by their words: the caller's choice, so hashed with a key (a program's
    /// info words never degrade the lookup, whatever they are).
    index: Index,
    tick: u64,
    /// The open window's number; bumped when a window is committed or discarded.
    epoch: u64,
    /// Slots pinned by the open window.
    window: Vec<usize>,
    /// Slots filed under each committed graph.
    graphs: IdMap<GraphId, Vec<usize>>,
    /// Entries with at least one pin.
    pinned: usize,
    /// The slot the last lookup found: a launch chain asks for the same words again and
    /// again, and comparing them with that entry's costs less than hashing them. Checked
    /// against the entry's own words, so a slot freed or reused since is never taken.
    last: Option<usize>,
}

impl<H> MetadataInfoCache<H> {
    /// An empty cache in Normal mode.
    pub fn new(policy: CachePolicy) -> Self {
        Self {
            policy,
            mode: CacheMode::Normal,
            slots: Vec::new(),
            free: Vec::new(),
            index: Index::default(),
            tick: 0,
            epoch: 1,
            window: Vec::new(),
            graphs: IdMap::default(),
            pinned: 0,
            last: None,
        }
    }

    /// The policy the cache follows.
    pub fn policy(&self) -> CachePolicy {
        self.policy
    }

    /// The current mode.
    pub fn mode(&self) -> CacheMode {
        self.mode
    }

    /// Switches mode. Pins of the open window stay until
    /// [`capture_commit`](Self::capture_commit) or
    /// [`capture_discard`](Self::capture_discard), whatever the mode.
    pub fn set_mode(&mut self, mode: CacheMode) {
        self.mode = mode;
    }

    /// Whether an entry for `words` would be cached by [`insert`](Self::insert) now:
    /// any non-empty words in Capture mode; in Normal mode, words of at most
    /// `max_cached_bytes` bytes while room can be made.
    pub fn should_cache(&self, words: &[u64]) -> bool {
        if words.is_empty() {
            return false;
        }
        match self.mode {
            CacheMode::Capture => true,
            CacheMode::Normal => {
                self.fits_normal(words.len()) && self.pinned < self.policy.max_entries
            }
        }
    }

    /// The buffer cached for `words`, if any. A hit makes the entry the most recently
    /// used and, in Capture mode, pins it to the open window (once per window, however
    /// many hits). Allocates nothing beyond the window's amortised growth.
    pub fn get(&mut self, words: &[u64]) -> Option<&H> {
        let slot = *self.index.get(words)?;
        self.tick += 1;
        let tick = self.tick;
        if self.mode == CacheMode::Capture {
            self.pin_to_window(slot);
        }
        let entry = self.slots[slot].as_mut()?;
        entry.tick = tick;
        Some(&entry.value)
    }

    /// [`get`](Self::get), with what [`is_uploaded`](Self::is_uploaded) and
    /// [`upload_recorded`](Self::upload_recorded) would say of the entry, in one lookup:
    /// the launch path's call.
    pub fn lookup(&mut self, words: &[u64]) -> Option<InfoHit<'_, H>> {
        let last = self.last.filter(|&slot| {
            self.slots
                .get(slot)
                .and_then(Option::as_ref)
                .is_some_and(|e| *e.words == *words)
        });
        let slot = match last {
            Some(slot) => slot,
            None => *self.index.get(words)?,
        };
        self.last = Some(slot);
        self.tick += 1;
        let tick = self.tick;
        if self.mode == CacheMode::Capture {
            self.pin_to_window(slot);
        }
        let epoch = self.epoch;
        let entry = self.slots[slot].as_mut()?;
        entry.tick = tick;
        Some(InfoHit {
            value: &entry.value,
            uploaded: entry.uploaded,
            recorded: entry.recorded_in == epoch,
        })
    }

    /// Whether the entry for `words` holds them on the device already (`false` while
    /// only a recorded upload, which runs at a replay, wrote it); `None` when not cached.
    pub fn is_uploaded(&self, words: &[u64]) -> Option<bool> {
        let slot = *self.index.get(words)?;
        self.slots[slot].as_ref().map(|e| e.uploaded)
    }

    /// Marks the entry for `words` as uploaded or not (see
    /// [`is_uploaded`](Self::is_uploaded)). A no-op when not cached.
    pub fn set_uploaded(&mut self, words: &[u64], uploaded: bool) {
        if let Some(&slot) = self.index.get(words)
            && let Some(entry) = self.slots[slot].as_mut()
        {
            entry.uploaded = uploaded;
        }
    }

    /// Whether the open window's recording holds an upload of `words` (`false` when not
    /// cached).
    pub fn upload_recorded(&self, words: &[u64]) -> bool {
        self.index
            .get(words)
            .and_then(|&slot| self.slots[slot].as_ref())
            .is_some_and(|e| e.recorded_in == self.epoch)
    }

    /// Notes that the open window recorded an upload of `words`, which is not uploaded
    /// until a replay runs it. A no-op when not cached.
    pub fn record_upload(&mut self, words: &[u64]) {
        let epoch = self.epoch;
        if let Some(&slot) = self.index.get(words)
            && let Some(entry) = self.slots[slot].as_mut()
        {
            entry.uploaded = false;
            entry.recorded_in = epoch;
        }
    }

    /// Marks every entry as not uploaded: the work that uploaded them may have been lost
    /// (an asynchronous error dropped it), so each is uploaded again before its next use.
    pub fn forget_uploads(&mut self) {
        for entry in self.slots.iter_mut().flatten() {
            entry.uploaded = false;
        }
    }

    /// Caches `value` as the buffer for `words` after a miss.
    ///
    /// In Capture mode the entry is always cached, nothing is evicted, and the entry is
    /// pinned to the open window. In Normal mode words larger than `max_cached_bytes`
    /// are refused, and least recently used unpinned entries are evicted to stay within
    /// `max_entries`; when every entry is pinned the value is refused.
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] naming the words when they are empty or already
    /// cached (a hit was missed: [`get`](Self::get) first). The value is dropped.
    pub fn insert(&mut self, words: &[u64], value: H) -> Result<Inserted<H>, ServerError> {
        if words.is_empty() {
            return Err(ServerError::invalid(
                "info words",
                "[]",
                "an info buffer holds at least one word",
            ));
        }
        if self.index.contains_key(words) {
            return Err(ServerError::invalid(
                "info words",
                format!("{words:?}"),
                "already cached: look them up before inserting",
            ));
        }
        let mut evicted = Vec::new();
        if self.mode == CacheMode::Normal {
            if !self.fits_normal(words.len()) {
                return Ok(Inserted::Refused {
                    value,
                    reason: Refusal::TooLarge,
                });
            }
            if self.pinned >= self.policy.max_entries {
                return Ok(Inserted::Refused {
                    value,
                    reason: Refusal::Full,
                });
            }
            evicted = self.evict_down_to(self.policy.max_entries - 1);
        }
        let slot = self.store(words, value);
        if self.mode == CacheMode::Capture {
            self.pin_to_window(slot);
        }
        Ok(Inserted::Cached { evicted })
    }

    /// Files every entry the open window pinned under `graph`, which holds them until
    /// [`graph_release`](Self::graph_release), and closes the window. Returns how many
    /// entries were filed (possibly none: the graph is registered anyway).
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] naming `graph` when it was committed already;
    /// the window stays open.
    pub fn capture_commit(&mut self, graph: GraphId) -> Result<usize, ServerError> {
        if self.graphs.contains_key(&graph) {
            return Err(ServerError::invalid(
                "graph",
                graph,
                "already holds info cache pins",
            ));
        }
        // The window's pins become the graph's: pin counts are unchanged.
        let slots = std::mem::take(&mut self.window);
        let filed = slots.len();
        self.graphs.insert(graph, slots);
        self.epoch += 1;
        tracing::debug!(%graph, entries = filed, "info cache pins filed");
        Ok(filed)
    }

    /// Closes the open window without a graph (abandoned or refused): drops its pins and
    /// keeps the entries. Returns how many entries it had pinned.
    pub fn capture_discard(&mut self) -> usize {
        let slots = std::mem::take(&mut self.window);
        for &slot in &slots {
            self.unpin(slot);
        }
        self.epoch += 1;
        // Keep the buffer for the next window.
        let discarded = slots.len();
        self.window = slots;
        self.window.clear();
        discarded
    }

    /// Drops `graph`'s pins. Entries no longer pinned return to normal life: one that
    /// Normal mode would not have cached (too large) is removed; the others stay as
    /// ordinary entries, and in Normal mode the least recently used are evicted down to
    /// `max_entries`. Returns the removed values, for the caller to free.
    ///
    /// # Errors
    ///
    /// [`ServerError::UnknownGraph`] when `graph` holds no pins (never committed, or
    /// released already).
    pub fn graph_release(&mut self, graph: GraphId) -> Result<Vec<H>, ServerError> {
        let slots = self
            .graphs
            .remove(&graph)
            .ok_or_else(|| ServerError::UnknownGraph(graph))?;
        let mut freed = Vec::new();
        for slot in slots {
            if self.unpin(slot) && !self.fits_normal(self.words_len(slot)) {
                freed.extend(self.remove(slot));
            }
        }
        if self.mode == CacheMode::Normal {
            freed.extend(self.evict_down_to(self.policy.max_entries));
        }
        tracing::debug!(%graph, freed = freed.len(), "info cache pins released");
        Ok(freed)
    }

    /// Removes every unpinned entry and returns the values, for the caller to free.
    pub fn clear_unpinned(&mut self) -> Vec<H> {
        let unpinned: Vec<usize> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(slot, e)| e.as_ref().is_some_and(|e| e.pins == 0).then_some(slot))
            .collect();
        unpinned
            .into_iter()
            .filter_map(|slot| self.remove(slot))
            .collect()
    }

    /// How many entries `graph` holds, or `None` when it holds no pins.
    pub fn pinned_by(&self, graph: GraphId) -> Option<usize> {
        self.graphs.get(&graph).map(Vec::len)
    }

    /// Every cached value, pinned or not, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &H> {
        self.slots.iter().flatten().map(|e| &e.value)
    }

    /// How many entries the open window has pinned.
    pub fn window_len(&self) -> usize {
        self.window.len()
    }

    /// Entries cached.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Whether an entry is cached for `words`.
    pub fn contains(&self, words: &[u64]) -> bool {
        self.index.contains_key(words)
    }

    /// Whether the entry for `words` is pinned (by the open window or a graph).
    pub fn is_pinned(&self, words: &[u64]) -> bool {
        self.pins(words) > 0
    }

    /// How many holders pin the entry for `words`: each graph that filed it, plus the
    /// open window if it pinned it. 0 when not cached.
    pub fn pins(&self, words: &[u64]) -> u32 {
        self.index
            .get(words)
            .and_then(|&slot| self.slots[slot].as_ref())
            .map_or(0, |e| e.pins)
    }

    fn fits_normal(&self, words: usize) -> bool {
        words.saturating_mul(size_of::<u64>()) <= self.policy.max_cached_bytes
    }

    fn words_len(&self, slot: usize) -> usize {
        self.slots[slot].as_ref().map_or(0, |e| e.words.len())
    }

    /// Pins the entry to the open window unless it already is.
    fn pin_to_window(&mut self, slot: usize) {
        let Some(entry) = self.slots[slot].as_mut() else {
            return;
        };
        if entry.window == self.epoch {
            return;
        }
        entry.window = self.epoch;
        entry.pins += 1;
        if entry.pins == 1 {
            self.pinned += 1;
        }
        self.window.push(slot);
    }

    /// Drops one pin; returns whether the entry is now unpinned.
    fn unpin(&mut self, slot: usize) -> bool {
        let Some(entry) = self.slots[slot].as_mut() else {
            return false;
        };
        debug_assert!(entry.pins > 0, "unpinning an unpinned entry");
        entry.pins = entry.pins.saturating_sub(1);
        if entry.pins == 0 {
            self.pinned -= 1;
            true
        } else {
            false
        }
    }

    fn store(&mut self, words: &[u64], value: H) -> usize {
        self.tick += 1;
        let words: Arc<[u64]> = Arc::from(words);
        let entry = Entry {
            words: Arc::clone(&words),
            value,
            tick: self.tick,
            pins: 0,
            window: 0,
            uploaded: true,
            recorded_in: 0,
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = Some(entry);
                slot
            }
            None => {
                self.slots.push(Some(entry));
                self.slots.len() - 1
            }
        };
        self.index.insert(words, slot);
        slot
    }

    /// Removes an unpinned entry and returns its value (`None` for an empty slot).
    fn remove(&mut self, slot: usize) -> Option<H> {
        let entry = self.slots.get_mut(slot)?.take()?;
        debug_assert_eq!(entry.pins, 0, "removing a pinned entry");
        self.index.remove(&*entry.words);
        self.free.push(slot);
        Some(entry.value)
    }

    /// Evicts least recently used unpinned entries until at most `limit` are cached (or
    /// only pinned ones are left).
    fn evict_down_to(&mut self, limit: usize) -> Vec<H> {
        let excess = self.len().saturating_sub(limit);
        if excess == 0 {
            return Vec::new();
        }
        let mut unpinned: Vec<(u64, usize)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(slot, e)| e.as_ref().filter(|e| e.pins == 0).map(|e| (e.tick, slot)))
            .collect();
        let take = excess.min(unpinned.len());
        if take < unpinned.len() {
            unpinned.select_nth_unstable(take);
        }
        unpinned.truncate(take);
        unpinned.sort_unstable();
        let evicted: Vec<H> = unpinned
            .into_iter()
            .filter_map(|(_, slot)| self.remove(slot))
            .collect();
        tracing::trace!(evicted = evicted.len(), "info cache evicted");
        evicted
    }
}

impl<H> Default for MetadataInfoCache<H> {
    fn default() -> Self {
        Self::new(CachePolicy::default())
    }
}

#[cfg(test)]
mod tests;
