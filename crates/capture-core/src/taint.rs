//! `TaintLedger`: the device-wide record of which bytes nothing has successfully written,
//! and why.
//!
//! When GPU work fails, is skipped or never runs, the bytes it should have written hold
//! garbage. The ledger remembers them as *claims* on byte ranges, each carrying a
//! *failure* that says why, so a later read of those bytes fails loudly with
//! [`ServerError::Unwritten`] naming the real cause instead of returning garbage.
//!
//! - **Claims are byte ranges.** A claim is keyed by a [`ClaimKey`]: one exact range of
//!   one allocation. Two ranges of one allocation are two claims; claiming or writing a
//!   range splits whatever claims it partly covers, and the pieces left over keep their
//!   failure.
//! - **Fresh memory is unwritten.** [`TaintLedger::fresh`] claims a new allocation
//!   whole, as [`FailureCause::NeverWritten`]; only a write makes its bytes readable.
//! - **Work scopes claim provisionally.** [`TaintLedger::enter`] claims every range a
//!   piece of work will write, with a new failure whose cause is
//!   [`FailureCause::Unfinished`]. [`TaintLedger::settle`] releases those claims when the
//!   work succeeded; [`TaintLedger::fail`] keeps them and stores the real error as the
//!   cause ([`FailureCause::Failed`]).
//! - **Skipped launches pass failures on.** A launch whose input is claimed is skipped;
//!   [`TaintLedger::propagate`] claims its outputs with the *same* failure and appends a
//!   [`Skipped`] record to that failure's chain, so a read at the end of a chain of
//!   skipped launches names the original cause and every launch in between.
//! - **Failures are freed with their last claim** and numbered in creation order, never
//!   reused, so traces and errors read the same on every run.
//!
//! # The scope pattern
//!
//! The runtime keeps the ledger behind a `Mutex` and holds the lock only around ledger
//! calls, never around the work itself: lock and [`enter`](TaintLedger::enter) with the
//! ranges the work writes, unlock, run the work, then lock again and
//! [`settle`](TaintLedger::settle) the [`Scope`] on success or
//! [`fail`](TaintLedger::fail) it with the error. A [`Scope`] is a plain token, not a
//! guard that acts on drop: if the work panics, nobody settles, the provisional claim
//! survives, and a later read of those bytes fails naming the unfinished operation. That
//! is the point: bytes half-written by a panicking kernel must not read as clean.
//!
//! The unit test `the_scope_protocol_as_a_caller_drives_it` walks through it.
//!
//! # Deferred claims
//!
//! An eager launch opens a scope, enqueues, and settles it, and in nearly every call no
//! other thread looks at the ledger in between. So when nothing claims the bytes a
//! launch writes, [`admit`](TaintLedger::admit) takes the failure's id and keeps the
//! scope aside instead of claiming: its own `settle` then has nothing to release, and
//! its own `fail` makes the claims with the real error. Any other call of the ledger,
//! on any thread, first makes the deferred claims exactly as `admit` would have, so
//! what every other call sees, failure numbers included, is the same. At most one
//! scope is deferred: the next `admit` makes the last one's claims first, so it finds
//! them when its outputs overlap them.
//!
//! # Cost
//!
//! The hot paths (entering and settling a scope, a clean read, a host write, a
//! propagation whose inputs are clean) allocate nothing per call once warm: claim lists
//! stay in place while their allocation is tracked (only [`TaintLedger::forget`] drops
//! one, and its vector is kept for the next fresh allocation), and the vectors of freed
//! failures are kept on free lists for the next failure. Those lists never grow past the
//! most failures and allocations ever live at once.

mod nodes;

use crate::id_hash::IdMap;

use crate::subject::Subject;
use nodes::{Node, Nodes};
use std::mem;

use crate::error::{FailureCause, ServerError, Skipped, Unwritten};
use crate::ids::{FailureId, IdCounter, MemoryId, StreamId};
use crate::memory::ClaimKey;
use crate::op::Op;
use crate::range::ByteRange;

