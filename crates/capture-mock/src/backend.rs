//! `MockBackend` and `MockStream`: the core's backend traits over the mock's queues and
//! host-memory pages, with capture legality modelled on CUDA's relaxed mode (the mode the
//! CUDA backend captures in) on one driver context per backend value; `AffineMock`, the
//! same with thread-affine streams (a capture ends on the thread that began it).

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use capture_core::backend::{
    Backend, Builtins, CaptureDomain, DeviceStream, Dims, GraphDriver, KernelSignature, Lane,
    LaunchBuffer, LaunchLimits, LaunchParam, StreamSetup, StreamState,
};
use capture_core::{
    Access, Builtin, DeviceLoops, GraphUpdates, MAX_ALLOCATION_BYTES, MemoryKind,
    ProgrammaticLaunch, ServerError,
};

use crate::MockError;
use crate::context::Context;
use crate::kernels::{MOCK_MAX_BUFFERS, MockKernel, MockWork};
use crate::lock::lock;
use crate::queue::{self, MockFence, Op, Queue, Recording};
use crate::storage::{MockMemory, MockResource, MockStorage, Pages};

#[derive(Debug)]
struct Shared {
    dev: Arc<Mutex<Pages>>,
    host: Arc<Mutex<Pages>>,
    /// The pooled streams of the device most recently built on this backend.
    queues: Mutex<Vec<Arc<Queue>>>,
    memory_node: AtomicBool,
    context: Arc<Context>,
    domain: CaptureDomain,
    /// What its devices declare of loop replays (rule 30).
    loops: DeviceLoops,
}

impl Default for Shared {
    fn default() -> Self {
        Self {
            dev: Arc::default(),
            host: Arc::default(),
            queues: Mutex::default(),
            memory_node: AtomicBool::new(false),
            context: Context::new(),
            domain: CaptureDomain::new(),
            loops: DeviceLoops::ANY_BODY,
        }
    }
}

/// The mock as the CUDA backend drives CUDA: relaxed-mode capture, driver calls from
/// any thread.
pub type MockBackend = Mock<false>;

/// The mock with thread-affine streams: a capture must end on the thread that began it
/// (as CUDA's global and thread-local modes require), so the core opens and closes each
/// stream's captures on a worker thread of its own; every other call stays on the
/// caller's thread.
pub type AffineMock = Mock<true>;

/// The mock device: host memory with real bytes behind the core's backend traits.
///
/// Nothing runs at enqueue; queued work runs at a fence wait, a sync or a read, or at
/// [`step`](Self::step). Cloning gives another handle on the same device.
///
/// One backend value (and its clones) is one driver context: every device built on it
/// shares its capture rules (modelled on CUDA's relaxed mode, see the crate docs) and
/// its [`CaptureDomain`]; two values are two contexts that cannot touch each other's
/// captures. Devices may be built on one value one after another or side by side;
/// [`step`](Self::step) and [`pending`](Self::pending) name the pooled streams of the
/// one built last.
///
/// [`MockBackend`] calls the driver from any thread; [`AffineMock`] (`AFFINE`) makes a
/// capture end on the thread that began it, so the core opens and closes its
/// streams' captures on worker threads.
#[derive(Clone, Debug, Default)]
pub struct Mock<const AFFINE: bool> {
    shared: Arc<Shared>,
}

impl<const AFFINE: bool> Mock<AFFINE> {
    /// A new mock device on a driver context of its own.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new mock device whose devices declare `loops` (rule 30) instead of loops with
    /// any body: a device that cannot put copies or work in a loop body (as Vulkan's
    /// emulation cannot), or that runs no loop, for tests of what the core refuses.
    pub fn with_loops(loops: DeviceLoops) -> Self {
        Self {
            shared: Arc::new(Shared {
                loops,
                ..Shared::default()
            }),
        }
    }

    /// Runs up to `n` queued operations of pooled stream `stream`; returns how many ran.
    /// Zero for a stream that does not exist.
    pub fn step(&self, stream: usize, n: usize) -> usize {
        let queue = lock(&self.shared.queues).get(stream).cloned();
        queue.map_or(0, |q| q.step(n))
    }

