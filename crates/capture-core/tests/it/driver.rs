//! A small test driver for the core's integration tests.
//!
//! It behaves like a GPU where it matters to the rules: memory holds real bytes, nothing
//! runs at enqueue (queued work runs at a fence wait, a sync or a read), a recorded copy
//! re-reads its staging on every replay, a slice returned to its pool is poisoned at
//! once, and capture legality is modelled on CUDA's global mode: while any stream
//! records, a page allocation, a page free or a kernel load anywhere invalidates every
//! recording (instantiate then fails). With `AFFINE`, a capture must end on the thread
//! that began it. Faults are injected per operation by countdown.

// Shared by two test binaries, each using part of it.
#![allow(dead_code, unreachable_pub)]

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::ThreadId;

use capture_core::ServerError;
use capture_core::capture::StreamCapture;
use capture_core::driver::{Backend, DeviceStream, GraphDriver, Grid, LaunchBuffer};
use capture_core::drop_queue::{Fence, PendingDropQueue};
use capture_core::info_cache::MetadataInfoCache;
use capture_core::memory::{
    Access, ComputeStorage, ManagedMemoryHandle, MemoryManagement, StorageId,
};
use capture_core::range::ByteRange;
use capture_core::runtime::StreamSetup;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Bytes of the pages of one storage.
#[derive(Debug, Default)]
pub struct Memory {
    pages: HashMap<u64, Vec<u8>>,
    next: u64,
}

/// A slice of a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Res {
    page: u64,
    range: ByteRange,
}

/// What the whole fake device shares: which streams record, and the injected faults.
#[derive(Debug, Default)]
pub struct World {
    /// Recording streams, and why their recording was invalidated (if it was).
    recording: Mutex<BTreeMap<usize, Option<String>>>,
    faults: Mutex<HashMap<&'static str, u32>>,
    /// Driver calls that really happened, by name (`alloc`, `load`, ...).
    calls: Mutex<BTreeMap<&'static str, u64>>,
}

impl World {
    fn invalidate(&self, what: &str) {
        for reason in lock(&self.recording).values_mut() {
            reason.get_or_insert_with(|| format!("{what} during capture"));
        }
    }

    fn call(&self, op: &'static str) -> Result<(), ServerError> {
        *lock(&self.calls).entry(op).or_default() += 1;
        let mut faults = lock(&self.faults);
        if let Some(n) = faults.get_mut(op) {
            *n -= 1;
            if *n == 0 {
                faults.remove(op);
                return Err(ServerError::driver(
                    op,
                    std::io::Error::other(format!("injected fault in {op}")),
                ));
            }
        }
        Ok(())
    }

    /// Fails the `nth` next call of `op` (1 = the next one).
    pub fn fail(&self, op: &'static str, nth: u32) {
        lock(&self.faults).insert(op, nth);
    }

    /// How many times `op` was really called.
    pub fn calls(&self, op: &'static str) -> u64 {
        lock(&self.calls).get(op).copied().unwrap_or(0)
    }
}

/// One storage (device or host) of one stream.
pub struct Storage {
    mem: Arc<Mutex<Memory>>,
    world: Arc<World>,
}

impl ComputeStorage for Storage {
    type Resource = Res;

    fn alloc(&mut self, size: u64) -> Result<StorageId, ServerError> {
        self.world.call("alloc")?;
        self.world.invalidate("an allocation");
        let mut mem = lock(&self.mem);
        let id = mem.next;
        mem.next += 1;
        mem.pages.insert(id, vec![0xAA; size as usize]);
        Ok(StorageId(id))
    }

    fn dealloc(&mut self, id: StorageId) {
        self.world.invalidate("a free");
        lock(&self.mem).pages.remove(&id.0);
    }

    fn resource(&mut self, id: StorageId, bytes: ByteRange) -> Res {
        Res {
            page: id.0,
            range: bytes,
        }
    }

