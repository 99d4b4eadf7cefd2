//! `CudaBackend`: the core's backend traits over the CUDA driver API. Capture is CUDA's
//! relaxed mode, so the core calls the driver from whatever thread its user calls on
//! (under each stream's lock); every call makes the device's context current first.
//! One `Gpu` per device ordinal in the process: every backend value on it shares the
//! retained primary context and its capture domain. A context of the caller's
//! (`from_raw_context`, in `adopt.rs`) gets a `Gpu` of its own that never releases it,
//! sharing the capture domain of any other `Gpu` on the same context.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use capture_core::backend::{
    Backend, Builtins, CaptureDomain, DeviceStream, Dims, GraphDriver, KernelSignature, Lane,
    LaunchBuffer, LaunchLimits, LaunchParam, MAX_LAUNCH_BUFFERS, StreamSetup,
};
use capture_core::{
    Builtin, GraphUpdates, MAX_ALLOCATION_BYTES, MemoryKind, ProgrammaticLaunch, ServerError,
};

/// The dynamic shared memory every function may take without opting in.
const DEFAULT_SHARED: u32 = 48 << 10;

/// A launch's arguments as the driver takes them, in order: each buffer's address (and
/// length, for a builtin), each scalar's bytes, then the info words' address. A fixed
/// array: a launch allocates nothing.
fn pack<'a>(
    kernel: &CudaKernel,
    params: &'a [LaunchParam<CudaSlice>],
    info: Option<&CudaSlice>,
) -> ([raw::Argument<'a>; raw::MAX_ARGS], usize) {
    let mut args = [raw::Argument::Word(0); raw::MAX_ARGS];
    let mut count = 0;
    for p in params {
        match (kernel.abi, p) {
            (Abi::Pairs, LaunchParam::Buffer(b)) => {
                args[count] = raw::Argument::Word(b.resource.addr);
                args[count + 1] = raw::Argument::Word(b.resource.len);
                count += 2;
            }
            (Abi::Params, LaunchParam::Buffer(b)) => {
                args[count] = raw::Argument::Word(b.resource.addr);
                count += 1;
            }
            (_, LaunchParam::Scalar(v)) => {
                args[count] = raw::Argument::Bytes(v.bytes());
                count += 1;
            }
        }
    }
    if let Some(info) = info {
        args[count] = raw::Argument::Word(info.addr);
        count += 1;
    }
    (args, count)
}

/// What the user's work said when it failed.
#[derive(Debug)]
struct CudaWorkError(String);

impl std::fmt::Display for CudaWorkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CudaWorkError {}

use crate::error::Unavailable;
use crate::executable::CudaExecutable;
use crate::gpu::Gpu;
use crate::kernels::{self, Abi, CudaKernel, CudaKernelSource};
use crate::loops::{self, LoopGraph};
use crate::raw;
use crate::read_staging::ReadStaging;
use crate::shape::{GraphEdge, GraphShape};
use crate::storage::{CudaSlice, CudaStorage};
use crate::stream::{CudaFence, CudaStream};
use crate::work::{CudaRange, CudaWork};

/// A CUDA device. Cloning gives another handle on the same device.
#[derive(Clone, Debug)]
pub struct CudaBackend {
    pub(crate) gpu: Arc<Gpu>,
    /// What the driver made of the last window a device of this backend value sealed.
    pub(crate) shape: Arc<Mutex<Option<GraphShape>>>,
}

impl CudaBackend {
    /// Opens CUDA device `ordinal`, retaining its primary context. Nothing calls into
    /// the driver before the driver library is known to load.
    ///
    /// # Errors
    ///
    /// [`Unavailable`] saying why: no driver library, no device, the driver refused to
    /// start.
    pub fn new(ordinal: i32) -> Result<Self, Unavailable> {
        Ok(Self {
            gpu: Gpu::retained(ordinal)?,
            shape: Arc::default(),
        })
    }

    /// The nodes and edges of the last graph a device of this backend value (or a clone
    /// of it) sealed, as the driver reports them (`cuGraphGetEdges_v2`): its programmatic
    /// edges, a fork's fan-out and a join's fan-in, checked on a GPU as on the driver
    /// model. `None` before any seal, or on a driver before CUDA 12.3.
    pub fn last_graph_shape(&self) -> Option<GraphShape> {
        self.shape.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether the context is the caller's (handed over) rather than retained by
    /// [`CudaBackend::new`].
    pub fn context_is_callers(&self) -> bool {
        self.gpu.is_callers()
    }

    /// The device's ordinal.
    pub fn ordinal(&self) -> i32 {
        self.gpu.ordinal()
    }

    /// The device's name.
    pub fn device_name(&self) -> &str {
        self.gpu.name()
    }

    /// The device's compute capability.
    pub fn compute_capability(&self) -> (i32, i32) {
        self.gpu.compute
    }

    /// The CUDA version the driver supports, as `major.minor`.
    ///
    /// Programmatic dependent launch needs 12.3 or newer (and compute capability 9.0):
    /// an older driver is refused as a device without them (`programmatic_launch`).
    pub fn driver_version(&self) -> String {
        let driver = self.gpu.driver();
        format!("{}.{}", driver / 1000, (driver % 1000) / 10)
    }
}

impl GraphDriver for CudaBackend {
    type Stream = CudaStream;
    type Executable = CudaExecutable;

    fn begin(stream: &mut CudaStream) -> Result<(), ServerError> {
        let _current = raw::Current::enter(stream.gpu.context)?;
        stream.nodes.clear();
        stream.drop_edges();
        raw::begin_capture(stream.stream)
    }

    fn instantiate(
        stream: &mut CudaStream,
        doomed: Option<ServerError>,
    ) -> Result<CudaExecutable, ServerError> {
        let _current = raw::Current::enter(stream.gpu.context)?;
        if doomed.is_some() {
            // A doomed window may leave a branch unjoined (the core dooms it for that):
            // every lane stream the driver says is in the capture joins the origin back
            // first, so ending the capture leaves none of them capturing. CUDA documents
            // no release of a joined stream by the origin's end.
            stream.join_back();
        }
        // The driver capture is always closed first, doomed or not; the window's lane
        // events go with its executable, or now.
        let graph = raw::end_capture(stream.stream);
        let edges = std::mem::take(&mut stream.edges);
        let made = close(stream, graph, doomed);
        match made {
            Ok(mut executable) => {
                executable.edges = edges;
                // What the driver made of it, for a test to check on a GPU.
                if let Ok(Some((nodes, found))) = raw::graph_edges(executable.graph) {
                    let edges = found
                        .into_iter()
                        .map(|(from, to, programmatic)| GraphEdge {
                            from,
                            to,
                            programmatic,
                        })
                        .collect();
                    *stream.shape.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(GraphShape { nodes, edges });
                }
                Ok(executable)
            }
            Err(e) => {
                for event in edges {
                    raw::event_destroy(event);
                }
                Err(e)
            }
        }
    }

    fn upload(stream: &mut CudaStream, executable: &CudaExecutable) -> Result<(), ServerError> {
        let _current = raw::Current::enter(stream.gpu.context)?;
        raw::upload(executable.exec, stream.stream)
    }

    fn replay(
        stream: &mut CudaStream,
        executable: &CudaExecutable,
        times: u32,
    ) -> Result<(), ServerError> {
        let _current = raw::Current::enter(stream.gpu.context)?;
        for _ in 0..times {
            raw::launch_graph(executable.exec, stream.stream)?;
        }
        Ok(())
    }

    /// The executable's loop graph (`loops.rs`; built at its first loop replay, or again
    /// over another flag or counter), `max` set in it, then launched once.
    fn replay_loop(
        stream: &mut CudaStream,
        executable: &CudaExecutable,
        max: u32,
        flag: &CudaSlice,
        counter: &CudaSlice,
    ) -> Result<(), ServerError> {
        let _current = raw::Current::enter(stream.gpu.context)?;
        let mut loops = executable.loops.lock().unwrap_or_else(|p| p.into_inner());
        if !loops
            .last()
            .is_some_and(|l| l.serves(flag.addr, counter.addr))
        {
            let pool = stream.loops.clone().or_else(|| stream.gpu.loops.live());
            let built = LoopGraph::build(pool, executable.graph, flag.addr, counter.addr, max)?;
            loops.push(built);
        }
        loops
            .last_mut()
            .expect("a loop graph was just made")
            .launch(stream.stream, max)
    }

    /// Relaxed mode: `cuMemAlloc` elsewhere leaves a capture valid.
    fn allocation_breaks_capture() -> bool {
        false
    }

    /// A module load may synchronise the context, which no capture may overlap.
    fn load_breaks_capture() -> bool {
        true
    }

    /// Relaxed mode: a capture ends on any thread.
    fn thread_affine() -> bool {
        false
    }
}

impl Backend for CudaBackend {
    type KernelSource = CudaKernelSource;
    type Kernel = CudaKernel;
    type Work = CudaWork;

    /// Pooled stream 0 runs on the caller's stream, if one was handed over and no other
    /// pooled stream holds it; every other stream is a new non-blocking one.
    fn create_stream(&self, setup: &StreamSetup) -> Result<CudaStream, ServerError> {
        let _current = raw::Current::enter(self.gpu.context)?;
        let lent = match setup.index() {
            0 => self
                .gpu
                .lent
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
            _ => None,
        };
        let stream = match lent {
            Some(stream) => stream,
            None => raw::stream_create()?,
        };
        Ok(CudaStream {
            gpu: Arc::clone(&self.gpu),
            stream,
            lent: lent.is_some(),
            read_staging: ReadStaging::default(),
            state: setup.state(
                CudaStorage::new(Arc::clone(&self.gpu), MemoryKind::Device),
                CudaStorage::new(Arc::clone(&self.gpu), MemoryKind::Host),
            ),
            nodes: Vec::new(),
            lanes: Vec::new(),
            edges: Vec::new(),
            shape: Arc::clone(&self.shape),
            loops: None,
        })
    }

    fn kernel_name(source: &CudaKernelSource) -> Cow<'static, str> {
        source.name().clone()
    }

    fn signature(source: &CudaKernelSource) -> KernelSignature {
        source.signature()
    }

    /// CUDA's: arguments are 16-byte aligned for vector loads, grids run up to
    /// `2^31 - 1` blocks in x and 65,535 in y and z; blocks and dynamic shared memory as
    /// the driver reports the device's (shared memory past 48 KiB is opted into per
    /// launch); 4,096 bytes of parameters, 8 per buffer (the parameter space every CUDA
    /// version gives); programmatic dependent launch on compute capability 9.0 or later
    /// (`programmatic_launch`).
    fn launch_limits(&self) -> LaunchLimits {
        let attrs = self.gpu.launch;
        LaunchLimits::new(16, MAX_ALLOCATION_BYTES, [i32::MAX as u32, 65_535, 65_535])
            .expect("CUDA's limits are valid")
            .with_block(attrs.max_block, attrs.max_threads)
            .with_shared(attrs.max_shared)
            .with_params(4096, 8, MAX_LAUNCH_BUFFERS)
            .with_programmatic(programmatic_launch(self.gpu.compute, self.gpu.driver()))
            .with_graph_updates(GraphUpdates::Supported)
            .with_loops(loops::device_loops(self.gpu.compute, self.gpu.driver()))
    }

    /// The context's: every device on this GPU in the process shares it.
    fn capture_domain(&self) -> CaptureDomain {
        self.gpu.domain()
    }

    fn load(stream: &mut CudaStream, source: &CudaKernelSource) -> Result<CudaKernel, ServerError> {
        let _current = raw::Current::enter(stream.gpu.context)?;
        // No capture of the context overlaps a kernel's load: the loop setter's module
        // (rule 30) loads with the device's first, and the stream holds it.
        if stream.loops.is_none() {
            let gpu = &stream.gpu;
            stream.loops = gpu.loops.pool(
                Arc::clone(gpu) as Arc<dyn Send + Sync>,
                gpu.context,
                gpu.compute,
                gpu.driver(),
            );
        }
        kernels::load(&stream.gpu, source)
    }

    fn launch(
        stream: &mut CudaStream,
        lane: Lane,
        kernel: &CudaKernel,
        dims: &Dims,
        params: &[LaunchParam<CudaSlice>],
        info: Option<&CudaSlice>,
    ) -> Result<(), ServerError> {
        let _current = raw::Current::enter(stream.gpu.context)?;
        let on = stream.target(lane);
        let (args, count) = pack(kernel, params, info);
        let block = dims.block_shape().unwrap_or(kernel.block);
        if dims.shared() > DEFAULT_SHARED {
            raw::allow_shared(kernel.function, dims.shared())?;
        }
        // The core let a programmatic launch through only for a kernel that waits for
        // its grid dependency, on a device that has them (`launch_limits`).
        let launch = if dims.is_programmatic() {
            raw::launch_programmatic
        } else {
            raw::launch
        };
        launch(
            kernel.function,
            dims.grid_shape(),
            block,
            dims.shared(),
            on,
            &args[..count],
        )?;
        if stream.capturing().is_recording() {
            // No slot names it: no update ever names its node.
            stream.nodes.push(None);
        }
        Ok(())
    }

    /// As [`launch`](Backend::launch), noting the graph node the launch made (the
    /// stream's capture frontier right after it) for a slot's update (rule 26): asked of
    /// the driver only for a launch naming a slot.
    fn launch_updatable(
        stream: &mut CudaStream,
        lane: Lane,
        kernel: &CudaKernel,
        dims: &Dims,
        params: &[LaunchParam<CudaSlice>],
        info: Option<&CudaSlice>,
    ) -> Result<(), ServerError> {
        Self::launch(stream, lane, kernel, dims, params, info)?;
        let _current = raw::Current::enter(stream.gpu.context)?;
        let on = stream.target(lane);
        let node = raw::last_captured_node(on)?;
        if let Some(last) = stream.nodes.last_mut() {
            *last = node;
        }
        Ok(())
    }

    /// `cuGraphExecKernelNodeSetParams` on the node the launch made: launches of the
    /// executable enqueued before it keep their parameters, later ones see these. The
    /// captured graph's node is set too (`cuGraphKernelNodeSetParams`: a loop graph is
    /// cloned from it), and where a loop replay made the executable's loop graph, its
    /// child graph node is set from it (`cuGraphExecChildGraphNodeSetParams`): loops
    /// enqueued later see the update, queued ones do not.
    fn update_launch(
        stream: &mut CudaStream,
        executable: &mut CudaExecutable,
        node: u64,
        kernel: &CudaKernel,
        dims: &Dims,
        params: &[LaunchParam<CudaSlice>],
        info: Option<&CudaSlice>,
    ) -> Result<(), ServerError> {
        let _current = raw::Current::enter(stream.gpu.context)?;
        let Some(&Some(handle)) = executable.nodes.get(node as usize) else {
            return Err(ServerError::driver(
                "cuGraphExecKernelNodeSetParams",
                CudaWorkError(format!(
                    "recorded launch {node} made no single kernel node the graph can update"
                )),
            ));
        };
        let (args, count) = pack(kernel, params, info);
        if dims.shared() > DEFAULT_SHARED {
            raw::allow_shared(kernel.function, dims.shared())?;
        }
        let (grid, block) = (
            dims.grid_shape(),
            dims.block_shape().unwrap_or(kernel.block),
        );
        raw::set_kernel_node(
            executable.exec,
            handle,
            kernel.function,
            grid,
            block,
            dims.shared(),
            &args[..count],
        )?;
        // The captured graph keeps the parameters too: a loop graph is cloned from it
        // (now, or at its first loop replay).
        raw::set_graph_kernel_node(
            handle,
            kernel.function,
            grid,
            block,
            dims.shared(),
            &args[..count],
        )?;
        let loops = executable
            .loops
            .get_mut()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(looped) = loops.last() {
            looped.refresh(executable.graph)?;
        }
        Ok(())
    }

    fn work_name(work: &CudaWork) -> Cow<'static, str> {
        work.name()
    }

    fn run_work(
        stream: &mut CudaStream,
        lane: Lane,
        work: &CudaWork,
        buffers: &[LaunchBuffer<CudaSlice>],
    ) -> Result<(), ServerError> {
        let _current = raw::Current::enter(stream.gpu.context)?;
        let ranges: Vec<CudaRange> = buffers
            .iter()
            .map(|b| CudaRange {
                ptr: b.resource.addr,
                bytes: b.resource.len,
                access: b.access,
            })
            .collect();
        if stream.capturing().is_recording() {
            // Work may make many nodes, or none: no slot names it.
            stream.nodes.push(None);
        }
        let on = stream.target(lane);
        work.call(on, &ranges).map_err(|why| {
            ServerError::driver(
                "work",
                CudaWorkError(format!("work {} failed: {why}", work.name())),
            )
        })
    }

    fn write(
        stream: &mut CudaStream,
        lane: Lane,
        staging: &CudaSlice,
        destination: &CudaSlice,
        bytes: &[u8],
    ) -> Result<(), ServerError> {
        let _current = raw::Current::enter(stream.gpu.context)?;
        let len = bytes.len().min(staging.len as usize);
        raw::write_host(staging.addr as usize, &bytes[..len]);
        let on = stream.target(lane);
        raw::copy_to_device(destination.addr, staging.addr as usize, len, on)
    }

    fn read(
        stream: &mut CudaStream,
        source: &CudaSlice,
        out: &mut [u8],
    ) -> Result<(), ServerError> {
        let _current = raw::Current::enter(stream.gpu.context)?;
        let gpu = Arc::clone(&stream.gpu);
        stream
            .read_staging
            .read(&gpu, stream.stream, source.addr, out)
    }

    fn wait_for(stream: &mut CudaStream, fence: &CudaFence) -> Result<(), ServerError> {
        fence.order(stream.stream)
    }

    fn sync(stream: &mut CudaStream) -> Result<(), ServerError> {
        let _current = raw::Current::enter(stream.gpu.context)?;
        raw::stream_sync(stream.stream)
    }

    /// Lane `to` records on a stream of its own (made at its first fork, kept for later
    /// windows), joined to the capture by an event recorded on `from`'s stream: CUDA
    /// orders it after what `from` recorded so far and lets it run beside the rest.
    fn fork_lane(stream: &mut CudaStream, from: Lane, to: Lane) -> Result<(), ServerError> {
        let _current = raw::Current::enter(stream.gpu.context)?;
        while stream.lanes.len() < to.index() {
            let made = raw::stream_create()?;
            stream.lanes.push(made);
        }
        let edge = raw::capture_edge(stream.lane_stream(from), stream.lane_stream(to))?;
        stream.edges.push(edge);
        Ok(())
    }

    /// An event recorded on `from`'s stream and waited on by `into`'s: what `into`
    /// records from here on follows the branch, and the branch's stream has nothing
    /// left unjoined when the origin's capture ends.
    fn join_lane(stream: &mut CudaStream, from: Lane, into: Lane) -> Result<(), ServerError> {
        let _current = raw::Current::enter(stream.gpu.context)?;
        let edge = raw::capture_edge(stream.lane_stream(from), stream.lane_stream(into))?;
        stream.edges.push(edge);
        Ok(())
    }
}

