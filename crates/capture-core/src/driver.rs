//! What a backend supplies: the state its streams keep ([`DeviceStream`]), the graph
//! half of its driver ([`GraphDriver`]), and the eager half the runtime drives
//! ([`Backend`]).
//!
//! Every method is safe. The core guarantees the lifecycle facts each one documents
//! (which state the stream is in, which thread calls it), so a backend's unsafe code can
//! rely on them in its FFI module without re-checking.

use std::borrow::Cow;

use crate::capture::{CaptureDomain, Lane, StreamCapture};
use crate::drop_queue::Fence;
use crate::error::ServerError;
use crate::info_cache::MetadataInfoCache;
use crate::kernel::{Dims, KernelSignature, LaunchLimits, ScalarValue};
use crate::memory::{ComputeStorage, ManagedMemoryHandle, MemoryManagement};
use crate::stream_state::{StreamSetup, StreamState};

/// The resource a device storage hands out for a slice.
pub type DeviceResource<S> = <<S as DeviceStream>::DeviceStorage as ComputeStorage>::Resource;

/// Memory the caller owns, described for a device storage: what
/// [`Device::import`](crate::Device::import) takes.
pub type DeviceExternal<S> = <<S as DeviceStream>::DeviceStorage as ComputeStorage>::External;

/// The resource a host (staging) storage hands out for a slice.
pub type HostResource<S> = <<S as DeviceStream>::HostStorage as ComputeStorage>::Resource;

/// The state a backend's stream keeps beside its driver handle.
///
/// All of it moves in step with the work queued on that stream: the capture window that
/// forbids allocating, the per-launch info buffers a capture may not evict, and the
/// memory the stream's kernels see. A backend embeds one [`StreamState`] and hands it
/// out through [`state`](Self::state); the accessors below read it. The frees a fenced
/// flush releases are the core's own, beside the stream, since they wait on whatever
/// fence the stream (or a wrapper around it) records.
pub trait DeviceStream {
    /// The fence this backend records on a stream.
    type Fence: Fence + Send + 'static;
    /// The storage backing the memory this stream's kernels address.
    type DeviceStorage: ComputeStorage;
    /// The storage backing the host buffers that stage transfers to it.
    type HostStorage: ComputeStorage;
    /// A cheap, copyable identifier for this stream, so a fence can be recorded while
    /// the stream's own fields are borrowed.
    type Signal: Copy + Send + Sync + 'static;

    /// The core's state of this stream, built once with [`StreamSetup::state`].
    fn state(&mut self) -> &mut StreamState<Self::DeviceStorage, Self::HostStorage>;
    /// This stream's signal.
    fn signal(&self) -> Self::Signal;
    /// Record a fence on the stream `signal` names, signalled once everything already
    /// enqueued on it has run.
    ///
    /// The core calls it from any thread, for the caller's own stream or another one of
    /// the same device, and never while that stream records: whether it records is
    /// decided under the device's capture state, which a `begin` takes too.
    fn fence(signal: Self::Signal) -> Self::Fence;

    /// The memory this stream's kernels see.
    fn device_memory(&mut self) -> &mut MemoryManagement<Self::DeviceStorage> {
        &mut self.state().device_memory
    }
    /// The pinned host memory this stream stages transfers through.
    fn host_memory(&mut self) -> &mut MemoryManagement<Self::HostStorage> {
        &mut self.state().host_memory
    }
    /// Host bytes the backend keeps for this stream's reads, outside the core's pools: a
    /// read-back buffer every read of a device-only page reuses rather than allocating
    /// one per read. The memory report shows them per stream
    /// ([`StreamReport::read_staging_bytes`](crate::StreamReport::read_staging_bytes)).
    /// None by default.
    fn read_staging_bytes(&self) -> u64 {
        0
    }
    /// Where this stream sits in the graph-capture lifecycle.
    fn capturing(&mut self) -> &mut StreamCapture {
        &mut self.state().capture
    }
    /// The per-launch metadata buffers this stream reuses.
    fn info_cache(&mut self) -> &mut MetadataInfoCache<ManagedMemoryHandle> {
        &mut self.state().info_cache
    }
}