    fn slice_released(&mut self, id: StorageId, bytes: ByteRange) {
        if let Some(page) = lock(&self.mem).pages.get_mut(&id.0) {
            page[bytes.start() as usize..bytes.end() as usize].fill(0xDE);
        }
    }
}

/// A kernel: a Rust function over copies of its buffers (in argument order) and its info
/// words. Written buffers are copied back after it runs.
pub type KernelFn = fn(&mut [Vec<u8>], &[u64]);

/// A kernel before loading.
#[derive(Clone, Copy)]
pub struct TestKernel {
    pub name: &'static str,
    pub f: KernelFn,
}

const MAX_ARGS: usize = 4;

#[derive(Clone)]
enum Op {
    Copy {
        from: Res,
        to: Res,
    },
    Kernel {
        f: KernelFn,
        args: [Option<(Res, Access)>; MAX_ARGS],
        info: Option<Res>,
    },
    Replay {
        ops: Arc<Vec<Op>>,
        times: u32,
        /// Set when the executable is destroyed; a replay still queued then fails.
        destroyed: Arc<AtomicBool>,
    },
}

/// One stream's queue of work not yet run.
pub struct Queue {
    state: Mutex<QueueState>,
    dev: Arc<Mutex<Memory>>,
    host: Arc<Mutex<Memory>>,
    world: Arc<World>,
}

struct QueueState {
    ops: VecDeque<(u64, Op)>,
    next: u64,
    recording: Option<Vec<Op>>,
    /// Length of the last recording, so the next one is sized in one allocation.
    last_recording: usize,
    error: Option<ServerError>,
    scratch: Vec<Vec<u8>>,
    words: Vec<u64>,
}

impl Queue {
    fn enqueue(&self, op: Op) {
        let mut q = lock(&self.state);
        if let Some(rec) = &mut q.recording {
            rec.push(op);
            return;
        }
        let seq = q.next;
        q.next += 1;
        q.ops.push_back((seq, op));
    }

    fn mark(&self) -> u64 {
        lock(&self.state).next
    }