/// The device-wide taint ledger: which bytes of which allocations are claimed by a
/// failure, and what each failure is.
///
/// Not internally synchronised: the runtime wraps it in a `Mutex`. See the
/// [module documentation](self) for the semantics and the scope pattern.
#[derive(Debug, Default)]
pub(crate) struct TaintLedger {
    /// Every tracked allocation, by id.
    memories: IdMap<MemoryId, Allocation>,
    /// Claim vectors of forgotten allocations, kept for the next fresh one.
    spare_claims: Vec<Vec<Claim>>,
    /// The live failures and the free lists their vectors come from.
    failures: Failures,
    /// The scope [`admit`](TaintLedger::admit) opened over bytes nobody had claimed,
    /// its claims not made yet: until its own [`settle`](TaintLedger::settle) or
    /// [`fail`](TaintLedger::fail), the first other call makes them (see "Deferred
    /// claims" in the module docs).
    deferred: Option<Deferred>,
}

/// A scope whose provisional claims are not made yet: its failure's id (taken in turn,
/// so every failure keeps its number), what it runs and what it writes.
#[derive(Debug)]
struct Deferred {
    failure: FailureId,
    op: Op,
    writes: Vec<ClaimKey>,
}

/// A work scope opened by [`TaintLedger::enter`]: the token that settles or fails it.
///
/// Deliberately neither `Copy` nor `Clone` (a scope ends once) and not a drop guard:
/// dropping it leaves its provisional claims in place, which is what a panic inside the
/// scope must do.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a scope that is never settled or failed leaves its bytes claimed as unfinished"]
pub(crate) struct Scope {
    failure: FailureId,
}

impl Scope {
    /// The failure that carries the scope's provisional claims.
    pub(crate) fn failure(&self) -> FailureId {
        self.failure
    }
}

/// One tracked allocation.
#[derive(Debug)]
struct Allocation {
    /// Its size in bytes; every key must lie within it.
    size: u64,
    /// Its claims, sorted by address and never overlapping.
    claims: Vec<Claim>,
}

/// Claimed bytes and the failure they carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Claim {
    range: ByteRange,
    failure: FailureId,
}

/// The live failure nodes, the id counter and the free lists of their vectors.
#[derive(Debug, Default)]
struct Failures {
    nodes: Nodes,
    ids: IdCounter,
    spare_keys: Vec<Vec<ClaimKey>>,
    spare_chains: Vec<Vec<Skipped>>,
}

impl Failures {
    /// An empty key vector, recycled when one is spare.
    fn keys(&mut self) -> Vec<ClaimKey> {
        self.spare_keys.pop().unwrap_or_default()
    }

    /// Keeps `keys`'s buffer for a later [`keys`](Self::keys).
    fn recycle_keys(&mut self, mut keys: Vec<ClaimKey>) {
        if keys.capacity() > 0 {
            keys.clear();
            self.spare_keys.push(keys);
        }
    }

    /// A new failure with `cause`, carried by no claim yet.
    fn create(&mut self, cause: FailureCause) -> FailureId {
        let id = self.next_id();
        self.create_as(id, cause);
        id
    }

    /// The next failure's id, taken in turn.
    fn next_id(&mut self) -> FailureId {
        FailureId::new(self.ids.next_index())
    }

    /// The failure `id` (taken by [`next_id`](Self::next_id) and not created since) with
    /// `cause`, carried by no claim yet.
    fn create_as(&mut self, id: FailureId, cause: FailureCause) {
        let chain = self.spare_chains.pop().unwrap_or_default();
        self.nodes.insert(
            id,
            Node {
                cause,
                chain,
                writes: Vec::new(),
                claims: 0,
            },
        );
    }

    /// One more claim carries `id`.
    fn retain(&mut self, id: FailureId) {
        if let Some(node) = self.nodes.get_mut(&id) {
            node.claims += 1;
        }
    }