    /// How many operations wait to run on pooled stream `stream`.
    pub fn pending(&self, stream: usize) -> usize {
        let queue = lock(&self.shared.queues).get(stream).cloned();
        queue.map_or(0, |q| q.pending())
    }

    /// A storage over this backend's device or host pages, on its driver context: what
    /// a test of the driver below the core allocates and frees through.
    pub fn storage(&self, kind: MemoryKind) -> MockStorage {
        let pages = match kind {
            MemoryKind::Device => &self.shared.dev,
            MemoryKind::Host => &self.shared.host,
        };
        MockStorage::over(pages, &self.shared.context)
    }

    /// How many pages of `kind` the driver holds right now, over every device built on
    /// this backend: the ground truth the core's [`DeviceReport::pages`] is checked
    /// against.
    ///
    /// [`DeviceReport::pages`]: capture_core::DeviceReport::pages
    pub fn live_pages(&self, kind: MemoryKind) -> usize {
        let pages = match kind {
            MemoryKind::Device => &self.shared.dev,
            MemoryKind::Host => &self.shared.host,
        };
        lock(pages).device_pages()
    }

    /// `size` bytes of device memory of the caller's own on this backend's context, as an
    /// engine allocates its weights or KV cache with the driver itself: what
    /// [`Device::import`](capture_core::Device::import) takes (through
    /// [`MockMemory::external`]). Every byte starts [`FRESH`](crate::FRESH).
    pub fn external_memory(&self, size: u64) -> MockMemory {
        MockMemory::new(&self.shared.dev, size)
    }

    /// Named fault: the next graph instantiated holds a memory allocation node, as CUDA
    /// records one when a stream-ordered allocation happens inside a capture. Its first
    /// replay works; every later one is refused as CUDA refuses it.
    pub fn arm_memory_node_fault(&self) {
        self.shared.memory_node.store(true, Ordering::SeqCst);
    }
}

/// A mock stream: the core's per-stream state beside the mock queue.
pub struct MockStream {
    state: StreamState<MockStorage, MockStorage>,
    queue: Arc<Queue>,
    signal: usize,
    began_on: Option<ThreadId>,
    last_recording: usize,
    shared: Arc<Shared>,
    /// The lane the recording's last operation went to (rule 28).
    lane: Lane,
}

impl MockStream {
    /// Enqueues `op` on `lane` (the core's argument), first marking a change of lane
    /// while the stream records.
    fn push(&mut self, lane: Lane, op: Op) {
        if lane != self.lane && self.queue.is_recording() {
            self.queue.push(Op::Lane(lane.index() as u32));
            self.lane = lane;
        }
        self.queue.push(op);
    }
}

impl std::fmt::Debug for MockStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockStream")
            .field("key", &self.queue.key)
            .field("pending", &self.queue.pending())
            .finish()
    }
}

impl DeviceStream for MockStream {
    type Fence = MockFence;
    type DeviceStorage = MockStorage;
    type HostStorage = MockStorage;
    type Signal = usize;

    fn state(&mut self) -> &mut StreamState<MockStorage, MockStorage> {
        &mut self.state
    }
    fn signal(&self) -> usize {
        self.signal
    }
    fn fence(signal: usize) -> MockFence {
        MockFence::on(signal)
    }
}

/// A mock graph executable. Dropping it destroys it: a replay of it still queued fails.
#[derive(Debug)]
pub struct MockExecutable {
    graph: Arc<Recording>,
    memory_node: bool,
    launches: AtomicU32,
}

impl Drop for MockExecutable {
    fn drop(&mut self) {
        self.graph.destroyed.store(true, Ordering::SeqCst);
    }
}

fn mock_error(op: &'static str, what: impl Into<String>) -> ServerError {
    ServerError::driver(op, MockError::new(what))
}

impl<const AFFINE: bool> GraphDriver for Mock<AFFINE> {
    type Stream = MockStream;
    type Executable = MockExecutable;

