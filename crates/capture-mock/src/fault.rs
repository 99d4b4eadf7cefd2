//! `Faulty<B>`: a fault-injecting wrapper over any backend. It fails the Nth call of any
//! driver operation with a chosen error, deterministically, so fault scenarios run on
//! real drivers too.
//!
//! Every operation is counted whether or not it fails. The wrapper adds no rule: it only
//! refuses calls, and the core's answer to the refusal is what the scenarios check.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, Weak};

use capture_core::backend::{
    AllocGate, Backend, Builtins, DeviceResource, DeviceStream, Dims, Fence, GraphDriver,
    HostResource, KernelSignature, Lane, LaunchBuffer, LaunchLimits, LaunchParam, StreamSetup,
    StreamState,
};
use capture_core::{Builtin, ServerError};

use crate::MockError;
use crate::lock::lock;

/// A driver operation a fault can be injected into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultOp {
    /// Opening the driver capture.
    Begin,
    /// Instantiating a closed capture (after the driver capture is closed).
    Instantiate,
    /// Uploading an executable (its failure is only logged by the core).
    Upload,
    /// Enqueueing a replay.
    Replay,
    /// Submitting queued work and waiting for it (a read or a sync).
    Submit,
    /// Allocating a page (device or pinned host).
    Alloc,
    /// Enqueueing a host-to-device copy.
    Copy,
    /// Loading a kernel.
    Load,
    /// Enqueueing a kernel launch.
    Launch,
    /// Waiting on a fence: the wait itself is refused.
    FenceWait,
    /// Waiting on a fence (or for the stream, in a read or sync): the work completes,
    /// but an asynchronous error is reported.
    AsyncAtFence,
    /// Enqueueing a device-side wait of one stream for another's fence (CUDA's
    /// `cuStreamWaitEvent`, Vulkan's timeline wait): the wait is refused, so nothing
    /// after it may run on the waiting stream.
    WaitFor,
    /// Running (or recording) the user's own work: its call fails.
    Work,
    /// Updating a recorded launch of a graph's executable (a slot's update): the driver
    /// refuses it.
    Update,
    /// Forking or joining a lane of a recording (CUDA's event record and wait inside a
    /// capture): the driver refuses it, which dooms the window.
    Lane,
}

impl FaultOp {
    /// Every operation.
    pub const ALL: [FaultOp; 15] = [
        FaultOp::Begin,
        FaultOp::Instantiate,
        FaultOp::Upload,
        FaultOp::Replay,
        FaultOp::Submit,
        FaultOp::Alloc,
        FaultOp::Copy,
        FaultOp::Load,
        FaultOp::Launch,
        FaultOp::FenceWait,
        FaultOp::AsyncAtFence,
        FaultOp::WaitFor,
        FaultOp::Work,
        FaultOp::Update,
        FaultOp::Lane,
    ];

    /// The operation's name in errors.
    pub const fn name(self) -> &'static str {
        match self {
            FaultOp::Begin => "begin capture",
            FaultOp::Instantiate => "instantiate",
            FaultOp::Upload => "upload",
            FaultOp::Replay => "replay",
            FaultOp::Submit => "submit",
            FaultOp::Alloc => "alloc",
            FaultOp::Copy => "copy",
            FaultOp::Load => "load",
            FaultOp::Launch => "launch",
            FaultOp::FenceWait => "fence wait",
            FaultOp::AsyncAtFence => "asynchronous error at fence",
            FaultOp::WaitFor => "stream wait",
            FaultOp::Work => "foreign work",
            FaultOp::Update => "graph update",
            FaultOp::Lane => "fork or join",
        }
    }
}

impl fmt::Display for FaultOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Default)]
struct PlanState {
    armed: BTreeMap<FaultOp, (u32, ServerError)>,
    calls: BTreeMap<FaultOp, u64>,
}

/// Which calls fail, and how many of each were made.
#[derive(Debug, Default)]
pub struct FaultPlan {
    state: Mutex<PlanState>,
}