/// The graph half of a driver: open a driver capture, close it into an executable,
/// upload and replay it.
pub trait GraphDriver: Sized + Send + Sync + 'static {
    /// The backend's stream.
    type Stream: DeviceStream + Send + 'static;
    /// An instantiated graph. Dropping it frees the driver object; the core drops it
    /// only behind a fence that follows its last replay.
    type Executable: Send + 'static;

    /// Opens the driver capture on `stream`.
    ///
    /// The core calls it once per window, after moving the stream to `Capture` and
    /// draining its drop queue; for a thread-affine backend, on the stream's worker
    /// thread, which also makes the matching [`instantiate`](Self::instantiate).
    ///
    /// # Errors
    ///
    /// The driver's refusal; the core then unwinds the stream to no-capture.
    fn begin(stream: &mut Self::Stream) -> Result<(), ServerError>;

    /// Closes the driver capture on `stream` and instantiates what it recorded.
    ///
    /// The core calls it only on a stream it moved out of `Capture` itself, exactly once
    /// per successful `begin`, even when the window is `doomed` (then the backend closes
    /// the capture, discards what it recorded and returns `doomed` as the error).
    ///
    /// # Errors
    ///
    /// `doomed` when given; the driver's refusal to close or instantiate; an allocation
    /// node in the recording, as [`ServerError::AllocInWindow`].
    fn instantiate(
        stream: &mut Self::Stream,
        doomed: Option<ServerError>,
    ) -> Result<Self::Executable, ServerError>;

    /// Uploads `executable` ahead of its first replay. A failure is only logged by the
    /// core: the first replay uploads on demand.
    ///
    /// # Errors
    ///
    /// The driver's refusal.
    fn upload(stream: &mut Self::Stream, executable: &Self::Executable) -> Result<(), ServerError>;

    /// Enqueues `times` replays of `executable` on `stream`, in one submission where the
    /// driver allows it. The core never calls it while the stream records.
    ///
    /// # Errors
    ///
    /// The driver's refusal to enqueue; the core taints what the graph writes.
    fn replay(
        stream: &mut Self::Stream,
        executable: &Self::Executable,
        times: u32,
    ) -> Result<(), ServerError>;

    /// Enqueues a loop replay of `executable` on `stream` (rule 30), in one submission:
    /// the `u32` at `flag` and the one at `counter` set to 0, then the graph run whole up
    /// to `max` times, the counter set to the number of iterations run after each, and
    /// no iteration started after one that left the flag non-zero. The core calls it
    /// only where [`LaunchLimits::loops`](crate::backend::LaunchLimits::loops) says the
    /// device runs loops, for a graph whose window recorded a launch writing `flag`
    /// (named its stop flag), and never while the stream records. A fault in an
    /// iteration ends the loop; it is reported as any asynchronous error is.
    ///
    /// # Errors
    ///
    /// The driver's refusal to enqueue; the core claims what the graph writes. The
    /// default refuses: the backend runs no loop.
    fn replay_loop(
        stream: &mut Self::Stream,
        executable: &Self::Executable,
        max: u32,
        flag: &DeviceResource<Self::Stream>,
        counter: &DeviceResource<Self::Stream>,
    ) -> Result<(), ServerError> {
        let _ = (stream, executable, flag, counter);
        Err(ServerError::invalid(
            "loop replay",
            max,
            "this backend runs no loop replay",
        ))
    }

    /// Whether an allocation anywhere in the capture domain invalidates a recording
    /// capture (CUDA's global mode). When true, while any stream of the domain records,
    /// no stream's pool grows and no kernel is first loaded. Page releases are refused
    /// while any stream of the domain records, whatever this says.
    fn allocation_breaks_capture() -> bool;

    /// Whether a module load anywhere in the capture domain may invalidate a recording
    /// capture (CUDA in every mode: a load may synchronise the context). When true, no
    /// kernel is first loaded while any stream of the domain records. Defaults to
    /// [`allocation_breaks_capture`](Self::allocation_breaks_capture).
    fn load_breaks_capture() -> bool {
        Self::allocation_breaks_capture()
    }

    /// Whether a capture must end on the thread that began it (CUDA's global and
    /// thread-local modes). When true, the runtime gives each pooled stream a worker
    /// thread that makes its [`begin`](Self::begin) and [`instantiate`](Self::instantiate)
    /// calls and its teardown; every other call (launches, replays, copies, syncs) runs
    /// on the caller's thread, under the stream's lock, as for any backend.
    fn thread_affine() -> bool;
}