/// The executable of a closed capture's graph, or why there is none (the graph
/// destroyed): the doom the core gave, the driver's refusal, allocation nodes.
fn close(
    stream: &CudaStream,
    graph: Result<usize, ServerError>,
    doomed: Option<ServerError>,
) -> Result<CudaExecutable, ServerError> {
    let graph = match (graph, doomed) {
        (Ok(graph), Some(doomed)) => {
            raw::graph_destroy(graph);
            return Err(doomed);
        }
        (Err(e), doomed) => return Err(doomed.unwrap_or(e)),
        (Ok(graph), None) => graph,
    };
    match raw::memory_nodes(graph) {
        Ok(0) => {}
        Ok(count) => {
            raw::graph_destroy(graph);
            return Err(ServerError::AllocationNodes { count });
        }
        Err(e) => {
            raw::graph_destroy(graph);
            return Err(e);
        }
    }
    match raw::instantiate(graph) {
        Ok(exec) => Ok(CudaExecutable {
            gpu: Arc::clone(&stream.gpu),
            graph,
            exec,
            // A copy, so the stream keeps its room for the next window's launches
            // (a recorded launch allocates nothing once warm).
            nodes: stream.nodes.clone(),
            edges: Vec::new(),
            loops: Mutex::default(),
        }),
        Err(e) => {
            raw::graph_destroy(graph);
            Err(e)
        }
    }
}