impl FaultPlan {
    /// A plan that fails nothing.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Fails the `nth` next call of `op` (1 = the very next) with `error`.
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] naming `nth` when it is zero.
    pub fn fail_with(&self, op: FaultOp, nth: u32, error: ServerError) -> Result<(), ServerError> {
        if nth == 0 {
            return Err(ServerError::invalid(
                "fault position",
                nth,
                "the next call is 1",
            ));
        }
        lock(&self.state).armed.insert(op, (nth, error));
        Ok(())
    }

    /// Fails the `nth` next call of `op` with a driver error saying the fault was
    /// injected.
    ///
    /// # Errors
    ///
    /// As [`fail_with`](Self::fail_with).
    pub fn fail(&self, op: FaultOp, nth: u32) -> Result<(), ServerError> {
        let error = ServerError::driver(
            op.name(),
            MockError::new(format!("injected fault in {}", op.name())),
        );
        self.fail_with(op, nth, error)
    }

    /// How many calls of `op` were made (failed ones included).
    pub fn calls(&self, op: FaultOp) -> u64 {
        lock(&self.state).calls.get(&op).copied().unwrap_or(0)
    }

    /// Whether a fault is still armed for `op`.
    pub fn is_armed(&self, op: FaultOp) -> bool {
        lock(&self.state).armed.contains_key(&op)
    }

    /// Counts a call of `op`, and fails it if it is the armed one.
    pub(crate) fn hit(&self, op: FaultOp) -> Result<(), ServerError> {
        let mut state = lock(&self.state);
        *state.calls.entry(op).or_default() += 1;
        let fire = match state.armed.get_mut(&op) {
            Some((n, _)) => {
                *n -= 1;
                *n == 0
            }
            None => false,
        };
        match fire {
            true => Err(state.armed.remove(&op).expect("checked above").1),
            false => Ok(()),
        }
    }
}

static PLANS: Mutex<Vec<Weak<FaultPlan>>> = Mutex::new(Vec::new());

fn register(plan: &Arc<FaultPlan>) -> usize {
    let mut plans = lock(&PLANS);
    match plans.iter().position(|p| p.strong_count() == 0) {
        Some(free) => {
            plans[free] = Arc::downgrade(plan);
            free
        }
        None => {
            plans.push(Arc::downgrade(plan));
            plans.len() - 1
        }
    }
}

fn plan(slot: usize) -> Option<Arc<FaultPlan>> {
    lock(&PLANS).get(slot).and_then(Weak::upgrade)
}

/// Backend `B` with faults injected by a [`FaultPlan`].
#[derive(Debug)]
pub struct Faulty<B> {
    inner: B,
    plan: Arc<FaultPlan>,
}

impl<B: Backend> Faulty<B> {
    /// `inner`, failing nothing until told to through [`plan`](Self::plan).
    pub fn new(inner: B) -> Self {
        Self::with_plan(inner, FaultPlan::new())
    }

    /// `inner`, failing what `plan` says.
    pub fn with_plan(inner: B, plan: Arc<FaultPlan>) -> Self {
        Self { inner, plan }
    }

    /// The plan: arm faults and read call counts through it.
    pub fn plan(&self) -> &Arc<FaultPlan> {
        &self.plan
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }
}

/// A wrapped backend's stream: the inner stream (whose state the core keeps using) and
/// the plan its calls and fences consult.
pub struct FaultyStream<S: DeviceStream> {
    inner: S,
    plan: Arc<FaultPlan>,
    slot: usize,
}

impl<S: DeviceStream> FaultyStream<S> {
    /// The wrapped stream.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: DeviceStream> fmt::Debug for FaultyStream<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyStream")
            .field("slot", &self.slot)
            .finish()
    }
}

/// A wrapped backend's fence: a wait may be refused, or report an asynchronous error
/// after the work completed.
#[derive(Debug)]
pub struct FaultyFence<F> {
    inner: F,
    plan: Option<Arc<FaultPlan>>,
}

impl<F: Fence> Fence for FaultyFence<F> {
    fn wait(self) -> Result<(), ServerError> {
        if let Some(plan) = &self.plan {
            plan.hit(FaultOp::FenceWait)?;
        }
        self.inner.wait()?;
        match &self.plan {
            Some(plan) => plan.hit(FaultOp::AsyncAtFence),
            None => Ok(()),
        }
    }
}