    fn begin(stream: &mut MockStream) -> Result<(), ServerError> {
        stream.queue.start_recording(stream.last_recording.max(16));
        stream.lane = Lane::ORIGIN;
        stream.queue.context.start_recording(stream.queue.key);
        stream.began_on = Some(std::thread::current().id());
        Ok(())
    }

    fn instantiate(
        stream: &mut MockStream,
        doomed: Option<ServerError>,
    ) -> Result<MockExecutable, ServerError> {
        // The driver capture is closed first, whatever happens next.
        let ops = stream.queue.stop_recording();
        let invalidated = stream.queue.context.stop_recording(stream.queue.key);
        let began_on = stream.began_on.take();
        let Some(ops) = ops else {
            return Err(mock_error("end capture", "the stream was not capturing"));
        };
        stream.last_recording = ops.len();
        if AFFINE && began_on != Some(std::thread::current().id()) {
            return Err(mock_error(
                "end capture",
                "a thread-affine capture must end on the thread that began it",
            ));
        }
        if let Some(doomed) = doomed {
            return Err(doomed);
        }
        if let Some(reason) = invalidated {
            return Err(mock_error(
                "end capture",
                format!("capture invalidated (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED): {reason}"),
            ));
        }
        let graph = queue::compile(ops).map_err(|why| mock_error("end capture", why))?;
        Ok(MockExecutable {
            graph: Arc::new(graph),
            memory_node: stream.shared.memory_node.swap(false, Ordering::SeqCst),
            launches: AtomicU32::new(0),
        })
    }

    fn upload(_stream: &mut MockStream, _executable: &MockExecutable) -> Result<(), ServerError> {
        Ok(())
    }

    fn replay(
        stream: &mut MockStream,
        executable: &MockExecutable,
        times: u32,
    ) -> Result<(), ServerError> {
        let earlier = executable.launches.fetch_add(times, Ordering::SeqCst);
        if executable.memory_node && earlier + times > 1 {
            return Err(mock_error(
                "graph launch",
                "CUDA_ERROR_INVALID_VALUE: the graph holds a memory allocation node and was already launched",
            ));
        }
        stream.queue.push(Op::Replay {
            graph: Arc::clone(&executable.graph),
            times,
        });
        Ok(())
    }

    /// The loop as rule 30 says it: the flag and counter zeroed, then each iteration the
    /// whole graph, the counter set after it, and none after one that set the flag.
    fn replay_loop(
        stream: &mut MockStream,
        executable: &MockExecutable,
        max: u32,
        flag: &MockResource,
        counter: &MockResource,
    ) -> Result<(), ServerError> {
        let earlier = executable.launches.fetch_add(1, Ordering::SeqCst);
        if executable.memory_node && earlier + max > 1 {
            return Err(mock_error(
                "graph launch",
                "CUDA_ERROR_INVALID_VALUE: the graph holds a memory allocation node and was already launched",
            ));
        }
        stream.queue.push(Op::Loop {
            graph: Arc::clone(&executable.graph),
            max,
            flag: *flag,
            counter: *counter,
        });
        Ok(())
    }

    /// Relaxed mode: an allocation elsewhere leaves a recording valid.
    fn allocation_breaks_capture() -> bool {
        false
    }

    /// A module load invalidates every recording of the context.
    fn load_breaks_capture() -> bool {
        true
    }

    fn thread_affine() -> bool {
        AFFINE
    }
}

impl<const AFFINE: bool> Backend for Mock<AFFINE> {
    type KernelSource = MockKernel;
    type Kernel = MockKernel;
    type Work = MockWork;
    // The recording holds each work and runs it on every replay.
    const EXECUTABLE_HOLDS_WORK: bool = true;