    /// Runs everything enqueued before `upto`; reports (once) an asynchronous error.
    fn run_until(&self, upto: u64) -> Result<(), ServerError> {
        let mut q = lock(&self.state);
        while q.ops.front().is_some_and(|(seq, _)| *seq < upto) {
            let (_, op) = q.ops.pop_front().expect("checked");
            if let Err(e) = self.world.call("execute") {
                q.error.get_or_insert(e);
                continue;
            }
            let QueueState {
                scratch,
                words,
                error,
                ..
            } = &mut *q;
            if let Err(e) = self.execute(&op, scratch, words) {
                error.get_or_insert(e);
            }
        }
        match q.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn run_all(&self) -> Result<(), ServerError> {
        let upto = self.mark();
        self.run_until(upto)
    }

    fn execute(
        &self,
        op: &Op,
        scratch: &mut Vec<Vec<u8>>,
        words: &mut Vec<u64>,
    ) -> Result<(), ServerError> {
        match op {
            Op::Copy { from, to } => {
                let host = lock(&self.host);
                let mut dev = lock(&self.dev);
                let src =
                    &host.pages[&from.page][from.range.start() as usize..from.range.end() as usize];
                dev.pages.get_mut(&to.page).expect("live page")
                    [to.range.start() as usize..to.range.end() as usize]
                    .copy_from_slice(src);
            }
            Op::Kernel { f, args, info } => {
                let mut dev = lock(&self.dev);
                let n = args.iter().flatten().count();
                while scratch.len() < n {
                    scratch.push(Vec::new());
                }
                for (i, (res, _)) in args.iter().flatten().enumerate() {
                    let page = &dev.pages[&res.page];
                    scratch[i].clear();
                    scratch[i].extend_from_slice(
                        &page[res.range.start() as usize..res.range.end() as usize],
                    );
                }
                words.clear();
                if let Some(info) = info {
                    let page = &dev.pages[&info.page];
                    let bytes = &page[info.range.start() as usize..info.range.end() as usize];
                    words.extend(
                        bytes
                            .chunks_exact(8)
                            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))),
                    );
                }
                f(&mut scratch[..n], words);
                for (i, (res, access)) in args.iter().flatten().enumerate() {
                    if access.writes() {
                        dev.pages.get_mut(&res.page).expect("live page")
                            [res.range.start() as usize..res.range.end() as usize]
                            .copy_from_slice(&scratch[i]);
                    }
                }
            }
            Op::Replay {
                ops,
                times,
                destroyed,
            } => {
                if destroyed.load(Ordering::SeqCst) {
                    return Err(ServerError::driver(
                        "replay",
                        std::io::Error::other("the executable was destroyed mid-replay"),
                    ));
                }
                for _ in 0..*times {
                    for op in ops.iter() {
                        self.execute(op, scratch, words)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// A point on a stream's queue.
pub struct TestFence {
    queue: &'static Queue,
    upto: u64,
}

impl Fence for TestFence {
    fn wait(self) -> Result<(), ServerError> {
        if lock(&self.queue.state).recording.is_some() {
            self.queue
                .world
                .invalidate("a host wait on a recording stream");
        }
        self.queue.world.call("fence_wait")?;
        self.queue.run_until(self.upto)
    }
}

/// A test stream.
pub struct TestStream {
    index: usize,
    device: MemoryManagement<Storage>,
    host: MemoryManagement<Storage>,
    drops: PendingDropQueue<TestFence>,
    capture: StreamCapture,
    cache: MetadataInfoCache<ManagedMemoryHandle>,
    queue: &'static Queue,
    world: Arc<World>,
    began_on: Option<ThreadId>,
}

impl TestStream {
    /// Runs everything queued (what `step` would do on the mock).
    pub fn run_all(&self) -> Result<(), ServerError> {
        self.queue.run_all()
    }
}

impl DeviceStream for TestStream {
    type Fence = TestFence;
    type DeviceStorage = Storage;
    type HostStorage = Storage;
    type Signal = &'static Queue;

    fn device_memory(&mut self) -> &mut MemoryManagement<Storage> {
        &mut self.device
    }
    fn host_memory(&mut self) -> &mut MemoryManagement<Storage> {
        &mut self.host
    }
    fn drop_queue(&mut self) -> &mut PendingDropQueue<TestFence> {
        &mut self.drops
    }
    fn capturing(&mut self) -> &mut StreamCapture {
        &mut self.capture
    }
    fn info_cache(&mut self) -> &mut MetadataInfoCache<ManagedMemoryHandle> {
        &mut self.cache
    }
    fn signal(&self) -> &'static Queue {
        self.queue
    }
    fn fence(signal: &'static Queue) -> TestFence {
        if lock(&signal.state).recording.is_some() {
            // Recording an event on a capturing stream would put it in the graph.
            signal
                .world
                .invalidate("a fence recorded on a recording stream");
        }
        TestFence {
            queue: signal,
            upto: signal.mark(),
        }
    }
}

/// The test backend: `AFFINE` makes its streams thread-affine. Device memory (and pinned
/// host memory) is one per backend, shared by its streams, as on a GPU.
#[derive(Default)]
pub struct TestBackend<const AFFINE: bool = false> {
    pub world: Arc<World>,
    dev: Arc<Mutex<Memory>>,
    host: Arc<Mutex<Memory>>,
}

/// The instantiated recording. Dropping it destroys it: a replay of it still queued
/// then fails, as on a GPU.
pub struct TestExecutable {
    ops: Arc<Vec<Op>>,
    destroyed: Arc<AtomicBool>,
}

impl Drop for TestExecutable {
    fn drop(&mut self) {
        self.destroyed.store(true, Ordering::SeqCst);
    }
}

impl<const AFFINE: bool> GraphDriver for TestBackend<AFFINE> {
    type Stream = TestStream;
    type Executable = TestExecutable;

    fn begin(stream: &mut TestStream) -> Result<(), ServerError> {
        stream.world.call("begin")?;
        let mut q = lock(&stream.queue.state);
        q.recording = Some(Vec::with_capacity(q.last_recording.max(16)));
        drop(q);
        lock(&stream.world.recording).insert(stream.index, None);
        stream.began_on = Some(std::thread::current().id());
        Ok(())
    }

    fn instantiate(
        stream: &mut TestStream,
        doomed: Option<ServerError>,
    ) -> Result<TestExecutable, ServerError> {
        // Always close the driver capture first.
        let ops = {
            let mut q = lock(&stream.queue.state);
            let ops = q.recording.take();
            q.last_recording = ops.as_ref().map_or(0, Vec::len);
            ops
        };
        let invalid = lock(&stream.world.recording)
            .remove(&stream.index)
            .flatten();
        let began_on = stream.began_on.take();
        let Some(ops) = ops else {
            return Err(ServerError::graph_state(
                "instantiate",
                "the driver was not capturing",
            ));
        };
        if AFFINE && began_on != Some(std::thread::current().id()) {
            return Err(ServerError::driver(
                "end capture",
                std::io::Error::other("capture ended on a thread other than the one that began it"),
            ));
        }
        if let Some(doomed) = doomed {
            return Err(doomed);
        }
        if let Some(reason) = invalid {
            return Err(ServerError::driver(
                "instantiate",
                std::io::Error::other(format!("capture invalidated: {reason}")),
            ));
        }
        stream.world.call("instantiate")?;
        Ok(TestExecutable {
            ops: Arc::new(ops),
            destroyed: Arc::new(AtomicBool::new(false)),
        })
    }

    fn upload(stream: &mut TestStream, _executable: &TestExecutable) -> Result<(), ServerError> {
        stream.world.call("upload")
    }

    fn replay(
        stream: &mut TestStream,
        executable: &TestExecutable,
        times: u32,
    ) -> Result<(), ServerError> {
        stream.world.call("replay")?;
        stream.queue.enqueue(Op::Replay {
            ops: Arc::clone(&executable.ops),
            times,
            destroyed: Arc::clone(&executable.destroyed),
        });
        Ok(())
    }

    fn allocation_breaks_capture() -> bool {
        true
    }

    fn thread_affine() -> bool {
        AFFINE
    }
}

impl<const AFFINE: bool> Backend for TestBackend<AFFINE> {
    type KernelSource = TestKernel;
    type Kernel = TestKernel;

    fn create_stream(&self, setup: &StreamSetup) -> Result<TestStream, ServerError> {
        let dev = Arc::clone(&self.dev);
        let host = Arc::clone(&self.host);
        let queue: &'static Queue = Box::leak(Box::new(Queue {
            state: Mutex::new(QueueState {
                ops: VecDeque::new(),
                next: 0,
                recording: None,
                last_recording: 0,
                error: None,
                scratch: Vec::new(),
                words: Vec::new(),
            }),
            dev: Arc::clone(&dev),
            host: Arc::clone(&host),
            world: Arc::clone(&self.world),
        }));
        Ok(TestStream {
            index: setup.index(),
            device: setup.device_memory(Storage {
                mem: dev,
                world: Arc::clone(&self.world),
            }),
            host: setup.host_memory(Storage {
                mem: host,
                world: Arc::clone(&self.world),
            }),
            drops: setup.drop_queue(),
            capture: setup.capture(),
            cache: setup.info_cache(),
            queue,
            world: Arc::clone(&self.world),
            began_on: None,
        })
    }