/// One buffer a launch is given, resolved for the driver.
#[derive(Debug, Clone)]
pub struct LaunchBuffer<R> {
    /// The bytes of the slice the launch may touch.
    pub resource: R,
    /// What the launch does to them.
    pub access: crate::memory::Access,
}

/// One parameter of a launch, resolved for the driver, in the kernel's order.
#[derive(Debug, Clone)]
pub enum LaunchParam<R> {
    /// A buffer parameter: the bytes of the range given, and the access.
    Buffer(LaunchBuffer<R>),
    /// A scalar passed by value.
    Scalar(ScalarValue),
}

impl<R> LaunchParam<R> {
    /// The buffer, for a buffer parameter.
    pub fn buffer(&self) -> Option<&LaunchBuffer<R>> {
        match self {
            LaunchParam::Buffer(b) => Some(b),
            LaunchParam::Scalar(_) => None,
        }
    }
}

/// The eager half of a driver, which the generic runtime drives: streams, kernels,
/// launches, copies and syncs.
///
/// **For users** it is the bound to write on code generic over backends, re-exported
/// at the crate root: a function `fn step<B: Backend>(dev: &Device<B>)` runs on the
/// mock, Vulkan and CUDA alike (add [`Builtins`](crate::Builtins) to use the builtin
/// kernels). Its methods are the backend author's: a user never calls them, and the
/// rest of what an author implements is in [`backend`](crate::backend).
pub trait Backend: GraphDriver {
    /// A kernel before it is loaded: what a user registers.
    type KernelSource: Send + Sync + 'static;
    /// A loaded kernel.
    type Kernel: Send + Sync + 'static;
    /// A piece of the user's own work (a library call, commands of its own) a launch
    /// slot runs, with what it references: see [`run_work`](Self::run_work). Where the
    /// backend cannot check what the work touches, making one is `unsafe`.
    type Work: Clone + Send + Sync + 'static;

    /// Whether a graph's executable itself holds each recorded [`Work`](Self::Work) for
    /// its life (the mock's recording runs it on every replay): the core then keeps no
    /// clone of its own for the graph. `false` (the default) where the work ran once at
    /// record time and the executable holds only what it enqueued (CUDA, Vulkan): the
    /// graph keeps a clone, with what it references, until its last replay's fence.
    const EXECUTABLE_HOLDS_WORK: bool = false;

    /// Creates pooled stream `setup.index()`, building its [`StreamState`] from `setup`.
    /// For a thread-affine backend the runtime calls it on the stream's worker thread.
    ///
    /// # Errors
    ///
    /// The driver's refusal.
    fn create_stream(&self, setup: &StreamSetup) -> Result<Self::Stream, ServerError>;

    /// The kernel's name, for traces and errors.
    fn kernel_name(source: &Self::KernelSource) -> Cow<'static, str>;

    /// What the kernel takes, as its source declares it. The core checks every launch
    /// against it before calling [`launch`](Self::launch).
    fn signature(source: &Self::KernelSource) -> KernelSignature;

    /// What this device can bind and run. The core asks once, when a device is built,
    /// and checks every launch against it.
    fn launch_limits(&self) -> LaunchLimits;

    /// The capture domain of this backend's driver context: every device built on the
    /// same context must get the same domain, so one device's page release or module
    /// load cannot break another's capture. The default, a domain of its own per device,
    /// suits a driver whose captures nothing outside the recording stream can break.
    fn capture_domain(&self) -> CaptureDomain {
        CaptureDomain::new()
    }

    /// Loads (compiles, creates the pipeline for) a kernel. A driver call that a capture
    /// may not see: the core never calls it while `stream` records.
    ///
    /// # Errors
    ///
    /// The driver's refusal (an unsupported binary, a compile error).
    fn load(
        stream: &mut Self::Stream,
        source: &Self::KernelSource,
    ) -> Result<Self::Kernel, ServerError>;