    fn create_stream(&self, setup: &StreamSetup) -> Result<MockStream, ServerError> {
        let queue = Arc::new(Queue::new(
            Arc::clone(&self.shared.dev),
            Arc::clone(&self.shared.host),
            Arc::clone(&self.shared.context),
        ));
        let signal = queue::register(&queue);
        {
            let mut queues = lock(&self.shared.queues);
            if setup.index() == 0 {
                // A new device on this backend: `step` and `pending` name its streams.
                queues.clear();
            }
            if queues.len() != setup.index() {
                return Err(mock_error(
                    "create stream",
                    "streams must be created in order",
                ));
            }
            queues.push(Arc::clone(&queue));
        }
        Ok(MockStream {
            state: setup.state(
                MockStorage::over(&self.shared.dev, &self.shared.context),
                MockStorage::over(&self.shared.host, &self.shared.context),
            ),
            queue,
            signal,
            began_on: None,
            last_recording: 0,
            shared: Arc::clone(&self.shared),
            lane: Lane::ORIGIN,
        })
    }

    fn kernel_name(source: &MockKernel) -> Cow<'static, str> {
        Cow::Borrowed(source.name)
    }

    fn signature(source: &MockKernel) -> KernelSignature {
        source.signature
    }

    fn launch_limits(&self) -> LaunchLimits {
        mock_launch_limits().with_loops(self.shared.loops)
    }

    fn capture_domain(&self) -> CaptureDomain {
        self.shared.domain.clone()
    }

    fn load(stream: &mut MockStream, source: &MockKernel) -> Result<MockKernel, ServerError> {
        stream.queue.context.conflicts_with_all("a module load");
        Ok(*source)
    }

    fn launch(
        stream: &mut MockStream,
        lane: Lane,
        kernel: &MockKernel,
        dims: &Dims,
        params: &[LaunchParam<MockResource>],
        info: Option<&MockResource>,
    ) -> Result<(), ServerError> {
        let (args, scalars) = op_params(params);
        stream.push(
            lane,
            Op::Kernel {
                kernel: *kernel,
                args,
                info: info.copied(),
                scalars,
                grid: dims.grid_shape(),
            },
        );
        Ok(())
    }

    /// The parameters and the grid (which the kernel sees, [`launch_grid`]) change; a
    /// replay already queued keeps the recording it was enqueued with.
    ///
    /// [`launch_grid`]: crate::launch_grid
    fn update_launch(
        _stream: &mut MockStream,
        executable: &mut MockExecutable,
        node: u64,
        kernel: &MockKernel,
        dims: &Dims,
        params: &[LaunchParam<MockResource>],
        info: Option<&MockResource>,
    ) -> Result<(), ServerError> {
        let (args, scalars) = op_params(params);
        let args: Vec<(MockResource, Access)> = args.iter().flatten().copied().collect();
        // A replay still queued holds the recording: the update changes a copy.
        let graph = Arc::make_mut(&mut executable.graph);
        graph
            .update_kernel(
                node,
                *kernel,
                &args,
                info.copied(),
                &scalars,
                dims.grid_shape(),
            )
            .map_err(|why| mock_error("graph exec kernel node set params", why))
    }

    fn work_name(work: &MockWork) -> Cow<'static, str> {
        work.name()
    }

    fn run_work(
        stream: &mut MockStream,
        lane: Lane,
        work: &MockWork,
        buffers: &[LaunchBuffer<MockResource>],
    ) -> Result<(), ServerError> {
        let mut args = [None; MOCK_MAX_BUFFERS];
        for (slot, b) in args.iter_mut().zip(buffers) {
            *slot = Some((b.resource, b.access));
        }
        stream.push(
            lane,
            Op::Work {
                work: work.clone(),
                args,
            },
        );
        Ok(())
    }

    fn write(
        stream: &mut MockStream,
        lane: Lane,
        staging: &MockResource,
        destination: &MockResource,
        bytes: &[u8],
    ) -> Result<(), ServerError> {
        lock(&stream.queue.host)
            .slice_mut(staging.page, staging.bytes)
            .copy_from_slice(bytes);
        stream.push(
            lane,
            Op::Copy {
                from: *staging,
                to: *destination,
            },
        );
        Ok(())
    }

    /// Nothing to order at the fork: a lane's operations are its own queue, which the
    /// graph runs after what its parent recorded so far.
    fn fork_lane(stream: &mut MockStream, from: Lane, to: Lane) -> Result<(), ServerError> {
        stream.push(from, Op::Lane(to.index() as u32));
        stream.lane = to;
        Ok(())
    }

    fn join_lane(stream: &mut MockStream, from: Lane, into: Lane) -> Result<(), ServerError> {
        stream.queue.push(Op::Join {
            from: from.index() as u32,
            into: into.index() as u32,
        });
        if stream.lane == from {
            stream.lane = into;
        }
        Ok(())
    }

    fn wait_for(stream: &mut MockStream, fence: &MockFence) -> Result<(), ServerError> {
        if stream.queue.is_recording() {
            return Err(mock_error(
                "stream wait event",
                "CUDA_ERROR_STREAM_CAPTURE_ISOLATION: a capture waited on an event recorded outside it",
            ));
        }
        if let Some(queue) = &fence.queue {
            // Judged by what the waited-on queue had reported when this wait was
            // enqueued: a failure reported before it is the core's to know (it claimed
            // what the failed work wrote), and later work waits on it safely.
            stream.queue.push(Op::Wait {
                queue: Arc::clone(queue),
                upto: fence.upto,
                reports: queue.reports(),
            });
        }
        Ok(())
    }

    fn read(
        stream: &mut MockStream,
        source: &MockResource,
        out: &mut [u8],
    ) -> Result<(), ServerError> {
        stream.queue.conflict("a host read of a capturing stream");
        stream.queue.run_all()?;
        out.copy_from_slice(lock(&stream.queue.dev).slice(source.page, source.bytes));
        Ok(())
    }

    fn sync(stream: &mut MockStream) -> Result<(), ServerError> {
        stream.queue.conflict("a sync of a capturing stream");
        stream.queue.run_all()
    }
}