    fn kernel_name(source: &TestKernel) -> Cow<'static, str> {
        Cow::Borrowed(source.name)
    }

    fn load(stream: &mut TestStream, source: &TestKernel) -> Result<TestKernel, ServerError> {
        stream.world.call("load")?;
        stream.world.invalidate("a module load");
        Ok(*source)
    }

    fn launch(
        stream: &mut TestStream,
        kernel: &TestKernel,
        _grid: Grid,
        buffers: &[LaunchBuffer<Res>],
        info: Option<&Res>,
    ) -> Result<(), ServerError> {
        stream.world.call("launch")?;
        if buffers.len() > MAX_ARGS {
            return Err(ServerError::invalid(
                "argument count",
                buffers.len(),
                "the test driver takes at most 4 buffers",
            ));
        }
        let mut args = [None; MAX_ARGS];
        for (slot, b) in args.iter_mut().zip(buffers) {
            *slot = Some((b.resource, b.access));
        }
        stream.queue.enqueue(Op::Kernel {
            f: kernel.f,
            args,
            info: info.copied(),
        });
        Ok(())
    }

    fn write(
        stream: &mut TestStream,
        staging: &Res,
        destination: &Res,
        bytes: &[u8],
    ) -> Result<(), ServerError> {
        stream.world.call("write")?;
        lock(&stream.queue.host)
            .pages
            .get_mut(&staging.page)
            .expect("live page")[staging.range.start() as usize..staging.range.end() as usize]
            .copy_from_slice(bytes);
        stream.queue.enqueue(Op::Copy {
            from: *staging,
            to: *destination,
        });
        Ok(())
    }

    fn read(stream: &mut TestStream, source: &Res, out: &mut [u8]) -> Result<(), ServerError> {
        if lock(&stream.queue.state).recording.is_some() {
            stream.world.invalidate("a host read of a recording stream");
        }
        stream.queue.run_all()?;
        stream.world.call("read")?;
        let dev = lock(&stream.queue.dev);
        out.copy_from_slice(
            &dev.pages[&source.page][source.range.start() as usize..source.range.end() as usize],
        );
        Ok(())
    }

    fn sync(stream: &mut TestStream) -> Result<(), ServerError> {
        if lock(&stream.queue.state).recording.is_some() {
            stream.world.invalidate("a sync of a recording stream");
        }
        stream.world.call("sync")?;
        stream.queue.run_all()
    }
}