    /// Enqueues `kernel` over `params` (buffers and scalars, in the order the kernel
    /// declares them) and the info buffer holding its info words, if it has any, run as
    /// `dims` says (a block of the kernel's own where `dims` gives none). The core has
    /// checked the launch against the kernel's signature and the device's limits:
    /// `params` matches the declared parameters one for one (each buffer's access and
    /// each scalar's size), `info` is there exactly when the kernel takes info words,
    /// the grid, block and shared memory are within the limits and every binding starts
    /// aligned.
    ///
    /// `lane`, here and in [`run_work`](Self::run_work) and [`write`](Self::write): while
    /// `stream` records, the lane of the window the operation records on (rule 28:
    /// [`Lane::ORIGIN`] for the window's own stream, another for a branch it forked,
    /// ordered as [`fork_lane`](Self::fork_lane) and [`join_lane`](Self::join_lane)
    /// said); `Lane::ORIGIN` outside a window. A backend that runs branches beside each
    /// other records the operation on that lane's queue.
    ///
    /// # Errors
    ///
    /// The driver's refusal to enqueue.
    fn launch(
        stream: &mut Self::Stream,
        lane: Lane,
        kernel: &Self::Kernel,
        dims: &Dims,
        params: &[LaunchParam<DeviceResource<Self::Stream>>],
        info: Option<&DeviceResource<Self::Stream>>,
    ) -> Result<(), ServerError>;

    /// As [`launch`](Self::launch), for a launch recorded inside a window that names a
    /// slot (rule 26): its parameters may later be set again through
    /// [`update_launch`](Self::update_launch). A backend whose recorded commands are
    /// fixed once recorded (Vulkan's) records such a launch where it can record it again;
    /// the default is `launch`. Called only while `stream` records.
    ///
    /// # Errors
    ///
    /// As [`launch`](Self::launch).
    fn launch_updatable(
        stream: &mut Self::Stream,
        lane: Lane,
        kernel: &Self::Kernel,
        dims: &Dims,
        params: &[LaunchParam<DeviceResource<Self::Stream>>],
        info: Option<&DeviceResource<Self::Stream>>,
    ) -> Result<(), ServerError> {
        Self::launch(stream, lane, kernel, dims, params, info)
    }

    /// Sets again, whole, the parameters of recorded kernel launch `node` of
    /// `executable` (rule 26: a slot's update): `node` counts the window's recorded
    /// launches and work from 0, in the order [`launch`](Self::launch) and
    /// [`run_work`](Self::run_work) recorded them, and names a kernel launch. `kernel`
    /// is the one recorded there; `dims`, `params` and `info` are as `launch` takes them,
    /// checked the same way (the same signature, only slots' values changed, the grid
    /// within the device's limits). Replays enqueued before the call must run with the
    /// parameters they were enqueued with, replays enqueued after it with these (CUDA:
    /// `cuGraphExecKernelNodeSetParams`, which only later launches see). The core calls
    /// it only where [`LaunchLimits::graph_updates`] says the device updates graphs,
    /// under the graph's stream's lock, never while a replay of the graph is being
    /// enqueued.
    ///
    /// # Errors
    ///
    /// The driver's refusal; the core then sets the launches it already updated back
    /// and reports the update refused.
    fn update_launch(
        stream: &mut Self::Stream,
        executable: &mut Self::Executable,
        node: u64,
        kernel: &Self::Kernel,
        dims: &Dims,
        params: &[LaunchParam<DeviceResource<Self::Stream>>],
        info: Option<&DeviceResource<Self::Stream>>,
    ) -> Result<(), ServerError>;

    /// The name of a piece of the user's own work, for traces and errors.
    fn work_name(work: &Self::Work) -> Cow<'static, str>;

    /// Runs (or records, while `stream` records) the user's own `work` on `stream` over
    /// `buffers`, the ranges and accesses the user declared, in order: on CUDA the work
    /// is called with the raw stream and each range's device address; on Vulkan with the
    /// command buffer being recorded, the core's barriers around it; on the mock it runs
    /// when the queue reaches it, on every replay too. The core treats it as a launch
    /// (taint, order, pins, dooming) and keeps a clone of `work` for as long as the
    /// device (or a graph) may still run it.
    ///
    /// # Errors
    ///
    /// The work's own error, or the driver's refusal to enqueue around it.
    fn run_work(
        stream: &mut Self::Stream,
        lane: Lane,
        work: &Self::Work,
        buffers: &[LaunchBuffer<DeviceResource<Self::Stream>>],
    ) -> Result<(), ServerError>;

