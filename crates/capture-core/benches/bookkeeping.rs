//! Microbenchmarks of the core's bookkeeping, each beside a baseline that does the
//! irreducible equivalent with plain std collections, in the same shape (the same
//! elements, the same keys).
//!
//! `cargo bench -p capture-core --features bench-internals` runs divan over every
//! operation and its baseline at 1k, 10k and 100k elements, then a ratio report of its
//! own in the same process: per operation and size, the op and its baseline timed in
//! interleaved samples (median of 15 after calibration, each of enough workloads to last
//! at least 2 ms), printed per element with the ratio (target: within 3x of the
//! baseline), and the growth of a whole workload from 1k to 100k (target: no worse than
//! n log n). A miss is printed as `MISS`, with a note when the baseline outgrows n log n
//! too (then the memory hierarchy grew, not the op's algorithm); benchmarks report, they
//! never fail. The report runs every operation whatever filter divan was given, and not
//! at all under `--list`, `--test` or `cargo test`.
//!
//! What one workload of size n is, for each operation:
//! - `record`: a window records n launches, each given three claims (two read, one
//!   written) out of n/10; the baseline pushes the same 3n bindings, as the same-size
//!   struct, into a `Vec`.
//! - `take_recorded`: a closed window that recorded 10n launches over n claims hands its
//!   claims back, each once, in claim order; the baseline moves the same n claims out of
//!   a `Vec` and sorts them by claim (collecting them into a `BTreeMap` instead costs
//!   about three times as much, which would flatter the op).
//! - `claim_settle`: a replay writing n ranges claims them on entry and settles them once
//!   enqueued; the baseline inserts the n ranges into a `BTreeMap` and removes them.
//! - `taint_read`: n clean reads against a ledger holding n claims; the baseline looks up
//!   the claim before each read's end in a `BTreeMap` of the same claims.
//! - `info_hit`: n hits on an info cache of n entries; the baseline looks the same words
//!   up in a `HashMap<Box<[u64]>, _>`.
//! - `drop_queue`: n values pushed and the queue flushed (freeing the previous flush's
//!   n); the baseline pushes the same values onto a `VecDeque` and drains it.
//! - `ordering`: n ordering checks (two reads, one write each) against tracks of n
//!   allocations written on other streams; the baseline does the same check over a `Vec`
//!   of each allocation's last writer and readers since, sorted by allocation (ids only
//!   grow, so a new allocation appends) and binary-searched.
//!
//! Claims are 256-byte ranges, four to a 1 KiB allocation (a batched allocation carved
//! into tensors); keys are picked by a fixed pseudo-random sequence, so every run
//! measures the same work.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hint::black_box;
use std::time::{Duration, Instant};

use capture_core::backend::{
    BufferBinding, CachePolicy, ClaimKey, DeviceCaptures, Fence, FlushingPolicy,
    ManagedMemoryBinding, ManagedMemoryHandle, MetadataInfoCache, PendingDropQueue, StreamCapture,
};
use capture_core::internals::{TaintLedger, Tracks, handle};
use capture_core::{Access, GraphId, MemoryId, Op, ServerError, StreamId};
use divan::Bencher;
use divan::counter::ItemsCount;

/// The sizes every operation runs at.
const SIZES: [usize; 3] = [1_000, 10_000, 100_000];

/// Bytes of one claim; `CLAIMS_PER_ALLOCATION` of them make an allocation.
const CLAIM_BYTES: u64 = 256;
const CLAIMS_PER_ALLOCATION: u64 = 4;

/// Launches per claim in `record` and `take_recorded`.
const LAUNCHES_PER_CLAIM: usize = 10;

/// Pooled streams in `ordering`.
const STREAMS: usize = 4;

const S0: StreamId = StreamId::new(0);

fn main() {
    divan::main();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let has = |flag: &str| args.iter().any(|a| a == flag);
    if has("--list") || has("--test") || !has("--bench") {
        // `cargo test` runs each benchmark once (divan's test mode); the report is for
        // `cargo bench`.
        return;
    }
    report::run();
}