impl<S: DeviceStream> DeviceStream for FaultyStream<S>
where
    S::Fence: Send,
{
    type Fence = FaultyFence<S::Fence>;
    type DeviceStorage = S::DeviceStorage;
    type HostStorage = S::HostStorage;
    type Signal = (S::Signal, usize);

    fn state(&mut self) -> &mut StreamState<S::DeviceStorage, S::HostStorage> {
        self.inner.state()
    }
    fn signal(&self) -> Self::Signal {
        (self.inner.signal(), self.slot)
    }
    fn fence(signal: Self::Signal) -> Self::Fence {
        FaultyFence {
            inner: S::fence(signal.0),
            plan: plan(signal.1),
        }
    }
    fn read_staging_bytes(&self) -> u64 {
        self.inner.read_staging_bytes()
    }
}

impl<B: Backend> GraphDriver for Faulty<B> {
    type Stream = FaultyStream<B::Stream>;
    type Executable = B::Executable;

    fn begin(stream: &mut Self::Stream) -> Result<(), ServerError> {
        stream.plan.hit(FaultOp::Begin)?;
        B::begin(&mut stream.inner)
    }

    fn instantiate(
        stream: &mut Self::Stream,
        doomed: Option<ServerError>,
    ) -> Result<B::Executable, ServerError> {
        // The inner driver closes its capture first, whatever is injected.
        let executable = B::instantiate(&mut stream.inner, doomed)?;
        stream.plan.hit(FaultOp::Instantiate)?;
        Ok(executable)
    }

    fn upload(stream: &mut Self::Stream, executable: &B::Executable) -> Result<(), ServerError> {
        stream.plan.hit(FaultOp::Upload)?;
        B::upload(&mut stream.inner, executable)
    }

    fn replay(
        stream: &mut Self::Stream,
        executable: &B::Executable,
        times: u32,
    ) -> Result<(), ServerError> {
        stream.plan.hit(FaultOp::Replay)?;
        B::replay(&mut stream.inner, executable, times)
    }

    fn replay_loop(
        stream: &mut Self::Stream,
        executable: &B::Executable,
        max: u32,
        flag: &DeviceResource<Self::Stream>,
        counter: &DeviceResource<Self::Stream>,
    ) -> Result<(), ServerError> {
        stream.plan.hit(FaultOp::Replay)?;
        B::replay_loop(&mut stream.inner, executable, max, flag, counter)
    }

    fn allocation_breaks_capture() -> bool {
        B::allocation_breaks_capture()
    }

    fn load_breaks_capture() -> bool {
        B::load_breaks_capture()
    }

    fn thread_affine() -> bool {
        B::thread_affine()
    }
}

impl<B: Backend> Backend for Faulty<B> {
    type KernelSource = B::KernelSource;
    type Kernel = B::Kernel;
    type Work = B::Work;
    const EXECUTABLE_HOLDS_WORK: bool = B::EXECUTABLE_HOLDS_WORK;

    fn create_stream(&self, setup: &StreamSetup) -> Result<Self::Stream, ServerError> {
        let gate_plan = Arc::clone(&self.plan);
        let gate: AllocGate = Arc::new(move |_pool, _size| gate_plan.hit(FaultOp::Alloc));
        let inner = self.inner.create_stream(&setup.with_alloc_gate(gate))?;
        Ok(FaultyStream {
            inner,
            plan: Arc::clone(&self.plan),
            slot: register(&self.plan),
        })
    }