    /// One claim fewer carries `id`; frees the node when none is left.
    fn release(&mut self, id: FailureId) {
        if let Some(node) = self.nodes.get_mut(&id) {
            node.claims -= 1;
            if node.claims == 0 {
                self.free(id);
            }
        }
    }

    /// Frees `id`'s node if no claim carries it.
    fn free_if_unclaimed(&mut self, id: FailureId) {
        if self.nodes.get(&id).is_some_and(|node| node.claims == 0) {
            self.free(id);
        }
    }

    fn free(&mut self, id: FailureId) {
        if let Some(node) = self.nodes.remove(&id) {
            let Node {
                mut chain, writes, ..
            } = node;
            self.recycle_keys(writes);
            if chain.capacity() > 0 {
                chain.clear();
                self.spare_chains.push(chain);
            }
        }
    }
}

impl Allocation {
    /// The first claim (in address order) that shares a byte with `range`.
    fn first_overlap(&self, range: ByteRange) -> Option<Claim> {
        let i = self
            .claims
            .partition_point(|c| c.range.end() <= range.start());
        self.claims
            .get(i)
            .filter(|c| c.range.start() < range.end())
            .copied()
    }

    /// Clears every claimed byte of `range`, keeping the pieces of claims that stick out
    /// on either side. Returns where a claim of exactly `range` belongs.
    fn clear(&mut self, range: ByteRange, failures: &mut Failures) -> usize {
        let i = self
            .claims
            .partition_point(|c| c.range.end() <= range.start());
        let j = i + self.claims[i..].partition_point(|c| c.range.start() < range.end());
        if i == j {
            return i;
        }
        let (first, last) = (self.claims[i], self.claims[j - 1]);
        let left = (first.range.start() < range.start()).then(|| Claim {
            range: ByteRange::from_bounds(first.range.start(), range.start()),
            failure: first.failure,
        });
        let right = (last.range.end() > range.end()).then(|| Claim {
            range: ByteRange::from_bounds(range.end(), last.range.end()),
            failure: last.failure,
        });
        // Count the pieces kept before releasing the claims they come from, so a failure
        // that stays carried is never freed in between.
        for piece in left.iter().chain(&right) {
            failures.retain(piece.failure);
        }
        for claim in &self.claims[i..j] {
            failures.release(claim.failure);
        }
        self.claims.splice(i..j, left.into_iter().chain(right));
        i + usize::from(left.is_some())
    }

    /// Claims exactly `range` for `failure`, replacing whatever claims its bytes had.
    fn claim(&mut self, range: ByteRange, failure: FailureId, failures: &mut Failures) {
        // Retained first: the bytes may already carry `failure`, as its last claim.
        failures.retain(failure);
        let at = self.clear(range, failures);
        self.claims.insert(at, Claim { range, failure });
    }

    /// Clears the bytes of `range` that carry `failure`, leaving every other claim.
    fn clear_carrying(&mut self, range: ByteRange, failure: FailureId, failures: &mut Failures) {
        let mut i = self
            .claims
            .partition_point(|c| c.range.end() <= range.start());
        while let Some(&claim) = self.claims.get(i) {
            if claim.range.start() >= range.end() {
                break;
            }
            if claim.failure != failure {
                i += 1;
                continue;
            }
            let left = (claim.range.start() < range.start())
                .then(|| ByteRange::from_bounds(claim.range.start(), range.start()));
            let right = (claim.range.end() > range.end())
                .then(|| ByteRange::from_bounds(range.end(), claim.range.end()));
            match (left, right) {
                (None, None) => {
                    self.claims.remove(i);
                    failures.release(failure);
                }
                (Some(left), None) => {
                    self.claims[i].range = left;
                    i += 1;
                }
                (None, Some(right)) => {
                    self.claims[i].range = right;
                    break;
                }
                (Some(left), Some(right)) => {
                    self.claims[i].range = left;
                    self.claims.insert(
                        i + 1,
                        Claim {
                            range: right,
                            failure,
                        },
                    );
                    failures.retain(failure);
                    break;
                }
            }
        }
    }
}