    /// Copies `bytes` into the staging slice `staging` now, and enqueues the copy from
    /// `staging` to `destination`. While the stream records the copy is recorded: every
    /// replay copies from `staging` again, which the core keeps for the graph's life.
    ///
    /// # Errors
    ///
    /// The driver's refusal.
    fn write(
        stream: &mut Self::Stream,
        lane: Lane,
        staging: &HostResource<Self::Stream>,
        destination: &DeviceResource<Self::Stream>,
        bytes: &[u8],
    ) -> Result<(), ServerError>;

    /// Waits for everything enqueued on `stream`, then copies `source` into `out`. The
    /// core never calls it while the stream records.
    ///
    /// # Errors
    ///
    /// An asynchronous error the wait reported, or the copy's failure.
    fn read(
        stream: &mut Self::Stream,
        source: &DeviceResource<Self::Stream>,
        out: &mut [u8],
    ) -> Result<(), ServerError>;

    /// Makes everything enqueued on `stream` from now on wait, on the device, for
    /// `fence`, recorded on another stream of the same device (CUDA: an event wait;
    /// Vulkan: a timeline-semaphore wait in the next submit). The host does not block.
    /// This is how the core orders a stream's work after another stream's writes and
    /// reads of the same memory (rule 18).
    ///
    /// The wait is itself enqueued work: a later [`fence`](DeviceStream::fence),
    /// [`sync`](Self::sync) or [`read`](Self::read) of `stream` is behind it even when
    /// nothing else was enqueued after it. The core relies on that: a stream that waits
    /// for another counts as following it, so a host read on it (after `begin`'s waits,
    /// say) waits for its own fence only. The core never calls it while `stream`
    /// records: inside a window nothing runs, and each replay is ordered instead.
    ///
    /// # Errors
    ///
    /// The driver's refusal to enqueue the wait; the core then fails the operation it
    /// was ordering.
    fn wait_for(
        stream: &mut Self::Stream,
        fence: &<Self::Stream as DeviceStream>::Fence,
    ) -> Result<(), ServerError>;

    /// Waits for everything enqueued on `stream`. The core never calls it while the
    /// stream records.
    ///
    /// # Errors
    ///
    /// An asynchronous error the wait reported.
    fn sync(stream: &mut Self::Stream) -> Result<(), ServerError>;

    /// Opens lane `to` of the window `stream` records, forked off lane `from` (rule 28):
    /// the operations the core records on `to` from here on (each handed its lane as
    /// the `lane` argument of [`launch`](Self::launch)) follow everything
    /// recorded on `from` so far, and may run beside what `from` records after this
    /// until a [`join_lane`](Self::join_lane). Called only while `stream` records. The
    /// default records every lane in program order on the one stream, which keeps every
    /// order the lanes ask for and overlaps nothing.
    ///
    /// # Errors
    ///
    /// The driver's refusal (an event it could not create or record); the core dooms
    /// the window.
    fn fork_lane(stream: &mut Self::Stream, from: Lane, to: Lane) -> Result<(), ServerError> {
        let _ = (stream, from, to);
        Ok(())
    }

    /// Joins lane `from` into lane `into` of the window `stream` records: what the core
    /// records on `into` from here on follows everything recorded on `from`, which
    /// records nothing more. Called only while `stream` records; every lane the core
    /// forked is joined before the window ends, or the window is doomed without the
    /// backend closing it into a graph. The default, like
    /// [`fork_lane`](Self::fork_lane)'s, has nothing to order.
    ///
    /// # Errors
    ///
    /// The driver's refusal; the core dooms the window.
    fn join_lane(stream: &mut Self::Stream, from: Lane, into: Lane) -> Result<(), ServerError> {
        let _ = (stream, from, into);
        Ok(())
    }
}