impl<const AFFINE: bool> Builtins for Mock<AFFINE> {
    fn builtin(kernel: Builtin) -> MockKernel {
        crate::kernels::builtin(kernel)
    }
}

/// A launch's buffers inline and its scalars as the words after the info words.
#[allow(clippy::type_complexity)]
fn op_params(
    params: &[LaunchParam<MockResource>],
) -> ([Option<(MockResource, Access)>; MOCK_MAX_BUFFERS], Vec<u64>) {
    let mut args = [None; MOCK_MAX_BUFFERS];
    for (slot, b) in args
        .iter_mut()
        .zip(params.iter().filter_map(LaunchParam::buffer))
    {
        *slot = Some((b.resource, b.access));
    }
    let mut scalars = Vec::new();
    for p in params {
        if let LaunchParam::Scalar(v) = p {
            crate::kernels::scalar_words(&[v.bytes()], &mut scalars);
        }
    }
    (args, scalars)
}

/// What the mock binds and runs: CUDA's limits (the mode it models). Ranges bind at
/// multiples of 16 bytes (the widest vector load a CUDA kernel makes), grids run up to
/// `2^31 - 1` blocks in x and 65,535 in y and z, blocks up to 1,024 threads, 48 KiB of
/// dynamic shared memory (which its host functions do not see); its own: at most
/// [`MOCK_MAX_BUFFERS`] buffers and 256 bytes of scalars per launch, and no programmatic
/// dependent launch (refused, never run in order: code that counts on the overlap
/// learns on the mock that only CUDA has it). Its graphs change through their slots.
pub(crate) fn mock_launch_limits() -> LaunchLimits {
    LaunchLimits::new(16, MAX_ALLOCATION_BYTES, [i32::MAX as u32, 65_535, 65_535])
        .expect("the mock's limits are valid")
        .with_block([1024, 1024, 64], 1024)
        .with_shared(48 << 10)
        .with_params(256, 0, MOCK_MAX_BUFFERS)
        .with_programmatic(ProgrammaticLaunch::Unsupported(
            "the mock runs no programmatic dependent launch (CUDA on compute capability 9.0 \
             or later does)",
        ))
        .with_graph_updates(GraphUpdates::Supported)
        .with_loops(DeviceLoops::ANY_BODY)
}