    fn kernel_name(source: &B::KernelSource) -> Cow<'static, str> {
        B::kernel_name(source)
    }

    fn signature(source: &B::KernelSource) -> KernelSignature {
        B::signature(source)
    }

    fn launch_limits(&self) -> LaunchLimits {
        self.inner.launch_limits()
    }

    fn capture_domain(&self) -> capture_core::backend::CaptureDomain {
        self.inner.capture_domain()
    }

    fn load(stream: &mut Self::Stream, source: &B::KernelSource) -> Result<B::Kernel, ServerError> {
        stream.plan.hit(FaultOp::Load)?;
        B::load(&mut stream.inner, source)
    }

    fn launch(
        stream: &mut Self::Stream,
        lane: Lane,
        kernel: &B::Kernel,
        dims: &Dims,
        params: &[LaunchParam<DeviceResource<Self::Stream>>],
        info: Option<&DeviceResource<Self::Stream>>,
    ) -> Result<(), ServerError> {
        stream.plan.hit(FaultOp::Launch)?;
        B::launch(&mut stream.inner, lane, kernel, dims, params, info)
    }

    fn launch_updatable(
        stream: &mut Self::Stream,
        lane: Lane,
        kernel: &B::Kernel,
        dims: &Dims,
        params: &[LaunchParam<DeviceResource<Self::Stream>>],
        info: Option<&DeviceResource<Self::Stream>>,
    ) -> Result<(), ServerError> {
        stream.plan.hit(FaultOp::Launch)?;
        B::launch_updatable(&mut stream.inner, lane, kernel, dims, params, info)
    }

    fn update_launch(
        stream: &mut Self::Stream,
        executable: &mut B::Executable,
        node: u64,
        kernel: &B::Kernel,
        dims: &Dims,
        params: &[LaunchParam<DeviceResource<Self::Stream>>],
        info: Option<&DeviceResource<Self::Stream>>,
    ) -> Result<(), ServerError> {
        stream.plan.hit(FaultOp::Update)?;
        B::update_launch(
            &mut stream.inner,
            executable,
            node,
            kernel,
            dims,
            params,
            info,
        )
    }

    fn work_name(work: &B::Work) -> Cow<'static, str> {
        B::work_name(work)
    }

    fn run_work(
        stream: &mut Self::Stream,
        lane: Lane,
        work: &B::Work,
        buffers: &[LaunchBuffer<DeviceResource<Self::Stream>>],
    ) -> Result<(), ServerError> {
        stream.plan.hit(FaultOp::Work)?;
        B::run_work(&mut stream.inner, lane, work, buffers)
    }

    fn write(
        stream: &mut Self::Stream,
        lane: Lane,
        staging: &HostResource<Self::Stream>,
        destination: &DeviceResource<Self::Stream>,
        bytes: &[u8],
    ) -> Result<(), ServerError> {
        stream.plan.hit(FaultOp::Copy)?;
        B::write(&mut stream.inner, lane, staging, destination, bytes)
    }

    fn fork_lane(stream: &mut Self::Stream, from: Lane, to: Lane) -> Result<(), ServerError> {
        stream.plan.hit(FaultOp::Lane)?;
        B::fork_lane(&mut stream.inner, from, to)
    }

    fn join_lane(stream: &mut Self::Stream, from: Lane, into: Lane) -> Result<(), ServerError> {
        stream.plan.hit(FaultOp::Lane)?;
        B::join_lane(&mut stream.inner, from, into)
    }

    fn wait_for(
        stream: &mut Self::Stream,
        fence: &<Self::Stream as DeviceStream>::Fence,
    ) -> Result<(), ServerError> {
        stream.plan.hit(FaultOp::WaitFor)?;
        B::wait_for(&mut stream.inner, &fence.inner)
    }

    fn read(
        stream: &mut Self::Stream,
        source: &DeviceResource<Self::Stream>,
        out: &mut [u8],
    ) -> Result<(), ServerError> {
        stream.plan.hit(FaultOp::Submit)?;
        B::read(&mut stream.inner, source, out)?;
        // A read waits for the stream: an asynchronous error surfaces here too.
        stream.plan.hit(FaultOp::AsyncAtFence)
    }

    fn sync(stream: &mut Self::Stream) -> Result<(), ServerError> {
        stream.plan.hit(FaultOp::Submit)?;
        B::sync(&mut stream.inner)?;
        stream.plan.hit(FaultOp::AsyncAtFence)
    }
}

impl<B: Builtins> Builtins for Faulty<B> {
    fn builtin(kernel: Builtin) -> B::KernelSource {
        B::builtin(kernel)
    }
}