/// The oldest driver (`cuDriverGetVersion`) whose graphs keep a programmatic launch's
/// edge (CUDA 12.3: programmatic edges in graphs, and in what a capture makes of
/// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`).
pub(crate) const PROGRAMMATIC_DRIVER: i32 = 12030;

/// Whether a device of compute capability `compute` under a driver of version `driver`
/// runs programmatic dependent launches: from 9.0 (Hopper) on, where `griddepcontrol`
/// exists (an older device would serialise them, and the kernels that wait cannot be
/// built for it), under CUDA 12.3 or newer.
pub(crate) fn programmatic_launch(compute: (i32, i32), driver: i32) -> ProgrammaticLaunch {
    if compute.0 < 9 {
        ProgrammaticLaunch::Unsupported(
            "this CUDA device runs no programmatic dependent launch (compute capability 9.0 \
             or later does)",
        )
    } else if driver < PROGRAMMATIC_DRIVER {
        ProgrammaticLaunch::Unsupported(
            "this CUDA driver keeps no programmatic edge in a graph (CUDA 12.3, driver 545, \
             or newer does)",
        )
    } else {
        ProgrammaticLaunch::Supported
    }
}

impl Builtins for CudaBackend {
    fn builtin(kernel: Builtin) -> CudaKernelSource {
        CudaKernelSource::builtin(kernel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programmatic_launch_comes_with_compute_capability_9_under_cuda_12_3() {
        for compute in [(9, 0), (10, 0), (12, 0)] {
            for driver in [12030, 12090, 13000] {
                assert_eq!(
                    programmatic_launch(compute, driver),
                    ProgrammaticLaunch::Supported
                );
            }
            let ProgrammaticLaunch::Unsupported(why) = programmatic_launch(compute, 12020) else {
                panic!("CUDA 12.2 keeps no programmatic edge");
            };
            assert!(why.contains("CUDA 12.3"), "{why}");
        }
        for compute in [(8, 0), (8, 9), (7, 5)] {
            let ProgrammaticLaunch::Unsupported(why) = programmatic_launch(compute, 12090) else {
                panic!("{compute:?} has no griddepcontrol");
            };
            assert!(why.contains("compute capability 9.0"), "{why}");
        }
    }
}