fn u32s(bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
}

/// `out = in + 1`, elementwise u32. Arguments: in, out.
pub const ADD_ONE: TestKernel = TestKernel {
    name: "add_one",
    f: |b, _| {
        let (a, rest) = b.split_at_mut(1);
        for (o, i) in rest[0].chunks_exact_mut(4).zip(a[0].chunks_exact(4)) {
            let x = u32::from_le_bytes(i.try_into().expect("4 bytes"));
            o.copy_from_slice(&x.wrapping_add(1).to_le_bytes());
        }
    },
};

/// `buf += info[0]` in place, elementwise u32. Arguments: buf (read-write).
pub const ADD_SCALAR: TestKernel = TestKernel {
    name: "add_scalar",
    f: |b, info| {
        let k = info.first().copied().unwrap_or(0) as u32;
        for c in b[0].chunks_exact_mut(4) {
            let x = u32::from_le_bytes(c.try_into().expect("4 bytes"));
            c.copy_from_slice(&x.wrapping_add(k).to_le_bytes());
        }
    },
};

/// `out = a + b`, elementwise u32. Arguments: a, b, out.
pub const ADD: TestKernel = TestKernel {
    name: "add",
    f: |b, _| {
        let (ab, out) = b.split_at_mut(2);
        for ((o, x), y) in out[0]
            .chunks_exact_mut(4)
            .zip(ab[0].chunks_exact(4))
            .zip(ab[1].chunks_exact(4))
        {
            let x = u32::from_le_bytes(x.try_into().expect("4 bytes"));
            let y = u32::from_le_bytes(y.try_into().expect("4 bytes"));
            o.copy_from_slice(&x.wrapping_add(y).to_le_bytes());
        }
    },
};

/// Little-endian bytes of `values`.
pub fn bytes_of(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The u32 values of `bytes`.
pub fn values_of(bytes: &[u8]) -> Vec<u32> {
    u32s(bytes).collect()
}