// ---------------------------------------------------------------------------------------
// Shared pieces.

/// A fixed pseudo-random sequence (splitmix64).
struct Sequence(u64);

impl Sequence {
    fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n`.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// `items` in a shuffled order.
    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }
}

/// Allocations holding `claims` claims, four to each.
fn allocations(claims: usize) -> Vec<ManagedMemoryHandle> {
    let count = (claims as u64).div_ceil(CLAIMS_PER_ALLOCATION);
    (0..count)
        .map(|i| handle(MemoryId::new(i), CLAIM_BYTES * CLAIMS_PER_ALLOCATION))
        .collect()
}

/// Claim `j` of `handles`, bound with `access`.
fn bind(handles: &[ManagedMemoryHandle], j: usize, access: Access) -> BufferBinding {
    let h = &handles[j / CLAIMS_PER_ALLOCATION as usize];
    let offset = (j as u64 % CLAIMS_PER_ALLOCATION) * CLAIM_BYTES;
    BufferBinding::new(&h.binding(), S0, offset, CLAIM_BYTES, access).expect("in bounds")
}

/// A launch's claims: two read, one written, out of `claims`.
fn launch_plan(launches: usize, claims: usize, seed: u64) -> Vec<[usize; 3]> {
    let mut seq = Sequence::new(seed);
    (0..launches)
        .map(|_| [seq.below(claims), seq.below(claims), seq.below(claims)])
        .collect()
}

const LAUNCH_ACCESS: [Access; 3] = [Access::Read, Access::Read, Access::Write];

/// One launch's bindings, as the runtime hands them to `record`.
fn launch(handles: &[ManagedMemoryHandle], plan: &[usize; 3]) -> [BufferBinding; 3] {
    [0, 1, 2].map(|k| bind(handles, plan[k], LAUNCH_ACCESS[k]))
}

/// A stream capture whose window records, on a device of its own.
fn recording() -> StreamCapture {
    let mut capture = StreamCapture::new(&DeviceCaptures::new(false));
    capture.prepare(S0).expect("prepare");
    capture.begin().expect("begin");
    capture
}

/// What `StreamCapture` keeps per claim, for the baselines: the binding and the first
/// read and write.
struct Recorded {
    binding: BufferBinding,
    first_read: Option<u64>,
    first_write: Option<u64>,
}

/// A fence the device has always passed.
struct Passed;

impl Fence for Passed {
    fn wait(self) -> Result<(), ServerError> {
        Ok(())
    }
}

/// One operation and its baseline, over a workload of a given size.
trait Workload {
    /// The operation's name in both reports.
    const NAME: &'static str;
    /// What one element of the workload is.
    const UNIT: &'static str;
    /// What size means, and what the baseline does, for the report's legend.
    const SHAPE: &'static str;
    type OpIn;
    type OpOut;
    type BaseIn;
    type BaseOut;

    fn new(size: usize) -> Self;
    /// How many elements one workload of this size handles (ns per element divide by it).
    fn elements(&self) -> usize;
    fn op_input(&mut self) -> Self::OpIn;
    fn op(&mut self, input: Self::OpIn) -> Self::OpOut;
    fn base_input(&mut self) -> Self::BaseIn;
    fn base(&mut self, input: Self::BaseIn) -> Self::BaseOut;
}

// ---------------------------------------------------------------------------------------
// record: per launch.

struct Record {
    handles: Vec<ManagedMemoryHandle>,
    plan: Vec<[usize; 3]>,
}

impl Workload for Record {
    const NAME: &'static str = "record";
    const UNIT: &'static str = "launch";
    const SHAPE: &'static str = "size = launches recorded, 3 bindings each over size/10 claims; baseline: the 3·size bindings pushed into a Vec";
    type OpIn = (StreamCapture, Vec<[BufferBinding; 3]>);
    type OpOut = StreamCapture;
    type BaseIn = Vec<[BufferBinding; 3]>;
    type BaseOut = Vec<Recorded>;

    fn new(size: usize) -> Self {
        let claims = size / LAUNCHES_PER_CLAIM;
        Self {
            handles: allocations(claims),
            plan: launch_plan(size, claims, 1),
        }
    }

    fn elements(&self) -> usize {
        self.plan.len()
    }

    fn op_input(&mut self) -> Self::OpIn {
        (recording(), self.base_input())
    }

    fn op(&mut self, (mut capture, launches): Self::OpIn) -> StreamCapture {
        for bindings in launches {
            capture.record(bindings);
        }
        capture
    }

    fn base_input(&mut self) -> Self::BaseIn {
        self.plan.iter().map(|p| launch(&self.handles, p)).collect()
    }

    fn base(&mut self, launches: Self::BaseIn) -> Vec<Recorded> {
        let mut recorded = Vec::new();
        for (i, bindings) in launches.into_iter().enumerate() {
            for binding in bindings {
                let access = binding.access();
                recorded.push(Recorded {
                    first_read: access.reads().then_some(i as u64),
                    first_write: access.writes().then_some(i as u64),
                    binding,
                });
            }
        }
        recorded
    }
}

// ---------------------------------------------------------------------------------------
// take_recorded: per claim, 10 launches each.

struct TakeRecorded {
    handles: Vec<ManagedMemoryHandle>,
    plan: Vec<[usize; 3]>,
    claims: usize,
}

impl Workload for TakeRecorded {
    const NAME: &'static str = "take_recorded";
    const UNIT: &'static str = "claim";
    const SHAPE: &'static str = "size = claims, recorded by 10·size launches; baseline: the size claims moved out of a Vec and sorted by claim";
    type OpIn = StreamCapture;
    type OpOut = (StreamCapture, Vec<BufferBinding>);
    type BaseIn = Vec<Recorded>;
    type BaseOut = (Vec<Recorded>, Vec<BufferBinding>);

    fn new(size: usize) -> Self {
        // Every claim is used: the first `size` launches write each one in turn.
        let mut plan = launch_plan(size * LAUNCHES_PER_CLAIM, size, 2);
        for (j, p) in plan.iter_mut().take(size).enumerate() {
            p[2] = j;
        }
        Self {
            handles: allocations(size),
            plan,
            claims: size,
        }
    }

    fn elements(&self) -> usize {
        self.claims
    }

    fn op_input(&mut self) -> StreamCapture {
        let mut capture = recording();
        for p in &self.plan {
            capture.record(launch(&self.handles, p));
        }
        capture.end(S0).expect("owned end");
        capture
    }

    fn op(&mut self, mut capture: StreamCapture) -> Self::OpOut {
        let recorded = capture.take_recorded();
        (capture, recorded)
    }

    fn base_input(&mut self) -> Vec<Recorded> {
        // The same claims in the same (first-seen) order, with their first read and write.
        let mut at: HashMap<ClaimKey, usize> = HashMap::new();
        let mut recorded: Vec<Recorded> = Vec::new();
        for (i, p) in self.plan.iter().enumerate() {
            for binding in launch(&self.handles, p) {
                let i = i as u64;
                let access = binding.access();
                match at.get(&binding.claim_key()) {
                    Some(&k) => {
                        let r = &mut recorded[k];
                        if access.reads() {
                            r.first_read.get_or_insert(i);
                        }
                        if access.writes() {
                            r.first_write.get_or_insert(i);
                        }
                    }
                    None => {
                        at.insert(binding.claim_key(), recorded.len());
                        recorded.push(Recorded {
                            first_read: access.reads().then_some(i),
                            first_write: access.writes().then_some(i),
                            binding,
                        });
                    }
                }
            }
        }
        recorded
    }

    fn base(&mut self, mut recorded: Vec<Recorded>) -> Self::BaseOut {
        let mut merged: Vec<BufferBinding> = std::mem::take(&mut recorded)
            .into_iter()
            .map(|r| r.binding)
            .collect();
        merged.sort_unstable_by_key(BufferBinding::claim_key);
        (recorded, merged)
    }
}

// ---------------------------------------------------------------------------------------
// claim_settle: per written range of one replay.

/// Keys of `claims` claims over `allocations(claims)`, in claim-key order.
fn claim_keys(handles: &[ManagedMemoryHandle], claims: usize) -> Vec<ClaimKey> {
    (0..claims)
        .map(|j| bind(handles, j, Access::Write).claim_key())
        .collect()
}

struct ClaimSettle {
    ledger: TaintLedger,
    written: Vec<ClaimKey>,
    map: BTreeMap<(MemoryId, u64), (u64, u64)>,
}

impl Workload for ClaimSettle {
    const NAME: &'static str = "claim_settle";
    const UNIT: &'static str = "range";
    const SHAPE: &'static str = "size = ranges one replay writes, claimed and settled; baseline: BTreeMap insert and remove of each range";
    type OpIn = ();
    type OpOut = ();
    type BaseIn = ();
    type BaseOut = ();

    fn new(size: usize) -> Self {
        let handles = allocations(size);
        let mut ledger = TaintLedger::new();
        for h in &handles {
            ledger.fresh(h.id(), h.size()).expect("fresh");
            let whole = BufferBinding::whole(&h.binding(), S0, Access::Write).claim_key();
            ledger.host_write(whole).expect("written");
        }
        Self {
            ledger,
            written: claim_keys(&handles, size),
            map: BTreeMap::new(),
        }
    }

    fn elements(&self) -> usize {
        self.written.len()
    }

    fn op_input(&mut self) {}

    fn op(&mut self, (): ()) {
        let scope = self
            .ledger
            .enter(Op::replay(GraphId::new(0)), self.written.iter().copied())
            .expect("tracked");
        self.ledger.settle(scope);
    }

    fn base_input(&mut self) {}

    fn base(&mut self, (): ()) {
        for (failure, key) in self.written.iter().enumerate() {
            self.map.insert(
                (key.memory, key.range.start()),
                (key.range.end(), failure as u64),
            );
        }
        for key in &self.written {
            black_box(self.map.remove(&(key.memory, key.range.start())));
        }
    }
}

// ---------------------------------------------------------------------------------------
// taint_read: per read, against n claims.

struct TaintRead {
    ledger: TaintLedger,
    claims: BTreeMap<(MemoryId, u64), u64>,
    reads: Vec<ClaimKey>,
}

impl Workload for TaintRead {
    const NAME: &'static str = "taint_read";
    const UNIT: &'static str = "read";
    const SHAPE: &'static str = "size = claims in the ledger, and clean reads checked; baseline: BTreeMap lookup of the claim before each read";
    type OpIn = ();
    type OpOut = ();
    type BaseIn = ();
    type BaseOut = ();

    fn new(size: usize) -> Self {
        // Twice the ranges: the even ones stay claimed (never written), the odd ones are
        // written by the host and read.
        let handles = allocations(2 * size);
        let keys = claim_keys(&handles, 2 * size);
        let mut ledger = TaintLedger::new();
        for h in &handles {
            ledger.fresh(h.id(), h.size()).expect("fresh");
        }
        let mut claims = BTreeMap::new();
        let mut reads = Vec::with_capacity(size);
        for (j, key) in keys.into_iter().enumerate() {
            if j % 2 == 1 {
                ledger.host_write(key).expect("written");
                reads.push(key);
            } else {
                claims.insert((key.memory, key.range.start()), key.range.end());
            }
        }
        Sequence::new(3).shuffle(&mut reads);
        for &key in &reads {
            assert!(ledger.check_read(key).is_ok(), "{key} reads clean");
        }
        Self {
            ledger,
            claims,
            reads,
        }
    }

    fn elements(&self) -> usize {
        self.reads.len()
    }

    fn op_input(&mut self) {}

    fn op(&mut self, (): ()) {
        for &key in &self.reads {
            black_box(self.ledger.check_read(black_box(key)).is_ok());
        }
    }

    fn base_input(&mut self) {}

    fn base(&mut self, (): ()) {
        for &key in &self.reads {
            let key = black_box(key);
            // The last claim starting before the read ends overlaps it if it ends after
            // the read starts: claims never overlap each other.
            let clean = self
                .claims
                .range(..(key.memory, key.range.end()))
                .next_back()
                .is_none_or(|(&(memory, _), &end)| {
                    memory != key.memory || end <= key.range.start()
                });
            black_box(clean);
        }
    }
}

// ---------------------------------------------------------------------------------------
// info_hit: per hit, with n entries.

/// Info words of entry `i`: a shape and its strides, distinct per entry.
fn info_words(i: usize) -> [u64; 4] {
    let i = i as u64;
    [
        1 + i % 64,
        1 + i / 64,
        1 + i % 64,
        (1 + i % 64) * (1 + i / 64),
    ]
}

struct InfoHit {
    cache: MetadataInfoCache<u64>,
    map: HashMap<Box<[u64]>, u64>,
    lookups: Vec<[u64; 4]>,
}

impl Workload for InfoHit {
    const NAME: &'static str = "info_hit";
    const UNIT: &'static str = "hit";
    const SHAPE: &'static str = "size = entries cached, and hits; baseline: HashMap<Box<[u64]>, _> lookup of the same words";
    type OpIn = ();
    type OpOut = ();
    type BaseIn = ();
    type BaseOut = ();

    fn new(size: usize) -> Self {
        let policy =
            CachePolicy::new(size + 1, CachePolicy::DEFAULT_MAX_CACHED_BYTES).expect("policy");
        let mut cache = MetadataInfoCache::new(policy);
        let mut map = HashMap::new();
        let mut lookups = Vec::with_capacity(size);
        for i in 0..size {
            let words = info_words(i);
            let inserted = cache.insert(&words, i as u64).expect("fresh words");
            assert!(inserted.is_cached(), "entry {i} cached");
            map.insert(Box::from(&words[..]), i as u64);
            lookups.push(words);
        }
        Sequence::new(4).shuffle(&mut lookups);
        Self {
            cache,
            map,
            lookups,
        }
    }

    fn elements(&self) -> usize {
        self.lookups.len()
    }

    fn op_input(&mut self) {}

    fn op(&mut self, (): ()) {
        for words in &self.lookups {
            black_box(self.cache.get(black_box(words)));
        }
    }

    fn base_input(&mut self) {}

    fn base(&mut self, (): ()) {
        for words in &self.lookups {
            black_box(self.map.get(&black_box(words)[..]));
        }
    }
}

// ---------------------------------------------------------------------------------------
// drop_queue: per value pushed and freed.

struct DropQueue {
    handles: Vec<ManagedMemoryHandle>,
    queue: PendingDropQueue<Passed>,
    deque: VecDeque<ManagedMemoryBinding>,
}

impl Workload for DropQueue {
    const NAME: &'static str = "drop_queue";
    const UNIT: &'static str = "value";
    const SHAPE: &'static str = "size = values pushed, then one flush freeing the previous n; baseline: VecDeque push_back, then drain";
    type OpIn = Vec<ManagedMemoryBinding>;
    type OpOut = ();
    type BaseIn = Vec<ManagedMemoryBinding>;
    type BaseOut = ();

    fn new(size: usize) -> Self {
        let handles = (0..size as u64)
            .map(|i| handle(MemoryId::new(i), CLAIM_BYTES))
            .collect();
        let mut w = Self {
            handles,
            queue: PendingDropQueue::new(FlushingPolicy::default()),
            deque: VecDeque::new(),
        };
        // Prime the double buffer: each timed flush frees the previous flush's n values.
        let values = w.op_input();
        w.op(values);
        w
    }

    fn elements(&self) -> usize {
        self.handles.len()
    }

    fn op_input(&mut self) -> Vec<ManagedMemoryBinding> {
        self.handles
            .iter()
            .map(ManagedMemoryHandle::binding)
            .collect()
    }

    fn op(&mut self, values: Vec<ManagedMemoryBinding>) {
        for value in values {
            self.queue.push(value);
        }
        self.queue.flush(|| Passed).expect("passed");
    }

    fn base_input(&mut self) -> Vec<ManagedMemoryBinding> {
        self.op_input()
    }

    fn base(&mut self, values: Vec<ManagedMemoryBinding>) {
        for value in values {
            self.deque.push_back(value);
        }
        self.deque.drain(..).for_each(drop);
    }
}

// ---------------------------------------------------------------------------------------
// ordering: per ordering check, against n tracked allocations.

/// What the baseline keeps per allocation: its last writer and the readers since, each
/// with the epoch of that use.
#[derive(Default)]
struct LastUse {
    writer: Option<(usize, u64)>,
    readers: Vec<(usize, u64)>,
}

struct Ordering {
    tracks: Tracks,
    uses: Vec<(MemoryId, LastUse)>,
    done: [u64; STREAMS],
    checks: Vec<([MemoryId; 2], MemoryId)>,
    out: Vec<(usize, u64)>,
}

impl Workload for Ordering {
    const NAME: &'static str = "ordering";
    const UNIT: &'static str = "check";
    const SHAPE: &'static str = "size = allocations tracked, and checks (2 reads, 1 write); baseline: binary search of a sorted Vec of last uses";
    type OpIn = ();
    type OpOut = ();
    type BaseIn = ();
    type BaseOut = ();

    fn new(size: usize) -> Self {
        let mut tracks = Tracks::new(STREAMS);
        let mut uses: Vec<(MemoryId, LastUse)> = Vec::with_capacity(size);
        let mut epochs = [0u64; STREAMS];
        // Every allocation is written on stream 1, 2 or 3, and every other one then read
        // on another of them; stream 0 checks against them.
        for i in 0..size {
            let id = MemoryId::new(i as u64);
            let q = 1 + i % 3;
            tracks.used(q, [], [id]);
            epochs[q] += 1;
            uses.push((id, LastUse::default()));
            let last = &mut uses[i].1;
            last.writer = Some((q, epochs[q]));
            if i % 2 == 0 {
                let r = 1 + (i + 1) % 3;
                tracks.used(r, [id], []);
                epochs[r] += 1;
                last.readers.push((r, epochs[r]));
            }
        }
        // Half of each stream's work was seen complete.
        let mut done = [0u64; STREAMS];
        for q in 1..STREAMS {
            done[q] = epochs[q] / 2;
            tracks.good(q, done[q]);
        }
        let mut seq = Sequence::new(5);
        let mut id = || MemoryId::new(seq.below(size) as u64);
        let checks = (0..size).map(|_| ([id(), id()], id())).collect();
        Self {
            tracks,
            uses,
            done,
            checks,
            out: Vec::new(),
        }
    }

    fn elements(&self) -> usize {
        self.checks.len()
    }

    fn op_input(&mut self) {}

    fn op(&mut self, (): ()) {
        for (reads, write) in &self.checks {
            self.tracks
                .deps(0, reads.iter().copied(), [*write], &mut self.out);
            black_box(&self.out);
        }
    }

    fn base_input(&mut self) {}

    fn base(&mut self, (): ()) {
        let done = self.done;
        for (reads, write) in &self.checks {
            let out = &mut self.out;
            out.clear();
            let mut need = |(q, epoch): (usize, u64)| {
                if q == 0 || done[q] >= epoch {
                    return;
                }
                match out.iter_mut().find(|(s, _)| *s == q) {
                    Some(entry) => entry.1 = entry.1.max(epoch),
                    None => out.push((q, epoch)),
                }
            };
            let uses = &self.uses;
            let last_use = |id: &MemoryId| {
                uses.binary_search_by_key(id, |(id, _)| *id)
                    .ok()
                    .map(|at| &uses[at].1)
            };
            for id in reads {
                if let Some(writer) = last_use(id).and_then(|u| u.writer) {
                    need(writer);
                }
            }
            if let Some(last) = last_use(write) {
                last.writer.into_iter().for_each(&mut need);
                last.readers.iter().copied().for_each(&mut need);
            }
            out.sort_unstable();
            black_box(&self.out);
        }
    }
}

// ---------------------------------------------------------------------------------------
// divan: every operation and its baseline at every size.

fn bench_op<W: Workload>(bencher: Bencher, size: usize) {
    let w = RefCell::new(W::new(size));
    let elements = w.borrow().elements();
    bencher
        .counter(ItemsCount::new(elements))
        .with_inputs(|| w.borrow_mut().op_input())
        .bench_local_values(|input| w.borrow_mut().op(input));
}

fn bench_base<W: Workload>(bencher: Bencher, size: usize) {
    let w = RefCell::new(W::new(size));
    let elements = w.borrow().elements();
    bencher
        .counter(ItemsCount::new(elements))
        .with_inputs(|| w.borrow_mut().base_input())
        .bench_local_values(|input| w.borrow_mut().base(input));
}

macro_rules! divan_benches {
    ($($module:ident: $workload:ty),* $(,)?) => {$(
        mod $module {
            use super::*;

            #[divan::bench(args = SIZES, max_time = 1)]
            fn op(bencher: Bencher, size: usize) {
                bench_op::<$workload>(bencher, size);
            }

            #[divan::bench(args = SIZES, max_time = 1)]
            fn baseline(bencher: Bencher, size: usize) {
                bench_base::<$workload>(bencher, size);
            }
        }
    )*};
}

divan_benches!(
    record: Record,
    take_recorded: TakeRecorded,
    claim_settle: ClaimSettle,
    taint_read: TaintRead,
    info_hit: InfoHit,
    drop_queue: DropQueue,
    ordering: Ordering,
);

// ---------------------------------------------------------------------------------------
// The ratio report.

mod report {
    use super::*;

    /// Samples per side, after one warmup sample each.
    const SAMPLES: usize = 15;
    /// A sample lasts at least this long.
    const SAMPLE_TIME: Duration = Duration::from_millis(2);
    /// The op may take this many times its baseline.
    const RATIO_TARGET: f64 = 3.0;

    /// Runs `count` workloads back to back, inputs made before and outputs dropped
    /// after the clock: the time of the runs alone.
    fn sample<I, O>(
        count: usize,
        mut input: impl FnMut() -> I,
        mut run: impl FnMut(I) -> O,
    ) -> Duration {
        let inputs: Vec<I> = (0..count).map(|_| input()).collect();
        let mut outputs = Vec::with_capacity(count);
        let start = Instant::now();
        for i in inputs {
            outputs.push(run(i));
        }
        let elapsed = start.elapsed();
        drop(black_box(outputs));
        elapsed
    }

    /// How many workloads make a sample last `SAMPLE_TIME`.
    fn calibrate(mut time: impl FnMut(usize) -> Duration) -> usize {
        let mut count = 1;
        loop {
            let took = time(count);
            if took >= SAMPLE_TIME {
                return count;
            }
            let scale = SAMPLE_TIME.as_secs_f64() / took.as_secs_f64().max(1e-9);
            count = ((count as f64 * scale * 1.2).ceil() as usize).clamp(count + 1, count * 16);
        }
    }

    fn median(mut xs: Vec<f64>) -> f64 {
        xs.sort_by(f64::total_cmp);
        xs[xs.len() / 2]
    }

    /// One operation at one size: ns per workload, op and baseline.
    struct Row {
        size: usize,
        elements: usize,
        op: f64,
        base: f64,
    }

    fn measure<W: Workload>(size: usize) -> Row {
        let mut w = W::new(size);
        let elements = w.elements();
        let cell = RefCell::new(&mut w);
        let op = |count| {
            sample(
                count,
                || cell.borrow_mut().op_input(),
                |i| cell.borrow_mut().op(i),
            )
        };
        let base = |count| {
            sample(
                count,
                || cell.borrow_mut().base_input(),
                |i| cell.borrow_mut().base(i),
            )
        };
        let (op_count, base_count) = (calibrate(&op), calibrate(&base));
        let (mut ops, mut bases) = (Vec::new(), Vec::new());
        // Interleaved, so drift on a busy machine falls on both sides alike.
        for _ in 0..SAMPLES {
            ops.push(op(op_count).as_nanos() as f64 / op_count as f64);
            bases.push(base(base_count).as_nanos() as f64 / base_count as f64);
        }
        Row {
            size,
            elements,
            op: median(ops),
            base: median(bases),
        }
    }

    /// What the operation's growth from the smallest to the largest size may be.
    fn n_log_n(small: usize, large: usize) -> f64 {
        let f = |n: usize| n as f64 * (n as f64).ln();
        f(large) / f(small)
    }

    fn size_label(n: usize) -> String {
        if n >= 1000 && n.is_multiple_of(1000) {
            format!("{}k", n / 1000)
        } else {
            n.to_string()
        }
    }

    struct Outcome {
        name: &'static str,
        unit: &'static str,
        shape: &'static str,
        rows: Vec<Row>,
    }

    fn operation<W: Workload>() -> Outcome {
        let rows = SIZES
            .iter()
            .map(|&size| {
                eprint!("ratio report: {} at {}\r", W::NAME, size_label(size));
                measure::<W>(size)
            })
            .collect();
        Outcome {
            name: W::NAME,
            unit: W::UNIT,
            shape: W::SHAPE,
            rows,
        }
    }

    pub(super) fn run() {
        println!();
        println!(
            "ratio report: each op beside its baseline, median of {SAMPLES} interleaved \
             samples of at least {} ms each",
            SAMPLE_TIME.as_millis()
        );
        let outcomes = [
            operation::<Record>(),
            operation::<TakeRecorded>(),
            operation::<ClaimSettle>(),
            operation::<TaintRead>(),
            operation::<InfoHit>(),
            operation::<DropQueue>(),
            operation::<Ordering>(),
        ];
        eprint!("{:60}\r", "");
        println!();
        println!(
            "{:<14} {:>5}  {:<8} {:>10} {:>12} {:>7}  (target ≤ {RATIO_TARGET}×)",
            "operation", "size", "per", "op ns", "baseline ns", "ratio"
        );
        let mut misses = Vec::new();
        for o in &outcomes {
            for r in &o.rows {
                let e = r.elements as f64;
                let ratio = r.op / r.base;
                let miss = ratio > RATIO_TARGET;
                println!(
                    "{:<14} {:>5}  {:<8} {:>10.1} {:>12.1} {:>6.2}×{}",
                    o.name,
                    size_label(r.size),
                    o.unit,
                    r.op / e,
                    r.base / e,
                    ratio,
                    if miss { "  MISS" } else { "" }
                );
                if miss {
                    misses.push(format!(
                        "{} at {}: {ratio:.2}× its baseline",
                        o.name,
                        size_label(r.size)
                    ));
                }
            }
        }
        println!();
        for o in &outcomes {
            println!("{:<14} {}", o.name, o.shape);
        }
        println!();
        for o in &outcomes {
            let (first, last) = (&o.rows[0], &o.rows[o.rows.len() - 1]);
            let grew = last.op / first.op;
            let base_grew = last.base / first.base;
            let allows = n_log_n(first.elements, last.elements);
            let miss = grew > allows;
            // The baseline does the same work on the same keys: when it outgrows n log n
            // too, the growth is the memory hierarchy's (working sets past the caches),
            // not the op's algorithm. Said, never hidden.
            let note = if miss && base_grew > allows {
                "; the baseline is past n log n too"
            } else {
                ""
            };
            println!(
                "{:<14} {}→{}: op grew {grew:.1}× (n log n allows {allows:.1}×; baseline grew \
                 {base_grew:.1}×){}",
                o.name,
                size_label(first.size),
                size_label(last.size),
                if miss { "  MISS" } else { "" }
            );
            if miss {
                misses.push(format!(
                    "{} grew {grew:.1}× from {} to {}, more than n log n ({allows:.1}×){note}",
                    o.name,
                    size_label(first.size),
                    size_label(last.size)
                ));
            }
        }
        println!();
        if misses.is_empty() {
            println!("ratio report: every operation within its targets");
        } else {
            println!("ratio report: {} MISS(ES):", misses.len());
            for m in &misses {
                println!("  MISS {m}");
            }
        }
    }
}