impl TaintLedger {
    /// An empty ledger: no allocation tracked, no failure live.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Tracks a fresh allocation of `size` bytes, claimed whole as never written.
    ///
    /// Returns the new failure (cause [`FailureCause::NeverWritten`]) its claim carries.
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] naming the allocation and size when `size` is
    /// zero, or naming the allocation when it is already tracked. Nothing is changed.
    pub(crate) fn fresh(&mut self, memory: MemoryId, size: u64) -> Result<FailureId, ServerError> {
        self.undefer();
        if size == 0 {
            return Err(ServerError::invalid_value_of(
                "allocation size",
                format!("{size} B"),
                Subject::buffer(memory),
                "an allocation names at least one byte",
            ));
        }
        if self.memories.contains_key(&memory) {
            return Err(ServerError::invalid_of(
                "memory",
                Subject::buffer(memory),
                "already tracked by the taint ledger",
            ));
        }
        let failure = self.failures.create(FailureCause::NeverWritten);
        let mut claims = self.spare_claims.pop().unwrap_or_default();
        claims.push(Claim {
            range: ByteRange::from_bounds(0, size),
            failure,
        });
        self.failures.retain(failure);
        self.memories.insert(memory, Allocation { size, claims });
        Ok(failure)
    }

    /// Stops tracking a freed allocation: drops its claims, and the failures no claim
    /// carries any more.
    ///
    /// # Errors
    ///
    /// [`ServerError::UnknownMemory`] when `memory` is not tracked.
    pub(crate) fn forget(&mut self, memory: MemoryId) -> Result<(), ServerError> {
        self.undefer();
        let Some(mut allocation) = self.memories.remove(&memory) else {
            return Err(ServerError::UnknownMemory(memory));
        };
        for claim in allocation.claims.drain(..) {
            self.failures.release(claim.failure);
        }
        if allocation.claims.capacity() > 0 {
            self.spare_claims.push(allocation.claims);
        }
        Ok(())
    }

    /// Opens a work scope for `op`: claims every range in `writes` provisionally, with a
    /// new failure whose cause is [`FailureCause::Unfinished`] naming `op`.
    ///
    /// The claims replace whatever claims those exact bytes had; other bytes keep
    /// theirs. End the scope with [`settle`](Self::settle) or [`fail`](Self::fail); a
    /// scope never ended (its work panicked) leaves the bytes claimed as unfinished. A
    /// scope that writes nothing claims nothing, and its failure is never live.
    ///
    /// # Errors
    ///
    /// Every key is checked before any is claimed, and a refused scope changes nothing:
    /// [`ServerError::UnknownMemory`] when a key's allocation is not tracked;
    /// [`ServerError::InvalidArgument`] naming the key when its range runs past the end
    /// of the allocation.
    pub(crate) fn enter(
        &mut self,
        op: Op,
        writes: impl IntoIterator<Item = ClaimKey>,
    ) -> Result<Scope, ServerError> {
        self.undefer();
        let keys = self.valid_keys(writes)?;
        Ok(self.open_scope(op, keys))
    }

    /// Opens a scope of `op` over `keys` (each checked): they are claimed as unfinished
    /// by a new failure, which the scope settles or fails.
    fn open_scope(&mut self, op: Op, keys: Vec<ClaimKey>) -> Scope {
        let failure = self.failures.create(FailureCause::Unfinished { op });
        self.claim_scope(failure, keys);
        Scope { failure }
    }

    /// Claims `keys` (each checked) for `failure`, a new node, which keeps them as the
    /// scope's writes.
    fn claim_scope(&mut self, failure: FailureId, keys: Vec<ClaimKey>) {
        self.claim_all(&keys, failure);
        match self.failures.nodes.get_mut(&failure) {
            Some(node) => node.writes = keys,
            None => self.failures.recycle_keys(keys),
        }
        self.failures.free_if_unclaimed(failure);
    }

    /// Makes the deferred scope's claims, as [`admit`](Self::admit) would have made them:
    /// the first thing every call but the scope's own `settle` and `fail` does.
    #[inline]
    fn undefer(&mut self) {
        if let Some(Deferred {
            failure,
            op,
            writes,
        }) = self.deferred.take()
        {
            self.failures
                .create_as(failure, FailureCause::Unfinished { op });
            self.claim_scope(failure, writes);
        }
    }

    /// The deferred scope, if `scope` is it.
    #[inline]
    fn take_deferred(&mut self, scope: &Scope) -> Option<Deferred> {
        match &self.deferred {
            Some(deferred) if deferred.failure == scope.failure => self.deferred.take(),
            _ => None,
        }
    }

    /// Ends a scope whose work succeeded: the bytes it claimed become clean.
    ///
    /// Only the scope's own claims within its ranges are released: bytes claimed since
    /// by other work keep their claims, and outputs of launches skipped because they
    /// read the scope's bytes while it was open keep theirs (those launches did not run).
    pub(crate) fn settle(&mut self, scope: Scope) {
        if let Some(deferred) = self.take_deferred(&scope) {
            // Nobody claimed its bytes, and nobody looked: nothing to release.
            self.failures.recycle_keys(deferred.writes);
            return;
        }
        self.undefer();
        let failure = scope.failure;
        let Some(node) = self.failures.nodes.get_mut(&failure) else {
            return; // Every claim of the scope has been cleared already.
        };
        let writes = mem::take(&mut node.writes);
        for key in &writes {
            if let Some(allocation) = self.memories.get_mut(&key.memory) {
                allocation.clear_carrying(key.range, failure, &mut self.failures);
            }
        }
        self.failures.recycle_keys(writes);
    }

    /// Ends a scope whose work failed: its claims stay, and `error` becomes their cause
    /// ([`FailureCause::Failed`]), which every later read of those bytes reports.
    ///
    /// When every claim of the scope has been cleared already (say, by host writes),
    /// nothing carries the failure any more and `error` is dropped.
    pub(crate) fn fail(&mut self, scope: Scope, error: ServerError) {
        if let Some(Deferred {
            failure, writes, ..
        }) = self.take_deferred(&scope)
        {
            self.failures
                .create_as(failure, FailureCause::Failed(error));
            self.claim_all(&writes, failure);
            self.failures.recycle_keys(writes);
            self.failures.free_if_unclaimed(failure);
            return;
        }
        self.undefer();
        let Some(node) = self.failures.nodes.get_mut(&scope.failure) else {
            return;
        };
        node.cause = FailureCause::Failed(error);
        let writes = mem::take(&mut node.writes);
        self.failures.recycle_keys(writes);
    }

    /// Claims `keys` directly with a known error as the cause: for work refused or failed
    /// before anything could run (a refused capture, a failed submit).
    ///
    /// Returns the new failure. When `keys` is empty nothing carries it and it is never
    /// live.
    ///
    /// # Errors
    ///
    /// Every key is checked before any is claimed, and a refused call changes nothing:
    /// [`ServerError::UnknownMemory`] when a key's allocation is not tracked;
    /// [`ServerError::InvalidArgument`] naming the key when its range runs past the end
    /// of the allocation.
    pub(crate) fn taint(
        &mut self,
        keys: impl IntoIterator<Item = ClaimKey>,
        error: ServerError,
    ) -> Result<FailureId, ServerError> {
        self.undefer();
        let keys = self.valid_keys(keys)?;
        let failure = self.failures.create(FailureCause::Failed(error));
        self.claim_all(&keys, failure);
        self.failures.recycle_keys(keys);
        self.failures.free_if_unclaimed(failure);
        Ok(failure)
    }

    /// Claims, with `error`, the keys whose allocation is still tracked, skipping the
    /// others (memory freed since it was written; rule 15). Keys running past their
    /// allocation are clipped. Returns the failure, or `None` when nothing was claimed.
    pub(crate) fn taint_live(
        &mut self,
        keys: impl IntoIterator<Item = ClaimKey>,
        error: ServerError,
    ) -> Option<FailureId> {
        self.undefer();
        let keys: Vec<ClaimKey> = keys
            .into_iter()
            .filter_map(|key| {
                let size = self.memories.get(&key.memory)?.size;
                let end = key.range.end().min(size);
                (key.range.start() < end).then(|| ClaimKey {
                    memory: key.memory,
                    range: ByteRange::from_bounds(key.range.start(), end),
                })
            })
            .collect();
        if keys.is_empty() {
            return None;
        }
        self.taint(keys, error).ok()
    }

    /// Whether `memory` is tracked (allocated, not yet forgotten).
    pub(crate) fn is_tracked(&mut self, memory: MemoryId) -> bool {
        self.undefer();
        self.memories.contains_key(&memory)
    }

    /// Records that the host wrote exactly the bytes of `key`: they become clean. Claims
    /// it covers in part are split, and their remaining pieces keep their failure.
    ///
    /// # Errors
    ///
    /// [`ServerError::UnknownMemory`] when the allocation is not tracked;
    /// [`ServerError::InvalidArgument`] naming the key when its range runs past the end
    /// of the allocation. Nothing is changed.
    pub(crate) fn host_write(&mut self, key: ClaimKey) -> Result<(), ServerError> {
        self.undefer();
        self.valid(key)?;
        if let Some(allocation) = self.memories.get_mut(&key.memory) {
            allocation.clear(key.range, &mut self.failures);
        }
        Ok(())
    }

    /// Checks that nothing claims a byte of `key`: a read of it returns what was
    /// successfully written. A read that only touches a claim (adjacent) is fine.
    ///
    /// # Errors
    ///
    /// [`ServerError::Unwritten`] when the read overlaps a claim, naming the allocation,
    /// the read range, the first overlapping claim as stored, its failure, the failure's
    /// cause and the chain of launches skipped because of it;
    /// [`ServerError::UnknownMemory`] when the allocation is not tracked;
    /// [`ServerError::InvalidArgument`] naming the key when its range runs past the end
    /// of the allocation.
    pub(crate) fn check_read(&mut self, key: ClaimKey) -> Result<(), ServerError> {
        self.undefer();
        match self.valid(key)?.first_overlap(key.range) {
            None => Ok(()),
            Some(claim) => Err(self.unwritten(key, claim)),
        }
    }

    /// [`check_read`](Self::check_read) of every key in turn.
    ///
    /// # Errors
    ///
    /// The first key's error, as [`check_read`](Self::check_read) gives it.
    #[cfg(test)]
    pub(crate) fn check_reads(
        &mut self,
        keys: impl IntoIterator<Item = ClaimKey>,
    ) -> Result<(), ServerError> {
        self.undefer();
        keys.into_iter().try_for_each(|key| self.check_read(key))
    }

    /// Passes failures through a launch `op` on `stream` that reads `inputs` and writes
    /// `outputs`.
    ///
    /// When no input overlaps a claim the launch can run: nothing changes and this
    /// returns `Ok`. Otherwise the launch is skipped: the first claimed input (in the
    /// order given) decides, its outputs are claimed with the *same* failure as that
    /// input's claim, and a [`Skipped`] record naming `op`, `stream`, the input and its
    /// claimed bytes (the input's range clipped to the claim) is appended to that
    /// failure's chain.
    ///
    /// # Errors
    ///
    /// Every key (inputs and outputs) is checked first, and a refused call changes
    /// nothing: [`ServerError::UnknownMemory`] when a key's allocation is not tracked;
    /// [`ServerError::InvalidArgument`] naming the key when its range runs past the end
    /// of the allocation.
    ///
    /// When the launch is skipped, [`ServerError::Unwritten`] for the claimed input, as
    /// [`check_read`](Self::check_read) would have given it before this launch, so the
    /// caller knows why the launch did not run.
    pub(crate) fn propagate<O>(
        &mut self,
        op: Op,
        stream: StreamId,
        inputs: impl IntoIterator<Item = ClaimKey>,
        outputs: O,
    ) -> Result<(), ServerError>
    where
        O: IntoIterator<Item = ClaimKey> + Clone,
    {
        self.undefer();
        let mut skipped_by = None;
        for key in inputs {
            let claim = self.valid(key)?.first_overlap(key.range);
            if skipped_by.is_none() {
                skipped_by = claim.map(|claim| (key, claim));
            }
        }
        for key in outputs.clone() {
            self.valid(key)?;
        }
        let Some((input, claim)) = skipped_by else {
            return Ok(());
        };
        Err(self.skip(op, stream, input, claim, outputs))
    }

    /// Skips work by `op` on `stream` whose `input` overlaps `claim`: the skip joins the
    /// claim's chain, the outputs are claimed with its failure, and the read's error is
    /// returned. Every key was checked.
    fn skip(
        &mut self,
        op: Op,
        stream: StreamId,
        input: ClaimKey,
        claim: Claim,
        outputs: impl IntoIterator<Item = ClaimKey>,
    ) -> ServerError {
        let error = self.unwritten(input, claim);
        if let Some(node) = self.failures.nodes.get_mut(&claim.failure) {
            node.chain.push(Skipped {
                op,
                stream,
                input: input.memory,
                input_label: None,
                range: input.range.intersection(claim.range).unwrap_or(claim.range),
            });
        }
        for key in outputs {
            if let Some(allocation) = self.memories.get_mut(&key.memory) {
                allocation.claim(key.range, claim.failure, &mut self.failures);
            }
        }
        error
    }

    /// [`propagate`](Self::propagate) then [`enter`](Self::enter), in one pass: the eager
    /// launch's admission. Every key is checked once; a claimed input skips the work
    /// (its outputs claimed with the input's failure, `op` added to the chain, and the
    /// error returned, as `propagate`); otherwise the outputs are claimed as unfinished
    /// by `op` and the scope returned, as `enter`.
    ///
    /// # Errors
    ///
    /// As [`propagate`](Self::propagate); a refused key changes nothing.
    pub(crate) fn admit(
        &mut self,
        op: Op,
        stream: StreamId,
        inputs: &[ClaimKey],
        outputs: &[ClaimKey],
    ) -> Result<Scope, ServerError> {
        self.undefer();
        let mut skipped_by = None;
        for &key in inputs {
            let claim = self.valid(key)?.first_overlap(key.range);
            if skipped_by.is_none() {
                skipped_by = claim.map(|claim| (key, claim));
            }
        }
        let mut unclaimed = true;
        for &key in outputs {
            unclaimed &= self.valid(key)?.first_overlap(key.range).is_none();
        }
        if let Some((input, claim)) = skipped_by {
            return Err(self.skip(op, stream, input, claim, outputs.iter().copied()));
        }
        let mut keys = self.failures.keys();
        keys.extend_from_slice(outputs);
        if unclaimed {
            let failure = self.failures.next_id();
            self.deferred = Some(Deferred {
                failure,
                op,
                writes: keys,
            });
            return Ok(Scope { failure });
        }
        Ok(self.open_scope(op, keys))
    }

    /// The claims on `memory`, in address order: the claimed bytes and the failure each
    /// carries.
    ///
    /// # Errors
    ///
    /// [`ServerError::UnknownMemory`] when `memory` is not tracked.
    #[cfg(test)]
    pub(crate) fn claims(
        &mut self,
        memory: MemoryId,
    ) -> Result<impl Iterator<Item = (ByteRange, FailureId)>, ServerError> {
        self.undefer();
        let allocation = self
            .memories
            .get(&memory)
            .ok_or_else(|| ServerError::UnknownMemory(memory))?;
        Ok(allocation.claims.iter().map(|c| (c.range, c.failure)))
    }

    /// Whether no claim overlaps `key`, so a read of it would pass.
    ///
    /// # Errors
    ///
    /// [`ServerError::UnknownMemory`] when the allocation is not tracked;
    /// [`ServerError::InvalidArgument`] naming the key when its range runs past the end
    /// of the allocation.
    #[cfg(test)]
    pub(crate) fn is_clear(&mut self, key: ClaimKey) -> Result<bool, ServerError> {
        self.undefer();
        Ok(self.valid(key)?.first_overlap(key.range).is_none())
    }

    /// How many failures are live (carried by at least one claim).
    #[cfg(test)]
    pub(crate) fn failure_count(&mut self) -> usize {
        self.undefer();
        self.failures.nodes.len()
    }

    /// What a live failure is; `None` once no claim carries it (or it never existed).
    #[cfg(test)]
    pub(crate) fn cause(&mut self, failure: FailureId) -> Option<&FailureCause> {
        self.undefer();
        self.failures.nodes.get(&failure).map(|node| &node.cause)
    }

    /// The launches skipped because of a live failure, oldest first; `None` once no
    /// claim carries it (or it never existed).
    #[cfg(test)]
    pub(crate) fn chain(&mut self, failure: FailureId) -> Option<&[Skipped]> {
        self.undefer();
        self.failures
            .nodes
            .get(&failure)
            .map(|node| node.chain.as_slice())
    }

    /// The allocation `key` names, once the key is known to lie within it.
    #[inline]
    fn valid(&self, key: ClaimKey) -> Result<&Allocation, ServerError> {
        let allocation = self
            .memories
            .get(&key.memory)
            .ok_or_else(|| ServerError::UnknownMemory(key.memory))?;
        if key.range.end() > allocation.size {
            return Err(ServerError::invalid_value_of(
                "claim key",
                key.range,
                Subject::buffer(key.memory),
                format!(
                    "runs past the end of the allocation ({} B)",
                    allocation.size
                ),
            ));
        }
        Ok(allocation)
    }

    /// `keys` gathered into a recycled vector, every one checked by
    /// [`valid`](Self::valid).
    fn valid_keys(
        &mut self,
        keys: impl IntoIterator<Item = ClaimKey>,
    ) -> Result<Vec<ClaimKey>, ServerError> {
        let mut gathered = self.failures.keys();
        gathered.extend(keys);
        if let Some(error) = gathered.iter().find_map(|&key| self.valid(key).err()) {
            self.failures.recycle_keys(gathered);
            return Err(error);
        }
        Ok(gathered)
    }

    /// Claims every key (already checked) for `failure`.
    fn claim_all(&mut self, keys: &[ClaimKey], failure: FailureId) {
        for key in keys {
            if let Some(allocation) = self.memories.get_mut(&key.memory) {
                allocation.claim(key.range, failure, &mut self.failures);
            }
        }
    }

    /// The error for a read of `key` that overlaps `claim`.
    fn unwritten(&self, key: ClaimKey, claim: Claim) -> ServerError {
        debug_assert!(
            self.failures.nodes.contains_key(&claim.failure),
            "{} has a claim but no node",
            claim.failure
        );
        let (cause, chain) = match self.failures.nodes.get(&claim.failure) {
            Some(node) => (node.cause.clone(), node.chain.clone()),
            // Unreachable: a claim's failure is live for as long as the claim is.
            None => (FailureCause::NeverWritten, Vec::new()),
        };
        ServerError::Unwritten(Box::new(Unwritten {
            memory: key.memory,
            label: None,
            read: key.range,
            claimed: claim.range,
            failure: claim.failure,
            cause,
            chain,
            by: None,
        }))
    }
}

/// The runtime shares one ledger between threads behind a `Mutex`.
const _: () = {
    const fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<TaintLedger>();
};

#[cfg(test)]
mod tests;
